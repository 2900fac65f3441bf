// Package formula is Airtable's formula language: a parser, and a compiler
// of a parsed formula to one typed SQL expression on a row's cells, with
// every literal value a parameter. Airtable's filterByFormula uses it
// (package airtable), and a formula field type could reuse Compile.
//
// What is supported: field references ({Field name}, or a bare one-word
// name), strings in single or double quotes with backslash escapes,
// numbers, TRUE and FALSE, the operators = != <> < <= > >= & + - * / with
// Airtable's precedence (comparisons lowest, then &, then + -, then * /,
// then unary minus), and the functions AND OR NOT IF BLANK TRUE FALSE FIND
// SEARCH LEN LOWER UPPER TRIM IS_BEFORE IS_AFTER DATETIME_DIFF TODAY NOW.
//
// Blank cells behave as in Airtable: an empty number reads as 0 and empty
// text as "" in comparisons and arithmetic, an empty checkbox as false, and
// BLANK() takes the type of what it is compared with; an empty date compares
// false with < and > and true with = BLANK(). The SQL never fails on a
// cell: no text is cast to a number or a date in SQL (a text literal that
// must be a date is parsed here), and a division by zero is blank.
package formula

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on one formula.
const (
	MaxLength = 10_000 // bytes of source
	MaxDepth  = 256    // depth of the parse: about five for each nested call or parenthesis
	MaxNodes  = 1_000
)

// ErrorKind says what is wrong with a formula.
type ErrorKind int

// The kinds of Error.
const (
	Syntax ErrorKind = iota
	UnknownFunction
	UnknownField
	TypeMismatch
	TooComplex
)

// Error is a formula's error: its kind, where in the source (a byte
// offset), the function or field it names, and a short message.
type Error struct {
	Kind    ErrorKind
	Pos     int
	Name    string
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%s at %d", e.Message, e.Pos) }

func errAt(kind ErrorKind, pos int, name, format string, args ...any) *Error {
	return &Error{Kind: kind, Pos: pos, Name: name, Message: fmt.Sprintf(format, args...)}
}

// Node is a parsed formula.
type Node interface{ pos() int }

type (
	numLit struct {
		at int
		v  float64
	}
	strLit struct {
		at int
		v  string
	}
	boolLit struct {
		at int
		v  bool
	}
	fieldRef struct {
		at   int
		name string
	}
	unary struct {
		at int
		x  Node
	}
	binary struct {
		at   int
		op   string
		l, r Node
	}
	call struct {
		at   int
		name string // upper case
		args []Node
	}
)

func (n numLit) pos() int   { return n.at }
func (n strLit) pos() int   { return n.at }
func (n boolLit) pos() int  { return n.at }
func (n fieldRef) pos() int { return n.at }
func (n unary) pos() int    { return n.at }
func (n binary) pos() int   { return n.at }
func (n call) pos() int     { return n.at }

type token struct {
	kind byte // 'n' number, 's' string, 'f' {field}, 'i' identifier, 'o' operator, '(' ')' ',', 0 end
	text string
	num  float64
	at   int
}

type parser struct {
	src   string
	toks  []token
	i     int
	depth int
	nodes int
}

// Parse parses a formula; errors are *Error.
func Parse(src string) (Node, error) {
	if len(src) > MaxLength {
		return nil, errAt(TooComplex, 0, "", "the formula is longer than %d bytes", MaxLength)
	}
	if !utf8.ValidString(src) {
		return nil, errAt(Syntax, 0, "", "the formula is not valid UTF-8")
	}
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{src: src, toks: toks}
	n, err := p.expr()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != 0 {
		return nil, errAt(Syntax, t.at, "", "unexpected %q", t.text)
	}
	return n, nil
}

func lex(src string) ([]token, error) {
	var out []token
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(src) && src[i+1] >= '0' && src[i+1] <= '9':
			j := i
			for j < len(src) && (src[j] >= '0' && src[j] <= '9' || src[j] == '.') {
				j++
			}
			if j < len(src) && (src[j] == 'e' || src[j] == 'E') {
				k := j + 1
				if k < len(src) && (src[k] == '+' || src[k] == '-') {
					k++
				}
				if k < len(src) && src[k] >= '0' && src[k] <= '9' {
					for k < len(src) && src[k] >= '0' && src[k] <= '9' {
						k++
					}
					j = k
				}
			}
			v, err := strconv.ParseFloat(src[i:j], 64)
			if err != nil {
				return nil, errAt(Syntax, i, "", "%q is not a number", src[i:j])
			}
			out = append(out, token{kind: 'n', text: src[i:j], num: v, at: i})
			i = j
		case c == '"' || c == '\'':
			var b strings.Builder
			j := i + 1
			for {
				if j >= len(src) {
					return nil, errAt(Syntax, i, "", "a string is not closed")
				}
				if src[j] == c {
					break
				}
				if src[j] == '\\' && j+1 < len(src) {
					j++
					switch src[j] {
					case 'n':
						b.WriteByte('\n')
					case 't':
						b.WriteByte('\t')
					default:
						b.WriteByte(src[j])
					}
					j++
					continue
				}
				b.WriteByte(src[j])
				j++
			}
			out = append(out, token{kind: 's', text: b.String(), at: i})
			i = j + 1
		case c == '{':
			j := strings.IndexByte(src[i:], '}')
			if j < 0 {
				return nil, errAt(Syntax, i, "", "a field reference is not closed with }")
			}
			out = append(out, token{kind: 'f', text: src[i+1 : i+j], at: i})
			i += j + 1
		case c == '(' || c == ')' || c == ',':
			out = append(out, token{kind: c, text: string(c), at: i})
			i++
		case strings.ContainsRune("=<>!&+-*/", rune(c)):
			op := string(c)
			if i+1 < len(src) {
				two := src[i : i+2]
				if two == "!=" || two == "<=" || two == ">=" || two == "<>" {
					op = two
				}
			}
			if op == "!" {
				return nil, errAt(Syntax, i, "", "unexpected !; use != or NOT()")
			}
			out = append(out, token{kind: 'o', text: op, at: i})
			i += len(op)
		default:
			r, size := utf8.DecodeRuneInString(src[i:])
			if !unicode.IsLetter(r) && r != '_' {
				return nil, errAt(Syntax, i, "", "unexpected %q", string(r))
			}
			j := i + size
			for j < len(src) {
				r, size := utf8.DecodeRuneInString(src[j:])
				if !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' {
					break
				}
				j += size
			}
			out = append(out, token{kind: 'i', text: src[i:j], at: i})
			i = j
		}
	}
	return append(out, token{at: len(src)}), nil
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != 0 {
		p.i++
	}
	return t
}

