package formula

import (
	"strings"
	"unicode/utf8"
)

// Limits on one formula. Parse reports a formula over any of them as a
// TooComplex error.
const (
	// MaxLength is the most bytes of source.
	MaxLength = 10_000
	// MaxDepth is the deepest nesting: of operations within operations
	// and calls within calls (the height of the parsed tree), and of
	// parentheses.
	MaxDepth = 64
	// MaxNodes is the most literals, field references, operations and
	// calls in one formula.
	MaxNodes = 1_000
)

// parser reads a token list by recursive descent.
type parser struct {
	toks  []token
	i     int
	nest  int // parentheses, calls and unary minus being read
	nodes int
}

// Parse parses a formula. Its errors are *Error: Syntax, UnknownFunction
// (a call of a function the language does not have) or TooComplex.
func Parse(src string) (Node, error) {
	if len(src) > MaxLength {
		return nil, errorf(TooComplex, MaxLength, "", "the formula is longer than %d bytes", MaxLength)
	}
	if !utf8.ValidString(src) {
		for i, r := range src {
			if r == utf8.RuneError {
				if _, size := utf8.DecodeRuneInString(src[i:]); size <= 1 {
					return nil, errorf(Syntax, i, "", "invalid UTF-8")
				}
			}
		}
	}
	if i := strings.IndexByte(src, 0); i >= 0 {
		return nil, errorf(Syntax, i, "", "unexpected NUL character")
	}
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	if toks[0].kind == tEOF {
		return nil, errorf(Syntax, 0, "", "the formula is empty")
	}
	p := &parser{toks: toks}
	n, err := p.expr()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, errorf(Syntax, t.pos, "", "unexpected %s", t.describe())
	}
	return n, nil
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

// enter starts reading something nested (a parenthesized expression, a
// call's arguments, a negated operand); leave ends it.
func (p *parser) enter(pos int) error {
	p.nest++
	if p.nest > MaxDepth {
		return errorf(TooComplex, pos, "", "the formula nests deeper than %d levels", MaxDepth)
	}
	return nil
}

func (p *parser) leave() { p.nest-- }

// count counts a new node and checks its height.
func (p *parser) count(n Node) (Node, error) {
	p.nodes++
	if p.nodes > MaxNodes {
		return nil, errorf(TooComplex, n.Pos(), "", "the formula has more than %d parts", MaxNodes)
	}
	if n.depth() > MaxDepth {
		return nil, errorf(TooComplex, n.Pos(), "", "the formula nests deeper than %d levels", MaxDepth)
	}
	return n, nil
}

// levels are the binary operators by precedence, lowest first; all are
// left-associative.
var levels = [][]string{
	{"=", "!=", "<>", "<", "<=", ">", ">="},
	{"&"},
	{"+", "-"},
	{"*", "/"},
}

func (p *parser) expr() (Node, error) { return p.binary(0) }

func (p *parser) binary(level int) (Node, error) {
	if level == len(levels) {
		return p.unary()
	}
	l, err := p.binary(level + 1)
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		if t.kind != tOp || !hasOp(levels[level], t.text) {
			return l, nil
		}
		p.next()
		r, err := p.binary(level + 1)
		if err != nil {
			return nil, err
		}
		op := t.text
		if op == "<>" {
			op = "!="
		}
		if l, err = p.count(&binary{pos: t.pos, op: op, l: l, r: r, h: 1 + max(l.depth(), r.depth())}); err != nil {
			return nil, err
		}
	}
}

func hasOp(ops []string, op string) bool {
	for _, o := range ops {
		if o == op {
			return true
		}
	}
	return false
}

func (p *parser) unary() (Node, error) {
	t := p.peek()
	if t.kind != tOp || t.text != "-" {
		return p.primary()
	}
	p.next()
	if err := p.enter(t.pos); err != nil {
		return nil, err
	}
	x, err := p.unary()
	p.leave()
	if err != nil {
		return nil, err
	}
	return p.count(&negate{pos: t.pos, x: x, h: 1 + x.depth()})
}

func (p *parser) primary() (Node, error) {
	t := p.next()
	switch t.kind {
	case tNumber:
		return p.count(&numberLit{pos: t.pos, v: t.num})
	case tString:
		return p.count(&textLit{pos: t.pos, v: t.text})
	case tField:
		return p.count(&fieldRef{pos: t.pos, name: t.text})
	case tLParen:
		if err := p.enter(t.pos); err != nil {
			return nil, err
		}
		x, err := p.expr()
		p.leave()
		if err != nil {
			return nil, err
		}
		if c := p.next(); c.kind != tRParen {
			return nil, errorf(Syntax, c.pos, "", "expected ')' but found %s", c.describe())
		}
		return x, nil
	case tIdent:
		if p.peek().kind == tLParen {
			return p.call(t)
		}
		switch strings.ToUpper(t.text) {
		case "TRUE":
			return p.count(&boolLit{pos: t.pos, v: true})
		case "FALSE":
			return p.count(&boolLit{pos: t.pos, v: false})
		}
		return p.count(&fieldRef{pos: t.pos, name: t.text})
	case tEOF:
		return nil, errorf(Syntax, t.pos, "", "unexpected end of formula")
	}
	return nil, errorf(Syntax, t.pos, "", "unexpected %s", t.describe())
}

// call reads a function call whose name is the token name, at the '('.
func (p *parser) call(name token) (Node, error) {
	upper := strings.ToUpper(name.text)
	if _, ok := functions[upper]; !ok {
		return nil, errorf(UnknownFunction, name.pos, name.text, "unknown function %s", name.text)
	}
	open := p.next()
	if err := p.enter(open.pos); err != nil {
		return nil, err
	}
	defer p.leave()
	c := &call{pos: name.pos, name: upper}
	if p.peek().kind == tRParen {
		p.next()
	} else {
		for {
			a, err := p.expr()
			if err != nil {
				return nil, err
			}
			c.args = append(c.args, a)
			t := p.next()
			if t.kind == tRParen {
				break
			}
			if t.kind != tComma {
				return nil, errorf(Syntax, t.pos, "", "expected ',' or ')' but found %s", t.describe())
			}
		}
	}
	c.h = 1
	for _, a := range c.args {
		c.h = max(c.h, 1+a.depth())
	}
	return p.count(c)
}
