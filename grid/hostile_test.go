package grid_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHostileTextRefused sends NUL, other C0 control characters and line
// breaks where they do not belong — in every name and every kind of text
// cell, on create and on change — and expects 422 validation_failed naming
// the field, and nothing written: not a 500 from PostgreSQL (22P05).
func TestHostileTextRefused(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tb := f.table("T", field("Name", "text"), field("Notes", "long_text"),
		field("Tier", "single_select", map[string]any{"choices": []string{"a", "b"}}),
		field("Tags", "multi_select", map[string]any{"choices": []string{"x"}}),
		field("Mail", "email"), field("Site", "url"))
	ids := f.insert(tb, []map[string]any{{"Name": "kept", "Notes": "one\ntwo"}})
	tablePath, rowsPath := "/api/v1/tables/"+tb.ID, "/api/v1/tables/"+tb.ID+"/rows"
	fieldsPath := tablePath + "/fields"

	// Everything a refused request could have changed, as the API shows it.
	snapshot := func() string {
		return string(f.do("GET", "/api/v1/apps", nil).Body) +
			string(f.do("GET", "/api/v1/apps/"+f.appID+"/tables", nil).Body) +
			string(f.do("GET", tablePath, nil).Body) +
			string(f.do("GET", rowsPath, nil).Body)
	}
	before := snapshot()

	cell := func(name string, v any) map[string]any {
		return map[string]any{"rows": []any{map[string]any{"cells": tb.cells(map[string]any{name: v})}}}
	}
	patch := func(name string, v any) map[string]any {
		return map[string]any{"rows": []any{map[string]any{"id": ids[0], "version": 1, "cells": tb.cells(map[string]any{name: v})}}}
	}
	for _, c := range []struct {
		name, method, path string
		body               any
		field              string
	}{
		{"app name with NUL", "POST", "/api/v1/apps", map[string]any{"name": "a\x00b"}, "name"},
		{"app name with a bell", "POST", "/api/v1/apps", map[string]any{"name": "a\x07b"}, "name"},
		{"app name with a tab", "POST", "/api/v1/apps", map[string]any{"name": "a\tb"}, "name"},
		{"app name over two lines", "POST", "/api/v1/apps", map[string]any{"name": "a\nb"}, "name"},
		{"table name with NUL", "POST", "/api/v1/apps/" + f.appID + "/tables", map[string]any{"name": "t\x00"}, "name"},
		{"field name in a new table", "POST", "/api/v1/apps/" + f.appID + "/tables",
			map[string]any{"name": "New", "fields": []any{field("ok", "text"), field("b\x00d", "text")}}, "name"},
		{"choice in a new table", "POST", "/api/v1/apps/" + f.appID + "/tables",
			map[string]any{"name": "New", "fields": []any{field("S", "single_select", map[string]any{"choices": []string{"\x00"}})}}, "options.choices[0]"},
		{"field name", "POST", fieldsPath, field("a\x00b", "text"), "name"},
		{"field name with an escape", "POST", fieldsPath, field("a\x1b[31m", "text"), "name"},
		{"field rename", "PATCH", fieldsPath + "/" + tb.Fields["Name"], map[string]any{"name": "x\x00"}, "name"},
		{"choice", "POST", fieldsPath, field("S", "single_select", map[string]any{"choices": []string{"ok", "a\x00b"}}), "options.choices[1]"},
		{"choice on change", "PATCH", fieldsPath + "/" + tb.Fields["Tier"],
			map[string]any{"options": map[string]any{"choices": []string{"a", "b", "c\x01"}}}, "options.choices[2]"},
		{"text cell with NUL", "POST", rowsPath, cell("Name", "a\x00b"), tb.Fields["Name"]},
		{"text cell with a control", "POST", rowsPath, cell("Name", "a\x1fb"), tb.Fields["Name"]},
		{"long text cell with NUL", "POST", rowsPath, cell("Notes", "line\nnext\x00"), tb.Fields["Notes"]},
		{"long text cell with a vertical tab", "POST", rowsPath, cell("Notes", "a\vb"), tb.Fields["Notes"]},
		{"select cell with NUL", "POST", rowsPath, cell("Tier", "a\x00"), tb.Fields["Tier"]},
		{"multi-select cell with NUL", "POST", rowsPath, cell("Tags", []string{"x\x00"}), tb.Fields["Tags"]},
		{"email cell with NUL", "POST", rowsPath, cell("Mail", "a\x00@b.example"), tb.Fields["Mail"]},
		{"url cell with NUL", "POST", rowsPath, cell("Site", "https://a.example/\x00"), tb.Fields["Site"]},
		{"text cell on change", "PATCH", rowsPath, patch("Name", "\x00"), tb.Fields["Name"]},
		{"long text cell on change", "PATCH", rowsPath, patch("Notes", "\x00"), tb.Fields["Notes"]},
	} {
		res := f.do(c.method, c.path, c.body)
		require.Equal(t, http.StatusUnprocessableEntity, res.Status, "%s: %s", c.name, res.Body)
		require.Equal(t, "validation_failed", res.ErrorCode(t), c.name)
		require.Contains(t, res.DetailFields(t), c.field, "%s: the details name the field: %s", c.name, res.Body)
	}
	require.Equal(t, before, snapshot(), "a refused request wrote nothing")

	// What text may hold: a tab in a text cell, line breaks (LF, CRLF) and
	// tabs in a long text cell.
	m := f.ok(http.StatusCreated, "POST", rowsPath, map[string]any{"rows": []any{
		map[string]any{"cells": tb.cells(map[string]any{"Name": "a\tb", "Notes": "one\r\ntwo\tthree\n"})}}})
	got := m["rows"].([]any)[0].(map[string]any)["cells"].(map[string]any)
	require.Equal(t, "a\tb", got[tb.Fields["Name"]])
	require.Equal(t, "one\r\ntwo\tthree\n", got[tb.Fields["Notes"]])
}

