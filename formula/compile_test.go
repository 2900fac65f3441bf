package formula

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// compile parses and compiles src against a new testEnv.
func compile(src string) (Expr, *testEnv, error) {
	n, err := Parse(src)
	if err != nil {
		return Expr{}, nil, err
	}
	env := &testEnv{}
	e, err := Compile(n, env)
	return e, env, err
}

func TestCompileTypes(t *testing.T) {
	tests := []struct {
		src  string
		want Type
	}{
		{`1`, Number},
		{`'a'`, Text},
		{`TRUE`, Bool},
		{`BLANK()`, Blank},
		{`{Name}`, Text},
		{`{Count}`, Number},
		{`{Done}`, Bool},
		{`{Due}`, Time},
		{`{Count} & ''`, Text},
		{`{Count} + TRUE`, Number},
		{`{Count} = 1`, Bool},
		{`IF({Done}, 1, 'a')`, Text},
		{`IF({Done}, 1, TRUE)`, Number},
		{`IF({Done}, {Due})`, Time},
		{`IF({Done}, BLANK(), {Due})`, Time},
		{`IF({Done}, BLANK())`, Text},
		{`FIND('a', {Name})`, Number},
		{`SEARCH('a', {Name}, 1)`, Number},
		{`LEN(5)`, Number},
		{`TRIM({Count})`, Text},
		{`TODAY()`, Time},
		{`NOW()`, Time},
		{`DATETIME_DIFF({End}, {Start})`, Number},
		{`IS_AFTER({End}, '2024-01-01')`, Bool},
		{`AND(1, 'a')`, Bool},
		{`-'2'`, Number},
	}
	for _, tt := range tests {
		e, env, err := compile(tt.src)
		if err != nil {
			t.Errorf("%s: %v", tt.src, err)
			continue
		}
		if e.Type != tt.want {
			t.Errorf("%s: type %v, want %v", tt.src, e.Type, tt.want)
		}
		checkArgs(t, tt.src, e.SQL, len(env.args))
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		src  string
		kind ErrorKind
		pos  int
		name string
		msg  string
	}{
		{`{Nope} = 1`, UnknownField, 0, "Nope", "unknown field {Nope} at 0"},
		{`AND(Status, Bogus)`, UnknownField, 12, "Bogus", "unknown field {Bogus} at 12"},
		{`IS_BEFORE({Count}, '2024-01-01')`, TypeMismatch, 10, "IS_BEFORE", "IS_BEFORE needs a date, got Number at 10"},
		{`IS_AFTER({Due}, 'soon')`, TypeMismatch, 16, "IS_AFTER", `IS_AFTER needs a date, and "soon" is not one (write YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ) at 16`},
		{`IS_BEFORE({Due}, {Name})`, TypeMismatch, 17, "IS_BEFORE", "IS_BEFORE needs a date, got Text at 17"},
		{`{Due} < '2024-13-01'`, TypeMismatch, 8, "", `< needs a date, and "2024-13-01" is not one (write YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ) at 8`},
		{`{Count} = 'abc'`, TypeMismatch, 10, "", `= needs a number, and "abc" is not one at 10`},
		{`{Count} = '0x10'`, TypeMismatch, 10, "", `= needs a number, and "0x10" is not one at 10`},
		{`{Name} = 5`, TypeMismatch, 7, "", "= cannot compare Text with Number at 7"},
		{`{Due} = {Count}`, TypeMismatch, 6, "", "= cannot compare Time with Number at 6"},
		{`{Done} = 'yes'`, TypeMismatch, 7, "", "= cannot compare Bool with Text at 7"},
		{`{Name} + 1`, TypeMismatch, 0, "", "+ needs a number, got Text at 0"},
		{`{Due} + 1`, TypeMismatch, 0, "", "+ needs a number, got Time at 0"},
		{`-{Name}`, TypeMismatch, 1, "", "- needs a number, got Text at 1"},
		{`'a' * 2`, TypeMismatch, 0, "", `* needs a number, and "a" is not one at 0`},
		{`NOT()`, TypeMismatch, 0, "NOT", "NOT takes 1 argument, got 0 at 0"},
		{`{Name} & NOT(1, 2)`, TypeMismatch, 9, "NOT", "NOT takes 1 argument, got 2 at 9"},
		{`TODAY(1)`, TypeMismatch, 0, "TODAY", "TODAY takes no arguments, got 1 at 0"},
		{`IF(1)`, TypeMismatch, 0, "IF", "IF takes 2 or 3 arguments, got 1 at 0"},
		{`AND()`, TypeMismatch, 0, "AND", "AND takes at least 1 argument, got 0 at 0"},
		{`DATETIME_DIFF({End}, {Start}, 'fortnights')`, TypeMismatch, 30, "DATETIME_DIFF", `DATETIME_DIFF does not know the unit "fortnights" at 30`},
		{`DATETIME_DIFF({End}, {Start}, {Name})`, TypeMismatch, 30, "DATETIME_DIFF", "DATETIME_DIFF needs its unit as a string such as 'days' at 30"},
		{`DATETIME_DIFF({End}, 3)`, TypeMismatch, 21, "DATETIME_DIFF", "DATETIME_DIFF needs a date, got Number at 21"},
		{`FIND('a', {Name}, 'x')`, TypeMismatch, 18, "FIND", `FIND needs a number, and "x" is not one at 18`},
		{`FIND('a', {Name}, {Due})`, TypeMismatch, 18, "FIND", "FIND needs a number, got Time at 18"},
	}
	for _, tt := range tests {
		_, _, err := compile(tt.src)
		var fe *Error
		if !errors.As(err, &fe) {
			t.Errorf("%s: %v, want an *Error", tt.src, err)
			continue
		}
		if fe.Kind != tt.kind || fe.Pos != tt.pos || fe.Name != tt.name || fe.Error() != tt.msg {
			t.Errorf("%s: {%v %d %q %q}, want {%v %d %q %q}", tt.src, fe.Kind, fe.Pos, fe.Name, fe.Error(), tt.kind, tt.pos, tt.name, tt.msg)
		}
	}
	if _, err := Compile(nil, &testEnv{}); err == nil {
		t.Error("Compile(nil) did not fail")
	}
}

