package test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// seed makes an app, a table with a text field, and n rows, and returns the
// ids a test needs.
type seeded struct {
	AppID, TableID, FieldID, RowID string
}

func seed(t *testing.T, app *testenv.App, token string, n int) seeded {
	t.Helper()
	res := app.Do(t, "POST", "/api/v1/apps", token, map[string]any{"name": "CRM"})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
	var s seeded
	s.AppID = res.Map(t)["id"].(string)
	res = app.Do(t, "POST", "/api/v1/apps/"+s.AppID+"/tables", token, map[string]any{
		"name":   "People",
		"fields": []map[string]any{{"name": "Name", "type": "text"}},
	})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
	tbl := res.Map(t)
	s.TableID = tbl["id"].(string)
	s.FieldID = tbl["fields"].([]any)[0].(map[string]any)["id"].(string)
	rows := make([]map[string]any, n)
	for i := range rows {
		rows[i] = map[string]any{"cells": map[string]any{s.FieldID: fmt.Sprintf("person %d", i)}}
	}
	res = app.Do(t, "POST", "/api/v1/tables/"+s.TableID+"/rows", token, map[string]any{"rows": rows})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
	s.RowID = res.Map(t)["rows"].([]any)[0].(map[string]any)["id"].(string)
	return s
}

// TestIsolationThroughAPI: a realm's token sees nothing of another realm's
// apps, tables and rows, reading or writing, in both directions.
func TestIsolationThroughAPI(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleOwner, nil)
	b := app.NewTenant(t, tenancy.RoleOwner, nil)
	sa := seed(t, app, a.Token, 3)
	sb := seed(t, app, b.Token, 3)

	for _, dir := range []struct {
		name     string
		intruder string
		victim   seeded
	}{{"B on A", b.Token, sa}, {"A on B", a.Token, sb}} {
		t.Run(dir.name, func(t *testing.T) {
			v := dir.victim
			cases := []struct {
				method, path string
				body         any
			}{
				{"GET", "/api/v1/tables/" + v.TableID, nil},
				{"GET", "/api/v1/tables/" + v.TableID + "/rows", nil},
				{"GET", "/api/v1/tables/" + v.TableID + "/rows/" + v.RowID, nil},
				{"POST", "/api/v1/tables/" + v.TableID + "/rows", map[string]any{"rows": []map[string]any{{"cells": map[string]any{v.FieldID: "intruder"}}}}},
				{"GET", "/api/v1/apps/" + v.AppID + "/tables", nil},
				{"POST", "/api/v1/apps/" + v.AppID + "/tables", map[string]any{"name": "x", "fields": []any{}}},
			}
			for _, c := range cases {
				res := app.Do(t, c.method, c.path, dir.intruder, c.body)
				require.Equal(t, http.StatusNotFound, res.Status, "%s %s: %s", c.method, c.path, res.Body)
				require.Equal(t, "not_found", res.ErrorCode(t))
			}
		})
	}

	// The owner still sees exactly its own three rows: the intruder wrote nothing.
	res := app.Do(t, "GET", "/api/v1/tables/"+sa.TableID+"/rows", a.Token, nil)
	require.Equal(t, http.StatusOK, res.Status)
	require.Len(t, res.Map(t)["rows"], 3)

	// Apps are listed per realm.
	res = app.Do(t, "GET", "/api/v1/apps", b.Token, nil)
	require.Len(t, res.Map(t)["apps"], 1)
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleOwner, nil)
	revoked := app.AddMember(t, a.RealmID, tenancy.RoleEditor, nil)
	_, err := app.Tenancy.RevokeToken(t.Context(), revoked.TokenID)
	require.NoError(t, err)

	for name, token := range map[string]string{
		"none":      "",
		"malformed": "not-a-token",
		"unknown":   "apd_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"revoked":   revoked.Token,
	} {
		t.Run(name, func(t *testing.T) {
			res := app.Do(t, "GET", "/api/v1/apps", token, nil)
			require.Equal(t, http.StatusUnauthorized, res.Status)
			require.Equal(t, "unauthorized", res.ErrorCode(t))
			require.NotEmpty(t, res.Header.Get("WWW-Authenticate"))
		})
	}
	res := app.Do(t, "GET", "/api/v1/apps", a.Token, nil)
	require.Equal(t, http.StatusOK, res.Status)
}