// TestHostileTextInCSV: a CSV cell with NUL or a control character is refused
// on its line and names its column; it is not written, the file's other rows
// are, and nothing fails with 500 (before, the NUL reached jsonb and failed
// the whole batch).
func TestHostileTextInCSV(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tb := f.table("T", field("Name", "text"), field("Notes", "long_text"))
	status, res := f.csvIn(tb.ID, "Name,Notes\nok,fine\na\x00b,x\nc,\"two\nlines\"\nd,e\x02f\n\xff\xfe,x\n")
	require.Equal(t, http.StatusCreated, status, "%v", res)
	require.EqualValues(t, 2, res["inserted"])
	require.EqualValues(t, 3, res["failed"])
	errs := res["errors"].([]any)
	require.Len(t, errs, 3)
	for i, want := range []struct {
		line  float64
		field string
	}{{3, "Name"}, {6, "Notes"}, {7, "Name"}} {
		e := errs[i].(map[string]any)
		require.Equal(t, want.line, e["line"], "%v", e)
		require.Equal(t, want.field, e["field"], "%v", e)
	}
	p := f.read("/api/v1/tables/" + tb.ID + "/rows")
	require.Len(t, p.Rows, 2)
	for _, r := range p.Rows {
		require.NotContains(t, []any{"a\x00b", "d"}, r.Cells[tb.Fields["Name"]])
	}
}

// TestHostileReadParameters: a filter value, a search and an
// Idempotency-Key that PostgreSQL could not take are refused with 400 and
// the parameter named.
func TestHostileReadParameters(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tb := f.table("T", field("Name", "text"))
	rows := "/api/v1/tables/" + tb.ID + "/rows"
	for _, q := range []string{"?filter=Name:eq:a%00b", "?filter=Name:contains:%07", "?q=a%00", "?filter=Name:eq:%ff"} {
		res := f.do("GET", rows+q, nil)
		require.Equal(t, http.StatusBadRequest, res.Status, "%s: %s", q, res.Body)
		require.Equal(t, "invalid_request", res.ErrorCode(t), q)
	}
	res := doWithHeader(t, "POST", f.app.URL+rows, f.token,
		map[string]any{"rows": []any{map[string]any{"cells": map[string]any{}}}}, map[string]string{"Idempotency-Key": "k\xff"})
	require.Equal(t, http.StatusBadRequest, res.Status, string(res.Body))
	require.Equal(t, []string{"Idempotency-Key"}, res.DetailFields(t))
	require.Empty(t, f.read(rows).Rows)
}
