package test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// TestErrorsHaveOneShape runs bad requests through the real router: each gets
// a coded JSON error, never a 500.
func TestErrorsHaveOneShape(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleOwner, nil)
	s := seed(t, app, a.Token, 1)

	cases := []struct {
		name, method, path string
		body               any
		status             int
		code               string
	}{
		{"no route", "GET", "/api/v1/nothing-here", nil, 404, "not_found"},
		{"malformed id", "GET", "/api/v1/tables/not-a-uuid", nil, 404, "not_found"},
		{"unknown table", "GET", "/api/v1/tables/00000000-0000-0000-0000-000000000000/rows", nil, 404, "not_found"},
		{"bad json", "POST", "/api/v1/apps", "{", 400, "invalid_request"},
		{"empty body", "POST", "/api/v1/apps", "", 400, "invalid_request"},
		{"unknown key", "POST", "/api/v1/apps", map[string]any{"name": "x", "colour": "red"}, 400, "invalid_request"},
		{"empty name", "POST", "/api/v1/apps", map[string]any{"name": "  "}, 422, "validation_failed"},
		{"unknown field type", "POST", "/api/v1/apps/" + s.AppID + "/tables",
			map[string]any{"name": "T", "fields": []map[string]any{{"name": "F", "type": "hologram"}}}, 422, "validation_failed"},
		{"select without choices", "POST", "/api/v1/apps/" + s.AppID + "/tables",
			map[string]any{"name": "T", "fields": []map[string]any{{"name": "F", "type": "single_select"}}}, 422, "validation_failed"},
		{"duplicate field names", "POST", "/api/v1/apps/" + s.AppID + "/tables",
			map[string]any{"name": "T", "fields": []map[string]any{{"name": "F", "type": "text"}, {"name": "f", "type": "email"}}}, 422, "validation_failed"},
		{"unknown cell field", "POST", "/api/v1/tables/" + s.TableID + "/rows",
			map[string]any{"rows": []map[string]any{{"cells": map[string]any{"nope": 1}}}}, 422, "validation_failed"},
		{"bad limit", "GET", "/api/v1/tables/" + s.TableID + "/rows?limit=0", nil, 400, "invalid_request"},
		{"huge limit", "GET", "/api/v1/tables/" + s.TableID + "/rows?limit=1001", nil, 400, "invalid_request"},
		{"forged cursor", "GET", "/api/v1/tables/" + s.TableID + "/rows?cursor=bm90LWpzb24", nil, 400, "invalid_request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := app.Do(t, c.method, c.path, a.Token, c.body)
			require.Equal(t, c.status, res.Status, string(res.Body))
			require.Equal(t, c.code, res.ErrorCode(t))
			require.NotEmpty(t, res.Map(t)["error"].(map[string]any)["message"])
		})
	}
}

// TestCellsAreValidatedByType: each type takes its values and refuses the
// rest, with the failing row and field named, and nothing of a failing batch
// written.
func TestCellsAreValidatedByType(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleEditor, nil)
	res := app.Do(t, "POST", "/api/v1/apps", a.Token, map[string]any{"name": "Types"})
	appID := res.Map(t)["id"].(string)
	res = app.Do(t, "POST", "/api/v1/apps/"+appID+"/tables", a.Token, map[string]any{
		"name": "All",
		"fields": []map[string]any{
			{"name": "text", "type": "text"},
			{"name": "long", "type": "long_text"},
			{"name": "number", "type": "number", "options": map[string]any{"precision": 2}},
			{"name": "check", "type": "checkbox"},
			{"name": "date", "type": "date"},
			{"name": "select", "type": "single_select", "options": map[string]any{"choices": []string{"red", "green"}}},
			{"name": "email", "type": "email"},
		},
	})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
	ids := map[string]string{}
	for _, f := range res.Map(t)["fields"].([]any) {
		f := f.(map[string]any)
		ids[f["name"].(string)] = f["id"].(string)
	}
	good := map[string]any{
		ids["text"]: "hello", ids["long"]: "two\nlines", ids["number"]: 3.14159, ids["check"]: true,
		ids["date"]: "2026-02-28", ids["select"]: "red", ids["email"]: "ann@example.com",
	}
	tablePath := "/api/v1/tables/" + res.Map(t)["id"].(string) + "/rows"
	res = app.Do(t, "POST", tablePath, a.Token, map[string]any{"rows": []any{map[string]any{"cells": good}}})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
	cells := res.Map(t)["rows"].([]any)[0].(map[string]any)["cells"].(map[string]any)
	require.InDelta(t, 3.14, cells[ids["number"]], 1e-9, "number rounded to its precision")

	bad := map[string]any{
		"text": 12, "long": false, "number": "many", "check": "yes", "date": "28/02/2026",
		"select": "blue", "email": "not an email",
	}
	for name, v := range bad {
		t.Run(name, func(t *testing.T) {
			res := app.Do(t, "POST", tablePath, a.Token, map[string]any{"rows": []any{
				map[string]any{"cells": good},
				map[string]any{"cells": map[string]any{ids[name]: v}},
			}})
			require.Equal(t, http.StatusUnprocessableEntity, res.Status, string(res.Body))
			d := res.Map(t)["error"].(map[string]any)["details"].([]any)
			require.Len(t, d, 1)
			require.EqualValues(t, 1, d[0].(map[string]any)["row"])
			require.Equal(t, ids[name], d[0].(map[string]any)["field"])
		})
	}
	res = app.Do(t, "GET", tablePath, a.Token, nil)
	require.Len(t, res.Map(t)["rows"], 1, "no failing batch wrote anything")
}

// TestKeysetWalk: walking a table page by page returns every row exactly once
// and ends with a null cursor.
func TestKeysetWalk(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleEditor, nil)
	s := seed(t, app, a.Token, 250)
	seen := map[string]bool{}
	cursor := ""
	pages := 0
	for {
		path := "/api/v1/tables/" + s.TableID + "/rows?limit=100"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		res := app.Do(t, "GET", path, a.Token, nil)
		require.Equal(t, http.StatusOK, res.Status, string(res.Body))
		var page struct {
			Rows []struct {
				ID string `json:"id"`
			} `json:"rows"`
			NextCursor *string `json:"next_cursor"`
		}
		res.JSON(t, &page)
		pages++
		for _, r := range page.Rows {
			require.False(t, seen[r.ID], "row %s returned twice", r.ID)
			seen[r.ID] = true
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
		require.Less(t, pages, 10, "the walk does not end")
	}
	require.Len(t, seen, 250)
	require.Equal(t, 3, pages)

	res := app.Do(t, "GET", fmt.Sprintf("/api/v1/tables/%s/rows/%s", s.TableID, s.RowID), a.Token, nil)
	require.Equal(t, http.StatusOK, res.Status)
	require.Equal(t, s.RowID, res.Map(t)["id"])
}
