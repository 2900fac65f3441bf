package grid_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFieldLifecycle(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tb := f.table("Contacts", field("Name", "text"), field("Email", "email"))
	fields := "/api/v1/tables/" + tb.ID + "/fields"

	// Every type can be added; options are checked.
	for _, fd := range []map[string]any{
		field("Notes", "long_text"), field("Score", "number", map[string]any{"precision": 2}),
		field("VIP", "checkbox"), field("Born", "date"), field("Seen", "datetime"),
		field("Tier", "single_select", map[string]any{"choices": []string{"gold", "silver"}}),
		field("Tags", "multi_select", map[string]any{"choices": []string{"x", "y"}}),
		field("Site", "url"),
	} {
		m := f.ok(http.StatusCreated, "POST", fields, fd)
		tb.Fields[m["name"].(string)] = m["id"].(string)
	}
	for _, bad := range []map[string]any{
		field("", "text"), field("X", "nope"), field("X", "single_select"),
		field("X", "number", map[string]any{"precision": 11}), field("X", "link"),
		field("X", "text", map[string]any{"choices": []string{"a"}}),
	} {
		res := f.do("POST", fields, bad)
		require.Equal(t, http.StatusUnprocessableEntity, res.Status, "%v: %s", bad, res.Body)
		require.Equal(t, "validation_failed", res.ErrorCode(t))
	}
	res := f.do("POST", fields, field("name", "text"))
	require.Equal(t, http.StatusConflict, res.Status, "names are unique, whatever their case")

	// Insert at a position, then reorder.
	m := f.ok(http.StatusCreated, "POST", fields, map[string]any{"name": "First", "type": "text", "position": 0})
	require.EqualValues(t, 0, m["position"])
	tb.Fields["First"] = m["id"].(string)
	f.ok(http.StatusOK, "PATCH", fields+"/"+tb.Fields["First"], map[string]any{"position": 99})
	order := func() []string {
		m := f.ok(http.StatusOK, "GET", "/api/v1/tables/"+tb.ID, nil)
		var names []string
		for i, x := range m["fields"].([]any) {
			fm := x.(map[string]any)
			require.EqualValues(t, i, fm["position"])
			names = append(names, fm["name"].(string))
		}
		return names
	}
	names := order()
	require.Equal(t, "Name", names[0])
	require.Equal(t, "First", names[len(names)-1])

	// Rename, change options; type changes are refused.
	m = f.ok(http.StatusOK, "PATCH", fields+"/"+tb.Fields["Tier"], map[string]any{
		"name": "Level", "options": map[string]any{"choices": []string{"gold", "silver", "bronze"}}})
	require.Equal(t, "Level", m["name"])
	res = f.do("PATCH", fields+"/"+tb.Fields["Tier"], map[string]any{"type": "text"})
	require.Equal(t, http.StatusUnprocessableEntity, res.Status)
	res = f.do("PATCH", fields+"/"+tb.Fields["Tier"], map[string]any{"colour": "red"})
	require.Equal(t, http.StatusBadRequest, res.Status)
	ids := f.insert(tb, []map[string]any{{"Name": "Ann", "Tier": "bronze", "Score": 1.234, "Born": "2001-02-03",
		"Seen": "2026-01-02T03:04:05+02:00", "Tags": []string{"x", "x", "y"}, "VIP": true, "Site": "https://a.example"}})
	row := f.ok(http.StatusOK, "GET", "/api/v1/tables/"+tb.ID+"/rows/"+ids[0], nil)
	cells := row["cells"].(map[string]any)
	require.Equal(t, 1.23, cells[tb.Fields["Score"]])
	require.Equal(t, "2026-01-02T01:04:05Z", cells[tb.Fields["Seen"]])
	require.Equal(t, []any{"x", "y"}, cells[tb.Fields["Tags"]])

	// Deleting a field removes its key from every cell.
	f.ok(http.StatusNoContent, "DELETE", fields+"/"+tb.Fields["Tier"], nil)
	row = f.ok(http.StatusOK, "GET", "/api/v1/tables/"+tb.ID+"/rows/"+ids[0], nil)
	require.NotContains(t, row["cells"], tb.Fields["Tier"])
	require.Contains(t, row["cells"], tb.Fields["Name"])
	require.Equal(t, http.StatusNotFound, f.do("DELETE", fields+"/"+tb.Fields["Tier"], nil).Status)
	names = order()
	require.NotContains(t, names, "Level")

	// Another realm sees none of it.
	g := setup(t)
	require.Equal(t, http.StatusNotFound, g.do("POST", fields, field("X", "text")).Status)
	require.Equal(t, http.StatusNotFound, g.do("PATCH", fields+"/"+tb.Fields["Name"], map[string]any{"name": "Y"}).Status)
	require.Equal(t, http.StatusNotFound, g.do("DELETE", fields+"/"+tb.Fields["Name"], nil).Status)
}

