package formula

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		src, want string
	}{
		// Literals.
		{`12`, `12`},
		{`1.5`, `1.5`},
		{`.5`, `0.5`},
		{`5.`, `5`},
		{`1e3`, `1000`},
		{`1E-2`, `0.01`},
		{`2.5e+2`, `250`},
		{`0`, `0`},
		{`1e21`, `1e+21`},
		{`"a"`, `"a"`},
		{`'a'`, `"a"`},
		{`''`, `""`},
		{`"it's"`, `"it's"`},
		{`'say "hi"'`, `"say \"hi\""`},
		{`"a\"b"`, `"a\"b"`},
		{`'a\'b'`, `"a'b"`},
		{`"back\\slash"`, `"back\\slash"`},
		{`"line\nbreak\ttab"`, `"line\nbreak\ttab"`},
		{`"\q"`, `"q"`},
		{`"héllo"`, `"héllo"`},
		{`TRUE`, `TRUE`},
		{`false`, `FALSE`},
		{`TRUE()`, `TRUE()`},
		{`{Name}`, `{Name}`},
		{`{Field name}`, `{Field name}`},
		{`{a {b}`, `{a {b}`},
		{`{it's (x), "y"}`, `{it's (x), "y"}`},
		{`Status`, `{Status}`},
		{`_x1`, `{_x1}`},
		{`Größe`, `{Größe}`},
		{`Today`, `{Today}`}, // a function name without '(' is a field

		// Precedence, lowest first: comparisons, &, + -, * /, unary -.
		{`1 + 2 * 3`, `(1 + (2 * 3))`},
		{`(1 + 2) * 3`, `((1 + 2) * 3)`},
		{`1 - 2 - 3`, `((1 - 2) - 3)`},
		{`8 / 4 / 2`, `((8 / 4) / 2)`},
		{`1 + 2 = 3`, `((1 + 2) = 3)`},
		{`a & b = c`, `(({a} & {b}) = {c})`},
		{`a & b + c`, `({a} & ({b} + {c}))`},
		{`a + b & c * d`, `(({a} + {b}) & ({c} * {d}))`},
		{`a = b = c`, `(({a} = {b}) = {c})`},
		{`a < b`, `({a} < {b})`},
		{`a <= b`, `({a} <= {b})`},
		{`a > b`, `({a} > {b})`},
		{`a >= b`, `({a} >= {b})`},
		{`a != b`, `({a} != {b})`},
		{`a <> b`, `({a} != {b})`},
		{`-a * b`, `(-{a} * {b})`},
		{`-(a * b)`, `-({a} * {b})`},
		{`--5`, `--5`},
		{`- 5`, `-5`},
		{`2 * -3`, `(2 * -3)`},
		{`1 - -1`, `(1 - -1)`},
		{`((((1))))`, `1`},

		// Calls.
		{`and(a, b)`, `AND({a}, {b})`},
		{`AND({Status} = 'Done', {Count} > 3)`, `AND(({Status} = "Done"), ({Count} > 3))`},
		{`IF({Count} > 1, 'many', 'few')`, `IF(({Count} > 1), "many", "few")`},
		{`BLANK()`, `BLANK()`},
		{`NOW ( )`, `NOW()`},
		{`Find('x', {Name}, 2)`, `FIND("x", {Name}, 2)`},
		{`NOT(OR(a, b, c))`, `NOT(OR({a}, {b}, {c}))`},
		{"IF(\n  a,\n  b\n)", `IF({a}, {b})`},
		{`DATETIME_DIFF({End}, {Start}, 'days') > 2`, `(DATETIME_DIFF({End}, {Start}, "days") > 2)`},
	}
	for _, tt := range tests {
		n, err := Parse(tt.src)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.src, err)
			continue
		}
		if got := n.String(); got != tt.want {
			t.Errorf("Parse(%q) = %s, want %s", tt.src, got, tt.want)
			continue
		}
		again, err := Parse(n.String())
		if err != nil || again.String() != tt.want {
			t.Errorf("Parse(%q) does not read back: %v, %v", n.String(), again, err)
		}
	}
}

func TestParseLiteralValues(t *testing.T) {
	tests := []struct {
		src  string
		want Node
	}{
		{`12`, &numberLit{pos: 0, v: 12}},
		{` .25`, &numberLit{pos: 1, v: 0.25}},
		{`1e3`, &numberLit{pos: 0, v: 1000}},
		{`'a\\b\'c'`, &textLit{pos: 0, v: `a\b'c`}},
		{`"a\nb\tc\"d"`, &textLit{pos: 0, v: "a\nb\tc\"d"}},
		{`{ spaced name }`, &fieldRef{pos: 0, name: " spaced name "}},
		{`  Status`, &fieldRef{pos: 2, name: "Status"}},
		{`FALSE`, &boolLit{pos: 0, v: false}},
	}
	for _, tt := range tests {
		n, err := Parse(tt.src)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.src, err)
			continue
		}
		if !reflect.DeepEqual(n, tt.want) {
			t.Errorf("Parse(%q) = %#v, want %#v", tt.src, n, tt.want)
		}
	}
}