// TestUserValuesAreParameters checks that no value from a formula's text
// reaches the SQL text: strings, numbers and dates are all parameters.
func TestUserValuesAreParameters(t *testing.T) {
	const evil = `'; DROP TABLE t; --`
	for _, src := range []string{
		`{Name} = "'; DROP TABLE t; --"`,
		`{Name} = '\'; DROP TABLE t; --'`,
		`FIND("'; DROP TABLE t; --", {Name} & "'; DROP TABLE t; --")`,
		`IF({Done}, "'; DROP TABLE t; --", LOWER("'; DROP TABLE t; --")) = UPPER({Status})`,
		`LEN("'; DROP TABLE t; --") > 0`,
	} {
		n, err := Parse(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		env := &testEnv{}
		sql, err := Condition(n, env)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if strings.Contains(sql, "DROP") || strings.Contains(sql, "--") {
			t.Errorf("%s: the value is in the SQL: %s", src, sql)
		}
		found := false
		for _, a := range env.args {
			found = found || a == evil
		}
		if !found {
			t.Errorf("%s: the value is not a parameter: %q", src, env.args)
		}
		checkArgs(t, src, sql, len(env.args))
	}

	// Numbers and dates are parameters too.
	_, env, err := compile(`IF(IS_BEFORE({Due}, '2024-06-01'), {Count} * 12345.5, 678)`)
	if err != nil {
		t.Fatal(err)
	}
	want := []any{"due", time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC), "count", 12345.5, 678.0}
	if len(env.args) != len(want) {
		t.Fatalf("args %#v, want %#v", env.args, want)
	}
	for i := range want {
		if env.args[i] != want[i] {
			t.Errorf("arg %d = %#v, want %#v", i+1, env.args[i], want[i])
		}
	}
	e, _, _ := compile(`{Count} * 12345.5`)
	if strings.Contains(e.SQL, "12345") {
		t.Errorf("the number is in the SQL: %s", e.SQL)
	}
}

func TestConditionLiterals(t *testing.T) {
	// Truthiness of a literal needs no parameter.
	for src, want := range map[string]string{
		`1`: "TRUE", `0`: "FALSE", `'a'`: "TRUE", `''`: "FALSE", `TRUE`: "TRUE", `BLANK()`: "FALSE", `-0`: "FALSE",
	} {
		n, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		env := &testEnv{}
		got, err := Condition(n, env)
		if err != nil || got != want || len(env.args) != 0 {
			t.Errorf("Condition(%s) = %s, %v, %d args; want %s", src, got, err, len(env.args), want)
		}
	}
}

