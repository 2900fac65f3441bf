package formula

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// fuzzSeeds are formulas of every form, well-formed and not.
var fuzzSeeds = []string{
	``, ` `, `1`, `.5`, `1e3`, `1e+21`, `5e-324`, `'a'`, `"a\"b"`, `'it\'s'`, `"\\"`, `"\n\t"`, `TRUE`, `false`,
	`{Name}`, `{Field name}`, `Status`, `{}`, `{Name`, `'open`, `"open\"`, `(1`, `1)`, `1 +`, `1 ! 2`, `1e`, `1.2.3`,
	`1 + 2 * 3`, `-(1 - -2) / 0`, `a & b = c`, `1 <> 2`, `1 != 2 = FALSE`, `--{Count}`,
	`AND({Status} = 'Done', {Count} > 3)`, `OR(1)`, `NOT()`, `IF(1, 2)`, `IF({Done}, BLANK(), {Due})`,
	`FOO(1)`, `find('x', {Name}, -1)`, `SEARCH('', '')`, `LEN(TRIM(UPPER(LOWER({Name}))))`,
	`IS_BEFORE({Due}, '2024-06-01')`, `IS_AFTER({Start}, 'soon')`, `DATETIME_DIFF({End}, {Start}, 'M')`,
	`DATETIME_DIFF({End}, {Start}, {Name})`, `TODAY() < NOW()`, `{Big} * {Big} / {Tiny}`, `{Count} = '0x10'`,
	`{Name} = "'; DROP TABLE t; --"`, "{Name}\x00", "'\xff'", "IF(\n\t1,\r\n2)", `ÄÖÜ = 'ß'`,
	strings.Repeat("(", 70) + "1" + strings.Repeat(")", 70),
	strings.Repeat("-", 70) + "1",
	strings.Repeat("LEN(", 63) + "{Name}" + strings.Repeat(")", 63),
	"OR(" + strings.Repeat("{Count} = 1, ", 300) + "0)",
}

func addSeeds(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	for _, tt := range conditionTests {
		f.Add(tt.src)
	}
}

// checkError checks that err is an *Error that makes sense for src.
func checkError(t *testing.T, src string, err error) {
	t.Helper()
	var fe *Error
	if !errors.As(err, &fe) {
		t.Fatalf("%q: error %T %v is not an *Error", src, err, err)
	}
	if fe.Kind < Syntax || fe.Kind > TooComplex || fe.Pos < 0 || fe.Pos > len(src) || fe.Message == "" {
		t.Fatalf("%q: bad error %#v", src, fe)
	}
	if (fe.Kind == UnknownFunction || fe.Kind == UnknownField) && fe.Name == "" {
		t.Fatalf("%q: %v names nothing", src, fe)
	}
}

func FuzzParse(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, src string) {
		n, err := Parse(src)
		if err != nil {
			checkError(t, src, err)
			if _, again := Parse(src); again == nil || again.Error() != err.Error() {
				t.Fatalf("%q: error %v, then %v", src, err, again)
			}
			return
		}
		printed := n.String()
		if again, err := Parse(src); err != nil || again.String() != printed {
			t.Fatalf("%q: parsed as %s, then %v, %v", src, printed, again, err)
		}
		if n.Pos() < 0 || n.Pos() > len(src) {
			t.Fatalf("%q: position %d", src, n.Pos())
		}
		if len(printed) > MaxLength {
			return // the canonical form is longer than a formula may be
		}
		back, err := Parse(printed)
		if err != nil {
			t.Fatalf("%q: canonical form %s does not parse: %v", src, printed, err)
		}
		if back.String() != printed {
			t.Fatalf("%q: canonical form %s reads back as %s", src, printed, back.String())
		}
		if !reflect.DeepEqual(Fields(back), Fields(n)) {
			t.Fatalf("%q: fields %q, then %q", src, Fields(n), Fields(back))
		}
	})
}

func FuzzCompile(f *testing.F) {
	addSeeds(f)
	db, _ := openDB() // nil without a database: then only compile
	f.Fuzz(func(t *testing.T, src string) {
		n, err := Parse(src)
		if err != nil {
			return
		}
		env := &testEnv{}
		e, err := Compile(n, env)
		cenv := &testEnv{}
		cond, cerr := Condition(n, cenv)
		if (err == nil) != (cerr == nil) {
			t.Fatalf("%q: Compile: %v; Condition: %v", src, err, cerr)
		}
		if err != nil {
			checkError(t, src, err)
			checkError(t, src, cerr)
			return
		}
		checkArgs(t, src, e.SQL, len(env.args))
		checkArgs(t, src, cond, len(cenv.args))
		if e.Type < Text || e.Type > Blank {
			t.Fatalf("%q: type %v", src, e.Type)
		}
		again := &testEnv{}
		if e2, _ := Compile(n, again); e2 != e || !reflect.DeepEqual(again.args, env.args) {
			t.Fatalf("%q: compiles to %s, then %s", src, e.SQL, e2.SQL)
		}
		if db == nil {
			return
		}
		ctx := context.Background()
		rows, err := db.Query(ctx, "SELECT id FROM t WHERE "+cond, cenv.args...)
		if err == nil {
			for rows.Next() {
			}
			rows.Close()
			err = rows.Err()
		}
		if err != nil {
			t.Fatalf("%q: the condition fails: %v\n%s", src, err, cond)
		}
		rows, err = db.Query(ctx, "SELECT ("+e.SQL+")::text FROM t", env.args...)
		if err == nil {
			for rows.Next() {
			}
			rows.Close()
			err = rows.Err()
		}
		if err != nil {
			t.Fatalf("%q: the value fails: %v\n%s", src, err, e.SQL)
		}
	})
}
