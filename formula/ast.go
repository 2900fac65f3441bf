package formula

import (
	"strconv"
	"strings"
)

// Node is a parsed formula, made by Parse. Its String is the formula in a
// canonical form (every operation parenthesized, names of functions in
// upper case, strings in double quotes, fields in braces) that Parse reads
// back to the same Node.
type Node interface {
	// Pos is the byte offset in the source where the node starts (for an
	// operation, where its operator is).
	Pos() int
	// String is the node as formula source, in canonical form.
	String() string
	// depth is the height of the node's tree: 1 for a leaf.
	depth() int
}

type (
	numberLit struct {
		pos int
		v   float64
	}
	textLit struct {
		pos int
		v   string
	}
	boolLit struct {
		pos int
		v   bool
	}
	fieldRef struct {
		pos  int
		name string
	}
	negate struct {
		pos int
		x   Node
		h   int
	}
	binary struct {
		pos  int
		op   string // = != < <= > >= & + - * /
		l, r Node
		h    int
	}
	call struct {
		pos  int
		name string // upper case
		args []Node
		h    int
	}
)

func (n *numberLit) Pos() int { return n.pos }
func (n *textLit) Pos() int   { return n.pos }
func (n *boolLit) Pos() int   { return n.pos }
func (n *fieldRef) Pos() int  { return n.pos }
func (n *negate) Pos() int    { return n.pos }
func (n *binary) Pos() int    { return n.pos }
func (n *call) Pos() int      { return n.pos }

func (n *numberLit) depth() int { return 1 }
func (n *textLit) depth() int   { return 1 }
func (n *boolLit) depth() int   { return 1 }
func (n *fieldRef) depth() int  { return 1 }
func (n *negate) depth() int    { return n.h }
func (n *binary) depth() int    { return n.h }
func (n *call) depth() int      { return n.h }

func (n *numberLit) String() string { return strconv.FormatFloat(n.v, 'g', -1, 64) }
func (n *textLit) String() string   { return quote(n.v) }
func (n *fieldRef) String() string  { return "{" + n.name + "}" }
func (n *negate) String() string    { return "-" + n.x.String() }

func (n *boolLit) String() string {
	if n.v {
		return "TRUE"
	}
	return "FALSE"
}

func (n *binary) String() string {
	return "(" + n.l.String() + " " + n.op + " " + n.r.String() + ")"
}

func (n *call) String() string {
	var b strings.Builder
	b.WriteString(n.name)
	b.WriteByte('(')
	for i, a := range n.args {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(a.String())
	}
	b.WriteByte(')')
	return b.String()
}

// quote is s as a double-quoted formula string.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Fields lists the names of the fields a formula refers to, each once, in
// the order they first appear.
func Fields(n Node) []string {
	var out []string
	seen := map[string]bool{}
	var walk func(Node)
	walk = func(n Node) {
		switch n := n.(type) {
		case *fieldRef:
			if !seen[n.name] {
				seen[n.name] = true
				out = append(out, n.name)
			}
		case *negate:
			walk(n.x)
		case *binary:
			walk(n.l)
			walk(n.r)
		case *call:
			for _, a := range n.args {
				walk(a)
			}
		}
	}
	if n != nil {
		walk(n)
	}
	return out
}
