package formula

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestParsePrecedence(t *testing.T) {
	cases := map[string]string{
		`1 + 2 * 3`:                `(1 + (2 * 3))`,
		`(1 + 2) * 3`:              `((1 + 2) * 3)`,
		`{A} & "x" = "ax"`:         `(({A} & "x") = "ax")`,
		`1 + 2 & 3`:                `((1 + 2) & 3)`,
		`-{A} * 2`:                 `((-{A}) * 2)`,
		`a <> b`:                   `({a} != {b})`,
		`and({A}, not(B), TRUE)`:   `AND({A}, NOT({B}), TRUE)`,
		`'it\'s' = "say \"hi\""`:   `("it's" = "say \"hi\"")`,
		`.5 + 1e3 + 2.25`:          `((0.5 + 1000) + 2.25)`,
		`{Field with spaces} >= 0`: `({Field with spaces} >= 0)`,
		`IF({A}, 1)`:               `IF({A}, 1)`,
		`BLANK()`:                  `BLANK()`,
	}
	for src, want := range cases {
		n, err := Parse(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if got := show(n); got != want {
			t.Errorf("%s: got %s, want %s", src, got, want)
		}
	}
}

// show prints a parsed formula with every operation parenthesised.
func show(n Node) string {
	switch n := n.(type) {
	case numLit:
		return strconv.FormatFloat(n.v, 'g', -1, 64)
	case strLit:
		return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(n.v) + `"`
	case boolLit:
		return strings.ToUpper(strconv.FormatBool(n.v))
	case fieldRef:
		return "{" + n.name + "}"
	case unary:
		return "(-" + show(n.x) + ")"
	case binary:
		return "(" + show(n.l) + " " + n.op + " " + show(n.r) + ")"
	case call:
		args := make([]string, len(n.args))
		for i, a := range n.args {
			args[i] = show(a)
		}
		return n.name + "(" + strings.Join(args, ", ") + ")"
	}
	return "?"
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		src  string
		kind ErrorKind
		pos  int
	}{
		{`AND({A} > 1`, Syntax, 11},
		{`{A} = "open`, Syntax, 6},
		{`{A`, Syntax, 0},
		{`1 +`, Syntax, 3},
		{`1 2`, Syntax, 2},
		{`!{A}`, Syntax, 0},
		{`{A} # 1`, Syntax, 4},
		{`F(1,)`, Syntax, 4},
		{strings.Repeat("(", MaxDepth+1) + "1" + strings.Repeat(")", MaxDepth+1), TooComplex, 0},
		{strings.Repeat("x", MaxLength+1), TooComplex, 0},
	}
	for _, c := range cases {
		_, err := Parse(c.src)
		var fe *Error
		if !errors.As(err, &fe) {
			t.Errorf("%.40q: want an *Error, got %v", c.src, err)
			continue
		}
		if fe.Kind != c.kind || c.kind == Syntax && fe.Pos != c.pos {
			t.Errorf("%.40q: got kind %d at %d (%s), want kind %d at %d", c.src, fe.Kind, fe.Pos, fe.Message, c.kind, c.pos)
		}
	}
}

// testEnv reads fields from the jsonb column cells of a test table; its
// fields are typed by their first letter: t text, n number, b checkbox, d
// a datetime.
type testEnv struct{ args []any }

func (e *testEnv) Arg(v any) string {
	e.args = append(e.args, v)
	return "$" + strconv.Itoa(len(e.args))
}

func (e *testEnv) Field(name string) (Field, bool) {
	if name == "" {
		return Field{}, false
	}
	c := "(cells -> " + e.Arg(name) + "::text)"
	switch name[0] {
	case 't':
		return Field{Text, "(CASE WHEN jsonb_typeof(" + c + ") = 'string' THEN " + c + " #>> '{}' END)"}, true
	case 'n':
		return Field{Number, "(CASE WHEN jsonb_typeof(" + c + ") = 'number' THEN (" + c + ")::float8 END)"}, true
	case 'b':
		return Field{Bool, "(CASE WHEN jsonb_typeof(" + c + ") = 'boolean' THEN (" + c + ")::boolean END)"}, true
	case 'd':
		return Field{Time, "(CASE WHEN jsonb_typeof(" + c + ") = 'string' THEN (" + c + " #>> '{}')::timestamptz END)"}, true
	}
	return Field{}, false
}