func TestParsePositions(t *testing.T) {
	n, err := Parse(`AND({A} = 1, -B)`)
	if err != nil {
		t.Fatal(err)
	}
	c := n.(*call)
	if c.Pos() != 0 || c.args[0].Pos() != 8 || c.args[0].(*binary).l.Pos() != 4 || c.args[1].Pos() != 13 || c.args[1].(*negate).x.Pos() != 14 {
		t.Errorf("positions: %d %d %d %d", c.Pos(), c.args[0].Pos(), c.args[0].(*binary).l.Pos(), c.args[1].Pos())
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		src  string
		kind ErrorKind
		pos  int
		name string
		msg  string // the whole Error()
	}{
		{``, Syntax, 0, "", "the formula is empty at 0"},
		{`   `, Syntax, 0, "", "the formula is empty at 0"},
		{`1 +`, Syntax, 3, "", "unexpected end of formula at 3"},
		{`(1 + 2`, Syntax, 6, "", "expected ')' but found end of formula at 6"},
		{`AND(1, 2`, Syntax, 8, "", "expected ',' or ')' but found end of formula at 8"},
		{`AND(1 2)`, Syntax, 6, "", "expected ',' or ')' but found number 2 at 6"},
		{`AND(1,)`, Syntax, 6, "", "unexpected ')' at 6"},
		{`1 2`, Syntax, 2, "", "unexpected number 2 at 2"},
		{`)`, Syntax, 0, "", "unexpected ')' at 0"},
		{`{A} = 'x`, Syntax, 6, "", "unclosed string: expected ' at 6"},
		{`"abc\"`, Syntax, 0, "", `unclosed string: expected " at 0`},
		{`{Name`, Syntax, 0, "", "unclosed field reference: expected '}' at 0"},
		{`{}`, Syntax, 0, "", "empty field name at 0"},
		{`{ } = 1`, Syntax, 0, "", "empty field name at 0"},
		{`1 ! 2`, Syntax, 2, "", "unexpected '!': use != or NOT() at 2"},
		{`a == b`, Syntax, 3, "", "unexpected '=' at 3"},
		{`a | b`, Syntax, 2, "", `unexpected character '|' at 2`},
		{`1e`, Syntax, 0, "", "malformed number 1e at 0"},
		{`1e+`, Syntax, 0, "", "malformed number 1e+ at 0"},
		{`1.2.3`, Syntax, 0, "", "malformed number 1.2. at 0"},
		{`12abc`, Syntax, 0, "", "malformed number 12a at 0"},
		{`1e999`, Syntax, 0, "", "number 1e999 is out of range at 0"},
		{"'a\x00'", Syntax, 2, "", "unexpected NUL character at 2"},
		{"'a\xffb'", Syntax, 2, "", "invalid UTF-8 at 2"},
		{`FOO(1)`, UnknownFunction, 0, "FOO", "unknown function FOO at 0"},
		{`{A} = concatenate('a', 'b')`, UnknownFunction, 6, "concatenate", "unknown function concatenate at 6"},
		{`IF(a, Bogus (1))`, UnknownFunction, 6, "Bogus", "unknown function Bogus at 6"},
		{strings.Repeat("(", MaxDepth+1) + "1" + strings.Repeat(")", MaxDepth+1), TooComplex, MaxDepth, "", "the formula nests deeper than 64 levels at 64"},
		{strings.Repeat("-", MaxDepth+1) + "1", TooComplex, MaxDepth, "", "the formula nests deeper than 64 levels at 64"},
		{"1" + strings.Repeat(" + 1", MaxDepth), TooComplex, 4*MaxDepth - 2, "", "the formula nests deeper than 64 levels at 254"},
		{strings.Repeat("LEN(", MaxDepth) + "1" + strings.Repeat(")", MaxDepth), TooComplex, 0, "", "the formula nests deeper than 64 levels at 0"},
		{"OR(" + strings.Repeat("1,", MaxNodes) + "1)", TooComplex, 3 + 2*MaxNodes, "", "the formula has more than 1000 parts at 2003"},
		{strings.Repeat(" ", MaxLength+1), TooComplex, MaxLength, "", "the formula is longer than 10000 bytes at 10000"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.src)
		var fe *Error
		if !errors.As(err, &fe) {
			t.Errorf("Parse(%.40q) = %v, want an *Error", tt.src, err)
			continue
		}
		if fe.Kind != tt.kind || fe.Pos != tt.pos || fe.Name != tt.name || fe.Error() != tt.msg {
			t.Errorf("Parse(%.40q) = {%v %d %q %q}, want {%v %d %q %q}", tt.src, fe.Kind, fe.Pos, fe.Name, fe.Error(), tt.kind, tt.pos, tt.name, tt.msg)
		}
	}
}

func TestParseLimitsInside(t *testing.T) {
	// Right at each limit, a formula parses.
	for _, src := range []string{
		strings.Repeat("(", MaxDepth) + "1" + strings.Repeat(")", MaxDepth),
		strings.Repeat("-", MaxDepth-1) + "1",
		"1" + strings.Repeat(" + 1", MaxDepth-1),
		strings.Repeat("LEN(", MaxDepth-1) + "1" + strings.Repeat(")", MaxDepth-1),
		"OR(" + strings.Repeat("1,", MaxNodes-2) + "1)",
		"'" + strings.Repeat("x", MaxLength-2) + "'",
	} {
		if _, err := Parse(src); err != nil {
			t.Errorf("Parse(%.40q…): %v", src, err)
		}
	}
}

func TestFields(t *testing.T) {
	n, err := Parse(`IF({B} > 1, a & {B}, LOWER({C d}))`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Fields(n), []string{"B", "a", "C d"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Fields = %q, want %q", got, want)
	}
	if got := Fields(nil); got != nil {
		t.Errorf("Fields(nil) = %q", got)
	}
}

func TestIsFunction(t *testing.T) {
	if !IsFunction("datetime_diff") || !IsFunction("IF") || IsFunction("CONCATENATE") {
		t.Error("IsFunction")
	}
}
