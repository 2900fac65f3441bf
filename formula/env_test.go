package formula

import (
	"regexp"
	"strconv"
	"testing"
)

// testField is a field of the test table t: its key in cells, and type.
type testField struct {
	key  string
	typ  Type
	date bool // a date without a time, stored as YYYY-MM-DD
}

// testFields are the fields of the test table t, by name.
var testFields = map[string]testField{
	"Name":      {key: "name", typ: Text},
	"Full Name": {key: "full", typ: Text},
	"Status":    {key: "status", typ: Text},
	"Count":     {key: "count", typ: Number},
	"Price":     {key: "price", typ: Number},
	"Big":       {key: "big", typ: Number},
	"Tiny":      {key: "tiny", typ: Number},
	"Done":      {key: "done", typ: Bool},
	"Due":       {key: "due", typ: Time, date: true},
	"Start":     {key: "start", typ: Time},
	"End":       {key: "end", typ: Time},
}

// testEnv resolves testFields in the row t of table t (id int, cells
// jsonb), as Appdor reads cells, and collects parameters.
type testEnv struct {
	args []any
}

func (e *testEnv) Arg(v any) string {
	e.args = append(e.args, v)
	return "$" + strconv.Itoa(len(e.args))
}

func (e *testEnv) Field(name string) (Field, bool) {
	f, ok := testFields[name]
	if !ok {
		return Field{}, false
	}
	c := "(cells -> " + e.Arg(f.key) + "::text)"
	switch {
	case f.typ == Number:
		return Field{Type: Number, SQL: "CASE WHEN jsonb_typeof(" + c + ") = 'number' THEN (" + c + ")::float8 END"}, true
	case f.typ == Bool:
		return Field{Type: Bool, SQL: "CASE WHEN jsonb_typeof(" + c + ") = 'boolean' THEN (" + c + ")::boolean END"}, true
	case f.date:
		return Field{Type: Time, SQL: "CASE WHEN jsonb_typeof(" + c + ") = 'string' THEN ((" + c + " #>> '{}')::date)::timestamp AT TIME ZONE 'UTC' END"}, true
	case f.typ == Time:
		return Field{Type: Time, SQL: "CASE WHEN jsonb_typeof(" + c + ") = 'string' THEN (" + c + " #>> '{}')::timestamptz END"}, true
	}
	return Field{Type: Text, SQL: "CASE WHEN jsonb_typeof(" + c + ") = 'string' THEN " + c + " #>> '{}' END"}, true
}

var placeholder = regexp.MustCompile(`\$([0-9]+)`)

// checkArgs checks that sql uses each of n parameters and no others, each
// with a cast.
func checkArgs(t testing.TB, src, sql string, n int) {
	t.Helper()
	used := map[int]bool{}
	for _, m := range placeholder.FindAllStringSubmatchIndex(sql, -1) {
		i, _ := strconv.Atoi(sql[m[2]:m[3]])
		if i < 1 || i > n {
			t.Errorf("%s: SQL uses $%d of %d parameters: %s", src, i, n, sql)
		}
		if m[1]+2 > len(sql) || sql[m[1]:m[1]+2] != "::" {
			t.Errorf("%s: $%d has no cast: %s", src, i, sql)
		}
		used[i] = true
	}
	for i := 1; i <= n; i++ {
		if !used[i] {
			t.Errorf("%s: SQL does not use $%d: %s", src, i, sql)
		}
	}
}