func connect(t *testing.T) *pgx.Conn {
	t.Helper()
	url := os.Getenv("APPDOR_TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://root@127.0.0.1:5432/postgres?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Skipf("no PostgreSQL at %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, `CREATE TEMP TABLE t (id int, cells jsonb);
		INSERT INTO t VALUES
		(1, '{"tname": "Alice", "tstatus": "Done", "ncount": 4, "bdone": true, "ddue": "2024-05-01T00:00:00Z", "dend": "2024-05-04T12:00:00Z"}'),
		(2, '{"tname": "bob", "tstatus": "Todo", "ncount": 1, "bdone": false, "ddue": "2024-07-01T00:00:00Z"}'),
		(3, '{"tname": "Carol x", "ncount": 0}'),
		(4, '{}')`)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestConditionsOnRealRows runs each formula as a WHERE clause on
// PostgreSQL and checks the rows it keeps; none may make PostgreSQL fail.
func TestConditionsOnRealRows(t *testing.T) {
	conn := connect(t)
	cases := []struct {
		src  string
		want []int
	}{
		{`AND({tstatus} = 'Done', {ncount} > 3)`, []int{1}},
		{`OR({tstatus} = "Todo", {ncount} = 0)`, []int{2, 3, 4}},
		{`{tname} = BLANK()`, []int{4}},
		{`{tname} != ""`, []int{1, 2, 3}},
		{`{ncount} = 0`, []int{3, 4}},
		{`{ncount}`, []int{1, 2}},
		{`NOT({bdone})`, []int{2, 3, 4}},
		{`{bdone} = FALSE()`, []int{2, 3, 4}},
		{`FIND('x', {tname})`, []int{3}},
		{`FIND('o', {tname}) = 2`, []int{2}},
		{`FIND('o', {tname}, 3) = 0`, []int{1, 2, 4}},
		{`SEARCH('zz', {tname}) = BLANK()`, []int{1, 2, 3, 4}},
		{`LOWER({tname}) = 'alice'`, []int{1}},
		{`UPPER({tname}) = 'BOB'`, []int{2}},
		{`TRIM("  Done ") = {tstatus}`, []int{1}},
		{`LEN({tname}) > 4`, []int{1, 3}},
		{`IF({ncount} > 1, 'many', 'few') = 'many'`, []int{1}},
		{`IF({ncount} > 1, 'many') = BLANK()`, []int{2, 3, 4}},
		{`{ncount} / 0 = BLANK()`, nil}, // #ERROR in Airtable: no record kept
		{`{ncount} / 2 = 2`, []int{1}},
		{`{ncount} * 2 - 1 >= 1`, []int{1, 2}},
		{`{tname} & "-" & {ncount} = "bob-1"`, []int{2}},
		{`{ncount} = "4"`, []int{1}},
		{`IS_BEFORE({ddue}, '2024-06-01')`, []int{1}},
		{`IS_AFTER({ddue}, '2024-06-01 00:00')`, []int{2}},
		{`{ddue} = BLANK()`, []int{3, 4}},
		{`{ddue} < '2030-01-01'`, []int{1, 2}},
		{`DATETIME_DIFF({dend}, {ddue}, 'days') = 3`, []int{1}},
		{`DATETIME_DIFF({dend}, {ddue}, 'h') = 84`, []int{1}},
		{`DATETIME_DIFF({dend}, {ddue}) = 302400`, []int{1}},
		{`DATETIME_DIFF(NOW(), {ddue}, 'years') >= 0`, []int{1, 2}}, // a blank date is #ERROR, not 0
		{`IS_BEFORE({ddue}, TODAY())`, []int{1, 2}},
		{`{tname} = "'; DROP TABLE t; --"`, nil},
	}
	for _, c := range cases {
		n, err := Parse(c.src)
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		env := &testEnv{}
		cond, err := Condition(n, env)
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		rows, err := conn.Query(context.Background(), "SELECT id FROM t WHERE "+cond+" ORDER BY id", env.args...)
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			t.Fatalf("%s: PostgreSQL refused %s: %v", c.src, cond, err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: kept %v, want %v\n%s", c.src, got, c.want, cond)
		}
	}
}

func TestCompileValues(t *testing.T) {
	conn := connect(t)
	cases := map[string]string{
		`1 + 2 * 3`:           "7",
		`"a" & 1 & TRUE()`:    "a11",
		`LEN("héllo")`:        "5",
		`IF(FALSE(), 1, "x")`: "x",
		`DATETIME_DIFF('2024-03-01', '2024-01-15', 'M')`:           "1",
		`DATETIME_DIFF('2024-01-01T00:10:00Z', '2024-01-01', 'm')`: "10",
		`-(2 - 5)`: "3",
	}
	for src, want := range cases {
		n, err := Parse(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		env := &testEnv{}
		e, err := Compile(n, env)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		var got string
		if err := conn.QueryRow(context.Background(), "SELECT ("+e.SQL+")::text", env.args...).Scan(&got); err != nil {
			t.Fatalf("%s: %v\n%s", src, err, e.SQL)
		}
		if got != want {
			t.Errorf("%s = %s, want %s", src, got, want)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	cases := []struct {
		src  string
		kind ErrorKind
		name string
	}{
		{`REGEX_MATCH({tname}, "a")`, UnknownFunction, "REGEX_MATCH"},
		{`{xnope} = 1`, UnknownField, "xnope"},
		{`IS_BEFORE({ddue}, 'soon')`, TypeMismatch, ""},
		{`IS_BEFORE({ncount}, {ddue})`, TypeMismatch, ""},
		{`{tname} * 2`, TypeMismatch, ""},
		{`NOT(1, 2)`, TypeMismatch, "NOT"},
		{`DATETIME_DIFF({ddue}, {dend}, 'fortnights')`, TypeMismatch, "DATETIME_DIFF"},
		{`DATETIME_DIFF({ddue}, {dend}, {tname})`, TypeMismatch, "DATETIME_DIFF"},
	}
	for _, c := range cases {
		n, err := Parse(c.src)
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		_, err = Condition(n, &testEnv{})
		var fe *Error
		if !errors.As(err, &fe) || fe.Kind != c.kind || fe.Name != c.name {
			t.Errorf("%s: got %#v, want kind %d naming %q", c.src, err, c.kind, c.name)
		}
	}
}

// TestValuesNeverEnterTheSQL: every literal is a parameter.
func TestValuesNeverEnterTheSQL(t *testing.T) {
	evil := `'; DROP TABLE t; --`
	for _, src := range []string{
		`{tname} = "` + evil + `"`, `FIND("` + evil + `", {tname})`, `IF({bdone}, "` + evil + `", "x") = "x"`,
		`"` + evil + `" & {tname}`,
	} {
		n, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		env := &testEnv{}
		sql, err := Condition(n, env)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(sql, "DROP") {
			t.Errorf("%s: the value reached the SQL: %s", src, sql)
		}
		if !slices.Contains(env.args, any(evil)) {
			t.Errorf("%s: the value is no parameter: %v", src, env.args)
		}
	}
}

var seeds = []string{
	`AND({tstatus} = 'Done', {ncount} > 3)`, `IF({ncount} > 1, "many", "few")`, `DATETIME_DIFF({dend}, {ddue}, 'days')`,
	`FIND("x", LOWER(TRIM({tname})), 2)`, `-{ncount} * (1 + 2) / 3 & "x"`, `{tname} = BLANK()`, `IS_BEFORE({ddue}, TODAY())`,
	`NOT(OR(TRUE(), FALSE))`, `'a\'b' <> "c\"d"`, `{a b c}`, `1e309`, `.5e-3`,
}

func FuzzParse(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		n, err := Parse(src)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("%q: an error that is no *Error: %v", src, err)
			}
			if fe.Pos < 0 || fe.Pos > len(src) {
				t.Fatalf("%q: position %d outside the source", src, fe.Pos)
			}
			return
		}
		// Printing and parsing again gives the same formula.
		again, err := Parse(show(n))
		if err != nil {
			t.Fatalf("%q printed as %q does not parse: %v", src, show(n), err)
		}
		if show(again) != show(n) {
			t.Fatalf("%q: %q then %q", src, show(n), show(again))
		}
	})
}

func FuzzCompile(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		n, err := Parse(src)
		if err != nil {
			return
		}
		env := &testEnv{}
		sql, err := Condition(n, env)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("%q: an error that is no *Error: %v", src, err)
			}
			return
		}
		if strings.Count(sql, "(") != strings.Count(sql, ")") {
			t.Fatalf("%q: unbalanced SQL %s", src, sql)
		}
		for i := range env.args {
			if !strings.Contains(sql, fmt.Sprintf("$%d", i+1)) {
				t.Fatalf("%q: parameter $%d is not used in %s", src, i+1, sql)
			}
		}
	})
}