func TestLinks(t *testing.T) {
	t.Parallel()
	f := setup(t)
	people := f.table("People", field("Age", "number"), field("Name", "text"))
	pids := f.insert(people, []map[string]any{{"Name": "Ann", "Age": 30}, {"Name": "Bob"}, {"Age": 5}})
	projects := f.table("Projects", field("Title", "text"),
		field("Team", "link", map[string]any{"table": people.ID}))

	// A link names rows of its table, in this realm.
	res := f.do("POST", "/api/v1/tables/"+projects.ID+"/rows", map[string]any{"rows": []any{
		map[string]any{"cells": projects.cells(map[string]any{"Team": []string{pids[0], "0190a000-0000-7000-8000-000000000000"}})},
	}})
	require.Equal(t, http.StatusUnprocessableEntity, res.Status, string(res.Body))
	res = f.do("POST", "/api/v1/tables/"+projects.ID+"/rows", map[string]any{"rows": []any{
		map[string]any{"cells": projects.cells(map[string]any{"Team": []string{projects.ID}})},
	}})
	require.Equal(t, http.StatusUnprocessableEntity, res.Status, "a table id is not a row of the table")

	rows := make([]map[string]any, 150)
	for i := range rows {
		rows[i] = map[string]any{"Title": "p", "Team": []string{pids[i%3], pids[(i+1)%3]}}
	}
	prj := f.insert(projects, rows)

	// One page carries the display values of every linked row.
	p := f.read("/api/v1/tables/" + projects.ID + "/rows?limit=100")
	require.Len(t, p.Rows, 100)
	require.Len(t, p.Links, 3)
	require.Equal(t, "Ann", *p.Links[pids[0]])
	require.Equal(t, "Bob", *p.Links[pids[1]])
	require.Nil(t, p.Links[pids[2]])
	p = f.read("/api/v1/tables/" + projects.ID + "/rows?limit=100&sort=Title&filter=" + "Team:eq:" + pids[0])
	require.Len(t, p.Rows, 100)
	require.Equal(t, "Ann", *p.Links[pids[0]])

	// A link to a table of another app, or another realm, is refused.
	other := f.ok(http.StatusCreated, "POST", "/api/v1/apps", map[string]any{"name": "Other"})
	res = f.do("POST", "/api/v1/tables/"+projects.ID+"/fields", field("X", "link", map[string]any{"table": other["id"]}))
	require.Equal(t, http.StatusUnprocessableEntity, res.Status)
	g := setup(t)
	gt := g.table("Mine", field("Name", "text"))
	res = g.do("POST", "/api/v1/apps/"+g.appID+"/tables", map[string]any{"name": "Steal",
		"fields": []any{field("X", "link", map[string]any{"table": people.ID})}})
	require.Equal(t, http.StatusUnprocessableEntity, res.Status)
	res = g.do("POST", "/api/v1/tables/"+gt.ID+"/fields", field("X", "link", map[string]any{"table": people.ID}))
	require.Equal(t, http.StatusUnprocessableEntity, res.Status)

	// Deleting a linked row takes it out of the links.
	f.ok(http.StatusOK, "DELETE", "/api/v1/tables/"+people.ID+"/rows", map[string]any{"ids": []string{pids[0]}})
	row := f.ok(http.StatusOK, "GET", "/api/v1/tables/"+projects.ID+"/rows/"+prj[0], nil)
	require.Equal(t, []any{pids[1]}, row["cells"].(map[string]any)[projects.Fields["Team"]])
	require.EqualValues(t, 2, row["version"])
}
