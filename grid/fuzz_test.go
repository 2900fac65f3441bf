package grid

import (
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/appdor/appdor"
)

// fuzzTable has one field of every type, with fixed ids so that seeds can
// name them.
func fuzzTable() *Table {
	two, linked := 2, uuid.MustParse("00000000-0000-7000-8000-00000000000f")
	t := &Table{ID: uuid.MustParse("00000000-0000-7000-8000-0000000000aa")}
	for i, ft := range []FieldType{TypeText, TypeLongText, TypeNumber, TypeCheckbox, TypeDate, TypeDatetime,
		TypeSingleSelect, TypeMultiSelect, TypeEmail, TypeURL, TypeLink} {
		f := Field{ID: uuid.MustParse("00000000-0000-7000-8000-0000000000" + strconv.Itoa(10+i)), Name: string(ft), Type: ft, Position: i}
		switch ft {
		case TypeNumber:
			f.Options.Precision = &two
		case TypeSingleSelect, TypeMultiSelect:
			f.Options.Choices = []string{"a", "b, c", "ü"}
		case TypeLink:
			f.Options.Table = &linked
		}
		t.Fields = append(t.Fields, f)
	}
	return t
}

// requireClientError fails unless err is a coded error a client may see as a
// 4xx: anything else would become a 500.
func requireClientError(t *testing.T, err error) {
	t.Helper()
	var ae *appdor.Error
	if !errors.As(err, &ae) || ae.Code != appdor.EInvalid {
		t.Fatalf("want an invalid_request error, got %#v", err)
	}
}

var placeholder = regexp.MustCompile(`\$(\d+)`)

// requireSQLUsesArgs checks that a statement uses each parameter it passes and
// no other: PostgreSQL refuses a parameter it cannot type.
func requireSQLUsesArgs(t *testing.T, sql string, args []any) {
	t.Helper()
	used := map[int]bool{}
	for _, m := range placeholder.FindAllStringSubmatch(sql, -1) {
		n, _ := strconv.Atoi(m[1])
		used[n] = true
	}
	for i := range args {
		if !used[i+1] {
			t.Fatalf("parameter $%d is passed but unused in %s", i+1, sql)
		}
	}
	if len(used) != len(args) {
		t.Fatalf("%d placeholders for %d parameters in %s", len(used), len(args), sql)
	}
}

func FuzzParseFilter(f *testing.F) {
	tb := fuzzTable()
	for _, s := range []string{"number:gte:1.5", "text:contains:50%_off", "datetime:lt:2026-01-02T03:04:05Z",
		"date:eq:2026-02-30", "checkbox:eq:true", "multi_select:eq:b, c", "link:neq:x", "text:empty", "text:empty:",
		"nope:eq:1", "number:like:1", ":::", "number", "email:gt:a:b:c", "00000000-0000-7000-8000-000000000012:lte:-1e308"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		flt, err := parseFilter(tb, s)
		if err != nil {
			requireClientError(t, err)
			return
		}
		sql, args := (&readQuery{realm: tb.ID, table: tb.ID, filters: []filter{flt}, limit: 10, fields: true}).pageSQL()
		requireSQLUsesArgs(t, sql, args)
		sql, args = (&readQuery{realm: tb.ID, table: tb.ID, filters: []filter{flt}, q: s, fields: true}).countSQL()
		requireSQLUsesArgs(t, sql, args)
	})
}

func FuzzParseSort(f *testing.F) {
	tb := fuzzTable()
	for _, s := range []string{"number", "-number,text", "-", ",", "text,text", "a,b,c,d,e,f", "-00000000-0000-7000-8000-000000000015", "Number"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		keys, err := parseSort(tb, s)
		if err != nil {
			requireClientError(t, err)
			return
		}
		sql, args := (&readQuery{realm: tb.ID, table: tb.ID, keys: keys, limit: 10}).pageSQL()
		requireSQLUsesArgs(t, sql, args)
	})
}