func TestParseTime(t *testing.T) {
	tests := []struct {
		s    string
		want time.Time
	}{
		{"2024-06-01", time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC)},
		{"2024-06-01 09:30", time.Date(2024, 6, 1, 9, 30, 0, 0, time.UTC)},
		{"2024-06-01 09:30:15", time.Date(2024, 6, 1, 9, 30, 15, 0, time.UTC)},
		{"2024-06-01T09:30", time.Date(2024, 6, 1, 9, 30, 0, 0, time.UTC)},
		{"2024-06-01T09:30:15.5", time.Date(2024, 6, 1, 9, 30, 15, 5e8, time.UTC)},
		{"2024-06-01T09:30:00Z", time.Date(2024, 6, 1, 9, 30, 0, 0, time.UTC)},
		{"2024-06-01T09:30:00+02:00", time.Date(2024, 6, 1, 7, 30, 0, 0, time.UTC)},
		{"2024-06-01T09:30:00.123-01:00", time.Date(2024, 6, 1, 10, 30, 0, 123e6, time.UTC)},
	}
	for _, tt := range tests {
		got, ok := parseTime(tt.s)
		if !ok || !got.Equal(tt.want) || got.Location() != time.UTC {
			t.Errorf("parseTime(%q) = %v, %v; want %v", tt.s, got, ok, tt.want)
		}
	}
	for _, s := range []string{"", "2024", "2024-6-1", "06/01/2024", "2024-02-30", "2024-06-01T25:00:00Z", "soon", " 2024-06-01"} {
		if got, ok := parseTime(s); ok {
			t.Errorf("parseTime(%q) = %v", s, got)
		}
	}
}

func TestNumberText(t *testing.T) {
	for s, want := range map[string]float64{"3": 3, " 4.5 ": 4.5, "-2": -2, "+7": 7, ".5": 0.5, "1e3": 1000, "5.": 5} {
		if got, ok := numberText(s); !ok || got != want {
			t.Errorf("numberText(%q) = %v, %v", s, got, ok)
		}
	}
	for _, s := range []string{"", "-", "--1", "+-1", "abc", "0x10", "Inf", "NaN", "1e999", "1_000", "1,5", "1 2", "e3"} {
		if got, ok := numberText(s); ok {
			t.Errorf("numberText(%q) = %v", s, got)
		}
	}
}

func TestUnits(t *testing.T) {
	for s, want := range map[string][2]string{
		"ms": {"0.001", ""}, "milliseconds": {"0.001", ""}, "millisecond": {"0.001", ""},
		"s": {"1", ""}, "seconds": {"1", ""}, "m": {"60", ""}, "Minutes": {"60", ""}, "h": {"3600", ""}, "hour": {"3600", ""},
		"d": {"86400", ""}, "days": {"86400", ""}, "DAY": {"86400", ""}, "w": {"604800", ""}, "weeks": {"604800", ""},
		"M": {"", "1"}, "months": {"", "1"}, "Month": {"", "1"}, "Q": {"", "3"}, "quarters": {"", "3"}, "y": {"", "12"}, "years": {"", "12"},
		"fortnight": {"", ""}, "": {"", ""}, "x": {"", ""},
	} {
		f, c := unit(s)
		if f != want[0] || c != want[1] {
			t.Errorf("unit(%q) = %q, %q; want %q", s, f, c, want)
		}
	}
}

func TestLongArgumentsAreNotCopied(t *testing.T) {
	// A start computed from FIND inside FIND inside FIND… is written once
	// per level, so the SQL grows linearly with the nesting.
	src := "1"
	var sizes []int
	for i := 0; i < 20; i++ {
		src = "FIND('a', {Name}, " + src + ")"
		e, env, err := compile(src)
		if err != nil {
			t.Fatal(err)
		}
		checkArgs(t, src, e.SQL, len(env.args))
		sizes = append(sizes, len(e.SQL))
	}
	if grow := sizes[19] - sizes[18]; grow > 1000 || sizes[19] > 20*1000 {
		t.Errorf("SQL sizes grow too fast: %v", sizes)
	}
}