func (p *parser) enter(at int) error {
	p.depth++
	p.nodes++
	if p.depth > MaxDepth {
		return errAt(TooComplex, at, "", "the formula nests deeper than %d", MaxDepth)
	}
	if p.nodes > MaxNodes {
		return errAt(TooComplex, at, "", "the formula has more than %d parts", MaxNodes)
	}
	return nil
}

// Binary levels, lowest first.
var levels = [][]string{{"=", "!=", "<>", "<", "<=", ">", ">="}, {"&"}, {"+", "-"}, {"*", "/"}}

func (p *parser) expr() (Node, error) { return p.level(0) }

func (p *parser) level(l int) (Node, error) {
	if l == len(levels) {
		return p.unary()
	}
	if err := p.enter(p.peek().at); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	left, err := p.level(l + 1)
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		if t.kind != 'o' || !contains(levels[l], t.text) {
			return left, nil
		}
		p.next()
		if err := p.enter(t.at); err != nil {
			return nil, err
		}
		right, err := p.level(l + 1)
		p.depth--
		if err != nil {
			return nil, err
		}
		op := t.text
		if op == "<>" {
			op = "!="
		}
		left = binary{at: t.at, op: op, l: left, r: right}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func (p *parser) unary() (Node, error) {
	t := p.peek()
	if t.kind == 'o' && (t.text == "-" || t.text == "+") {
		p.next()
		if err := p.enter(t.at); err != nil {
			return nil, err
		}
		x, err := p.unary()
		p.depth--
		if err != nil {
			return nil, err
		}
		if t.text == "+" {
			return x, nil
		}
		return unary{at: t.at, x: x}, nil
	}
	return p.primary()
}

func (p *parser) primary() (Node, error) {
	t := p.next()
	switch t.kind {
	case 'n':
		return numLit{at: t.at, v: t.num}, nil
	case 's':
		return strLit{at: t.at, v: t.text}, nil
	case 'f':
		return fieldRef{at: t.at, name: t.text}, nil
	case '(':
		if err := p.enter(t.at); err != nil {
			return nil, err
		}
		x, err := p.expr()
		p.depth--
		if err != nil {
			return nil, err
		}
		if c := p.next(); c.kind != ')' {
			return nil, errAt(Syntax, c.at, "", "expected ')'")
		}
		return x, nil
	case 'i':
		if p.peek().kind == '(' {
			return p.call(t)
		}
		switch strings.ToUpper(t.text) {
		case "TRUE":
			return boolLit{at: t.at, v: true}, nil
		case "FALSE":
			return boolLit{at: t.at, v: false}, nil
		}
		return fieldRef{at: t.at, name: t.text}, nil
	case 0:
		return nil, errAt(Syntax, t.at, "", "the formula ends too soon")
	}
	return nil, errAt(Syntax, t.at, "", "unexpected %q", t.text)
}

func (p *parser) call(name token) (Node, error) {
	p.next() // (
	if err := p.enter(name.at); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	c := call{at: name.at, name: strings.ToUpper(name.text)}
	if p.peek().kind == ')' {
		p.next()
		return c, nil
	}
	for {
		a, err := p.expr()
		if err != nil {
			return nil, err
		}
		c.args = append(c.args, a)
		switch t := p.next(); t.kind {
		case ',':
		case ')':
			return c, nil
		default:
			return nil, errAt(Syntax, t.at, "", "expected ',' or ')' in %s()", c.name)
		}
	}
}