func FuzzCursor(f *testing.F) {
	tb := fuzzTable()
	keys, _ := parseSort(tb, "-number,datetime,text,checkbox,multi_select")
	good := cursor{Sort: sortSpec(keys), After: uuid.New(), Values: []json.RawMessage{
		json.RawMessage(`1.5`), json.RawMessage(`"2026-01-02T03:04:05.123456Z"`), json.RawMessage(`"x"`), json.RawMessage(`null`), json.RawMessage(`"[\"a\"]"`)}}
	for _, s := range []string{good.encode(), cursor{After: uuid.New()}.encode(), "", "e30", "eyJhIjoxfQ", "!!!", "eyJzIjoiIiwidiI6W251bGxdfQ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := parseCursor(s)
		if err != nil {
			requireClientError(t, err)
			return
		}
		for _, ks := range [][]sortKey{nil, keys} {
			vals, err := cursorValues(k, ks)
			if err != nil {
				requireClientError(t, err)
				continue
			}
			sql, args := (&readQuery{realm: tb.ID, table: tb.ID, keys: ks, after: &k, values: vals, limit: 10}).pageSQL()
			requireSQLUsesArgs(t, sql, args)
		}
	})
}

func FuzzNormalize(f *testing.F) {
	tb := fuzzTable()
	for i, raw := range []string{`"hello"`, `1.005`, `1e308`, `true`, `"2026-02-28"`, `"2026-01-02T03:04:05+01:00"`,
		`"a"`, `["a","a","ü"]`, `"a@b.example"`, `"https://x.example/"`, `["00000000-0000-7000-8000-000000000001"]`,
		`null`, `{}`, `"\u0000"`, `-0`, `[1]`, `"=1+2"`, `"'-x"`, `"\ta"`, `["x"]`} {
		f.Add(uint8(i), []byte(raw))
	}
	f.Fuzz(func(t *testing.T, which uint8, raw []byte) {
		fd := &tb.Fields[int(which)%len(tb.Fields)]
		v, err := fd.normalize(raw)
		if err != nil {
			return // a message for the client's details
		}
		if v == nil {
			return
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: a normalized value does not encode: %v", fd.Type, err)
		}
		again, err := fd.normalize(b)
		if err != nil {
			t.Fatalf("%s: a normalized value %s is refused: %v", fd.Type, b, err)
		}
		if !reflect.DeepEqual(again, v) {
			t.Fatalf("%s: normalizing is not stable: %#v then %#v", fd.Type, v, again)
		}
		// What the CSV export writes (neutralized, as by default), the import
		// reads back as the same cell.
		s := csvValue(fd, b)
		if fd.Type != TypeNumber {
			s = neutralize(s)
		}
		back, err := csvCell(fd, s)
		if err != nil {
			t.Fatalf("%s: the CSV form %q of %s is refused: %v", fd.Type, s, b, err)
		}
		if s != "" && !reflect.DeepEqual(back, v) {
			t.Fatalf("%s: CSV round trip of %s gives %#v", fd.Type, b, back)
		}
	})
}

// FuzzProjection: any fields= value is a page statement that projects onto
// fields of the table, or an invalid_request error; never a 500.
func FuzzProjection(f *testing.F) {
	tb := fuzzTable()
	for _, s := range []string{"text", "text,number", "Text,text", ",", "nope", "00000000-0000-7000-8000-000000000020,link", " number , date "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p := readParams{fields: strings.Split(s, ",")}
		q, err := p.query(tb.ID, tb.ID, tb, 10)
		if err != nil {
			requireClientError(t, err)
			return
		}
		if len(q.project)+len(q.drop) != len(tb.Fields) {
			t.Fatalf("projected %v and dropped %v of %d fields", q.project, q.drop, len(tb.Fields))
		}
		for _, id := range q.project {
			if tb.field(id) == nil {
				t.Fatalf("projected %q, not a field of the table", id)
			}
		}
		sql, args := q.pageSQL()
		requireSQLUsesArgs(t, sql, args)
	})
}
