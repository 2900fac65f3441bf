package formula

import (
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// tokenKind is the kind of a token.
type tokenKind int

const (
	tEOF    tokenKind = iota
	tNumber           // 12, 1.5, .5, 1e3
	tString           // 'text' or "text", unescaped in token.text
	tField            // {Field name}, the name in token.text
	tIdent            // a bare word: a function name, TRUE, FALSE or a field
	tOp               // = != <> < <= > >= & + - * /
	tLParen
	tRParen
	tComma
)

// token is one lexical element of a formula.
type token struct {
	kind tokenKind
	text string  // the operator, identifier, string value or field name
	num  float64 // a number's value
	pos  int     // byte offset of its first character
}

// describe is how an error message names the token.
func (t token) describe() string {
	switch t.kind {
	case tEOF:
		return "end of formula"
	case tNumber:
		return "number " + strconv.FormatFloat(t.num, 'g', -1, 64)
	case tString:
		return "string"
	case tField:
		return "field {" + t.text + "}"
	case tIdent:
		return t.text
	}
	return "'" + t.text + "'"
}

// lex splits src into tokens, ending with a tEOF token.
func lex(src string) ([]token, error) {
	var out []token
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '(':
			out = append(out, token{kind: tLParen, text: "(", pos: i})
			i++
		case c == ')':
			out = append(out, token{kind: tRParen, text: ")", pos: i})
			i++
		case c == ',':
			out = append(out, token{kind: tComma, text: ",", pos: i})
			i++
		case c == '\'' || c == '"':
			t, n, err := lexString(src, i)
			if err != nil {
				return nil, err
			}
			out = append(out, t)
			i = n
		case c == '{':
			end := strings.IndexByte(src[i+1:], '}')
			if end < 0 {
				return nil, errorf(Syntax, i, "", "unclosed field reference: expected '}'")
			}
			name := src[i+1 : i+1+end]
			if strings.TrimSpace(name) == "" {
				return nil, errorf(Syntax, i, "", "empty field name")
			}
			out = append(out, token{kind: tField, text: name, pos: i})
			i += end + 2
		case isDigit(c) || c == '.' && i+1 < len(src) && isDigit(src[i+1]):
			t, n, err := lexNumber(src, i)
			if err != nil {
				return nil, err
			}
			out = append(out, t)
			i = n
		case strings.IndexByte("=!<>&+-*/", c) >= 0:
			op := src[i : i+1]
			if i+1 < len(src) {
				switch two := src[i : i+2]; two {
				case "!=", "<>", "<=", ">=":
					op = two
				}
			}
			if op == "!" {
				return nil, errorf(Syntax, i, "", "unexpected '!': use != or NOT()")
			}
			out = append(out, token{kind: tOp, text: op, pos: i})
			i += len(op)
		default:
			r, size := utf8.DecodeRuneInString(src[i:])
			if r == utf8.RuneError && size <= 1 {
				return nil, errorf(Syntax, i, "", "invalid UTF-8")
			}
			if unicode.IsSpace(r) {
				i += size
				continue
			}
			if !isIdentStart(r) {
				return nil, errorf(Syntax, i, "", "unexpected character %q", r)
			}
			j := i + size
			for j < len(src) {
				r, size := utf8.DecodeRuneInString(src[j:])
				if !isIdentPart(r) {
					break
				}
				j += size
			}
			out = append(out, token{kind: tIdent, text: src[i:j], pos: i})
			i = j
		}
	}
	return append(out, token{kind: tEOF, pos: len(src)}), nil
}

// lexString reads the quoted string starting at src[start], returning its
// token and the offset after the closing quote. The escapes \n and \t are a
// newline and a tab; a backslash before any other character stands for
// that character (\" \' \\).
func lexString(src string, start int) (token, int, error) {
	quote := src[start]
	var b strings.Builder
	i := start + 1
	for {
		if i >= len(src) {
			return token{}, 0, errorf(Syntax, start, "", "unclosed string: expected %c", quote)
		}
		c := src[i]
		switch {
		case c == quote:
			return token{kind: tString, text: b.String(), pos: start}, i + 1, nil
		case c == '\\' && i+1 < len(src):
			i++
			switch src[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			default:
				b.WriteByte(src[i])
			}
			i++
		default:
			b.WriteByte(c)
			i++
		}
	}
}

// lexNumber reads the number starting at src[start]: digits with an
// optional fraction and exponent, or a fraction alone (.5).
func lexNumber(src string, start int) (token, int, error) {
	i := start
	for i < len(src) && isDigit(src[i]) {
		i++
	}
	if i < len(src) && src[i] == '.' {
		i++
		for i < len(src) && isDigit(src[i]) {
			i++
		}
	}
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		j := i + 1
		if j < len(src) && (src[j] == '+' || src[j] == '-') {
			j++
		}
		if j >= len(src) || !isDigit(src[j]) {
			return token{}, 0, errorf(Syntax, start, "", "malformed number %s", src[start:min(j+1, len(src))])
		}
		for j < len(src) && isDigit(src[j]) {
			j++
		}
		i = j
	}
	if i < len(src) {
		if r, size := utf8.DecodeRuneInString(src[i:]); r == '.' || isIdentPart(r) {
			return token{}, 0, errorf(Syntax, start, "", "malformed number %s", src[start:i+size])
		}
	}
	v, err := strconv.ParseFloat(src[start:i], 64)
	if err != nil || math.IsInf(v, 0) {
		return token{}, 0, errorf(Syntax, start, "", "number %s is out of range", src[start:i])
	}
	return token{kind: tNumber, text: src[start:i], num: v, pos: start}, i, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isIdentStart(r rune) bool { return r == '_' || unicode.IsLetter(r) }

func isIdentPart(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

// numberText reads s as a number the way a text literal compared with or
// used as a number is read: optional spaces and sign, digits with an
// optional fraction and exponent. It accepts no other forms (no hex, no
// "Inf" or "NaN").
func numberText(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	body := strings.TrimLeft(s, "+-")
	if len(s)-len(body) > 1 || body == "" {
		return 0, false
	}
	t, n, err := lexNumber(body, 0)
	if err != nil || n != len(body) || t.kind != tNumber || !(isDigit(body[0]) || body[0] == '.') {
		return 0, false
	}
	if s[0] == '-' {
		return -t.num, true
	}
	return t.num, true
}
