package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// roleScenario is one route of the API and who may use it. Routes are in
// Echo's form, as the router lists them.
type roleScenario struct {
	method, route string
	// min is the lowest role that may use the route; "" for a public route,
	// which answers public to every caller.
	min    tenancy.Role
	public int
	// ok is the status when the caller's role suffices.
	ok int
	// body builds the request body: nil for none, a csvBody for CSV, else JSON.
	body func(f roleFixture) any
}

type csvBody string

// roleFixture is what one request acts on, made fresh by the realm's owner
// so that a destructive scenario never disturbs the next.
type roleFixture struct {
	seeded
	TokenID string
	// AutomationID is an automation of the table, named "Fixture", with a
	// run (RunID) whose webhook delivery is dead.
	AutomationID, RunID string
	// MemberID is a viewer of the realm, besides the callers.
	MemberID string
}

// roleScenarios is the table: every API route, its lowest role and its
// success status. TestRolesCoverEveryRoute fails when a registered route is
// missing here.
var roleScenarios = []roleScenario{
	{method: "POST", route: "/api/v1/auth/login", public: http.StatusOK},
	{method: "POST", route: "/api/v1/auth/logout", public: http.StatusNoContent},
	{method: "GET", route: "/api/v1/openapi.json", public: http.StatusOK},
	{method: "GET", route: "/api/v1/me", min: tenancy.RoleViewer, ok: http.StatusOK},

	{method: "GET", route: "/api/v1/apps", min: tenancy.RoleViewer, ok: http.StatusOK},
	{method: "POST", route: "/api/v1/apps", min: tenancy.RoleEditor, ok: http.StatusCreated,
		body: func(f roleFixture) any { return map[string]any{"name": "New app " + f.TableID} }},
	{method: "GET", route: "/api/v1/apps/:app/tables", min: tenancy.RoleViewer, ok: http.StatusOK},
	{method: "POST", route: "/api/v1/apps/:app/tables", min: tenancy.RoleEditor, ok: http.StatusCreated,
		body: func(roleFixture) any { return map[string]any{"name": "New table", "fields": []any{}} }},
	{method: "GET", route: "/api/v1/tables/:table", min: tenancy.RoleViewer, ok: http.StatusOK},

	{method: "POST", route: "/api/v1/tables/:table/fields", min: tenancy.RoleEditor, ok: http.StatusCreated,
		body: func(roleFixture) any { return map[string]any{"name": "Added", "type": "number"} }},
	{method: "PATCH", route: "/api/v1/tables/:table/fields/:field", min: tenancy.RoleEditor, ok: http.StatusOK,
		body: func(roleFixture) any { return map[string]any{"name": "Renamed"} }},
	{method: "DELETE", route: "/api/v1/tables/:table/fields/:field", min: tenancy.RoleEditor, ok: http.StatusNoContent},

	{method: "GET", route: "/api/v1/tables/:table/rows", min: tenancy.RoleViewer, ok: http.StatusOK},
	{method: "POST", route: "/api/v1/tables/:table/rows", min: tenancy.RoleEditor, ok: http.StatusCreated,
		body: func(f roleFixture) any {
			return map[string]any{"rows": []any{map[string]any{"cells": map[string]any{f.FieldID: "new"}}}}
		}},
	{method: "PATCH", route: "/api/v1/tables/:table/rows", min: tenancy.RoleEditor, ok: http.StatusOK,
		body: func(f roleFixture) any {
			return map[string]any{"rows": []any{map[string]any{"id": f.RowID, "version": 1, "cells": map[string]any{f.FieldID: "changed"}}}}
		}},
	{method: "DELETE", route: "/api/v1/tables/:table/rows", min: tenancy.RoleEditor, ok: http.StatusOK,
		body: func(f roleFixture) any { return map[string]any{"ids": []string{f.RowID}} }},
	{method: "GET", route: "/api/v1/tables/:table/rows/:row", min: tenancy.RoleViewer, ok: http.StatusOK},
	{method: "GET", route: "/api/v1/tables/:table/count", min: tenancy.RoleViewer, ok: http.StatusOK},
	{method: "GET", route: "/api/v1/tables/:table/events", min: tenancy.RoleViewer, ok: http.StatusOK},
	{method: "GET", route: "/api/v1/tables/:table/csv", min: tenancy.RoleViewer, ok: http.StatusOK},
	{method: "POST", route: "/api/v1/tables/:table/csv", min: tenancy.RoleEditor, ok: http.StatusCreated,
		body: func(roleFixture) any { return csvBody("Name\nimported\n") }},

	{method: "POST", route: "/api/v1/tables/:table/automations", min: tenancy.RoleEditor, ok: http.StatusCreated,
		body: func(roleFixture) any {
			return map[string]any{"name": "New automation", "trigger": map[string]any{"event": "row.deleted"},
				"actions": []any{map[string]any{"type": "webhook", "url": "https://example.invalid/hook"}}}
		}},
	{method: "GET", route: "/api/v1/tables/:table/automations", min: tenancy.RoleViewer, ok: http.StatusOK},
	{method: "GET", route: "/api/v1/tables/:table/automations/:automation", min: tenancy.RoleViewer, ok: http.StatusOK},
	{method: "PATCH", route: "/api/v1/tables/:table/automations/:automation", min: tenancy.RoleEditor, ok: http.StatusOK,
		body: func(roleFixture) any { return map[string]any{"name": "Renamed"} }},
	{method: "DELETE", route: "/api/v1/tables/:table/automations/:automation", min: tenancy.RoleEditor, ok: http.StatusNoContent},
	{method: "GET", route: "/api/v1/tables/:table/automations/:automation/runs", min: tenancy.RoleViewer, ok: http.StatusOK},
	{method: "POST", route: "/api/v1/tables/:table/automations/:automation/runs/:run/replay", min: tenancy.RoleEditor, ok: http.StatusAccepted},

	{method: "GET", route: "/api/v1/tokens", min: tenancy.RoleOwner, ok: http.StatusOK},
	{method: "POST", route: "/api/v1/tokens", min: tenancy.RoleOwner, ok: http.StatusCreated,
		body: func(f roleFixture) any {
			return map[string]any{"name": "script " + f.TableID, "requests_per_minute": 60}
		}},
	{method: "PATCH", route: "/api/v1/tokens/:id", min: tenancy.RoleOwner, ok: http.StatusOK,
		body: func(roleFixture) any { return map[string]any{"requests_per_minute": 30} }},
	{method: "DELETE", route: "/api/v1/tokens/:id", min: tenancy.RoleOwner, ok: http.StatusNoContent},

	{method: "POST", route: "/api/v1/auth/invite", public: http.StatusNotFound,
		body: func(roleFixture) any {
			return map[string]any{"token": "inv_not-an-invite", "password": "correct horse"}
		}},
	{method: "GET", route: "/api/v1/setup", public: http.StatusNotFound},
	{method: "POST", route: "/api/v1/setup", public: http.StatusNotFound,
		body: func(roleFixture) any {
			return map[string]any{"token": "setup_guess", "realm": "R", "email": "a@example.test", "password": "correct horse"}
		}},
	{method: "GET", route: "/api/v1/members", min: tenancy.RoleOwner, ok: http.StatusOK},
	{method: "POST", route: "/api/v1/members", min: tenancy.RoleOwner, ok: http.StatusCreated,
		body: func(f roleFixture) any {
			return map[string]any{"email": "added-" + f.TableID[:8] + "@example.test", "role": "viewer", "password": "correct horse"}
		}},
	{method: "PATCH", route: "/api/v1/members/:user", min: tenancy.RoleOwner, ok: http.StatusOK,
		body: func(roleFixture) any { return map[string]any{"role": "editor"} }},
	{method: "DELETE", route: "/api/v1/members/:user", min: tenancy.RoleOwner, ok: http.StatusNoContent},
	{method: "GET", route: "/api/v1/audit", min: tenancy.RoleOwner, ok: http.StatusOK},
	{method: "GET", route: "/api/v1/usage", min: tenancy.RoleOwner, ok: http.StatusOK},
	// Operators only: no caller here is one, whatever their role.
	{method: "GET", route: "/api/v1/operator/usage", min: tenancy.RoleViewer, ok: http.StatusForbidden},
}

// expect is the status a caller with role ("" for none) gets.
func (s roleScenario) expect(role tenancy.Role) int {
	switch {
	case s.min == "":
		return s.public
	case role == "":
		return http.StatusUnauthorized
	case role.AtLeast(s.min):
		return s.ok
	}
	return http.StatusForbidden
}

func (s roleScenario) path(f roleFixture) string {
	return strings.NewReplacer(":app", f.AppID, ":table", f.TableID, ":field", f.FieldID, ":row", f.RowID, ":id", f.TokenID,
		":automation", f.AutomationID, ":run", f.RunID, ":user", f.MemberID).Replace(s.route)
}

// roleCaller is who sends a scenario's request: a role through a token or a
// session, or nobody.
type roleCaller struct {
	name    string
	role    tenancy.Role
	token   string
	browser *browser
}

// send makes one request as c; JSON bodies as JSON, CSV as text/csv.
func (c roleCaller) send(t *testing.T, app *testenv.App, method, path string, body any) testenv.Response {
	t.Helper()
	var rd io.Reader
	ctype := ""
	switch b := body.(type) {
	case nil:
	case csvBody:
		rd, ctype = strings.NewReader(string(b)), "text/csv"
	default:
		j, err := json.Marshal(b)
		require.NoError(t, err)
		rd, ctype = bytes.NewReader(j), "application/json"
	}
	req, err := http.NewRequest(method, app.URL+path, rd)
	require.NoError(t, err)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	switch {
	case c.token != "":
		req.Header.Set("Authorization", "Bearer "+c.token)
	case c.browser != nil:
		req.AddCookie(&http.Cookie{Name: tenancy.SessionCookie, Value: c.browser.session})
		req.AddCookie(&http.Cookie{Name: tenancy.CSRFCookie, Value: c.browser.csrf})
		req.Header.Set(tenancy.CSRFHeader, c.browser.csrf)
		req.Header.Set(tenancy.RealmHeader, c.browser.realm)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	if res.StatusCode == http.StatusOK && res.Header.Get("Content-Type") == "text/event-stream" {
		// A live stream does not end: its first event is the answer.
		line, err := bufio.NewReader(res.Body).ReadString('\n')
		require.NoError(t, err)
		return testenv.Response{Status: res.StatusCode, Header: res.Header, Body: []byte(line)}
	}
	data, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return testenv.Response{Status: res.StatusCode, Header: res.Header, Body: data}
}

// routerAPIRoutes lists the router's API routes as "METHOD /path", leaving out
// what is not API (health, metrics, the UI) and Echo's not-found catch-alls.
func routerAPIRoutes(app *testenv.App) []string {
	var out []string
	for _, r := range app.Handler().(*echo.Echo).Routes() {
		if r.Method == echo.RouteNotFound || !strings.HasPrefix(r.Path, "/api/v1/") || strings.Contains(r.Path, "*") {
			continue
		}
		out = append(out, r.Method+" "+r.Path)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestRolesCoverEveryRoute fails when a route is registered without a row in
// roleScenarios, or the table names a route that is gone.
func TestRolesCoverEveryRoute(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	var table []string
	for _, s := range roleScenarios {
		table = append(table, s.method+" "+s.route)
	}
	slices.Sort(table)
	require.Equal(t, routerAPIRoutes(app), table, "every API route needs its row in roleScenarios (test/roles_test.go)")
}

// TestRoles runs every route as owner, editor and viewer, through a token
// and through a session, and as nobody, against the real router, and checks
// the status; a refused write must have changed nothing.
func TestRoles(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	owner := app.NewTenant(t, tenancy.RoleOwner, nil)
	editor := app.AddMember(t, owner.RealmID, tenancy.RoleEditor, nil)
	viewer := app.AddMember(t, owner.RealmID, tenancy.RoleViewer, nil)

	callers := []roleCaller{{name: "nobody"}}
	for _, m := range []testenv.Tenant{owner, editor, viewer} {
		b, res := signIn(t, app, m.Email, m.Password)
		require.Equal(t, http.StatusOK, res.Status, string(res.Body))
		b.realm = m.RealmID.String()
		callers = append(callers,
			roleCaller{name: string(m.Role) + " token", role: m.Role, token: m.Token},
			roleCaller{name: string(m.Role) + " session", role: m.Role, browser: b})
	}

	fixture := func(t *testing.T) roleFixture {
		t.Helper()
		tok, _, err := app.Tenancy.CreateToken(context.Background(), owner.RealmID, owner.Email, "fixture", nil)
		require.NoError(t, err)
		f := roleFixture{seeded: seed(t, app, owner.Token, 1), TokenID: tok.ID.String(),
			MemberID: app.AddMember(t, owner.RealmID, tenancy.RoleViewer, nil).UserID.String()}
		res := app.Do(t, "POST", "/api/v1/tables/"+f.TableID+"/automations", owner.Token, map[string]any{
			"name": "Fixture", "trigger": map[string]any{"event": "row.deleted"},
			"actions": []any{map[string]any{"type": "webhook", "url": "https://example.invalid/hook"}}})
		require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
		f.AutomationID = res.Map(t)["id"].(string)
		f.RunID = uuid.NewString()
		_, err = testenv.Pool(t).Exec(context.Background(),
			`INSERT INTO automation_runs (realm_id, id, automation_id, event, event_id, row_ids, hop, status, queued_at)
			 VALUES ($1, $2, $3, 'row.deleted', 1, '{}', 0, 'dead', now())`, owner.RealmID, f.RunID, f.AutomationID)
		require.NoError(t, err)
		_, err = testenv.Pool(t).Exec(context.Background(),
			`INSERT INTO webhook_deliveries (realm_id, id, automation_id, action_id, run_id, url, state, attempts, payload, queued_at)
			 VALUES ($1, $2, $3, 'act_x', $4, 'https://example.invalid/hook', 'dead', 8, '\x7b7d', now())`,
			owner.RealmID, "msg_"+f.RunID, f.AutomationID, f.RunID)
		require.NoError(t, err)
		return f
	}

	// Sequential on purpose: one realm, and the fairness controller would
	// rightly refuse a realm that sends hundreds of requests at once.
	for _, s := range roleScenarios {
		for _, c := range callers {
			t.Run(fmt.Sprintf("%s %s as %s", s.method, s.route, c.name), func(t *testing.T) {
				f := fixture(t)
				var body any
				switch {
				case s.body != nil:
					body = s.body(f)
				case s.route == "/api/v1/auth/login":
					body = map[string]any{"email": viewer.Email, "password": viewer.Password}
				}
				if (s.route == "/api/v1/auth/logout" || s.route == "/api/v1/auth/login") && c.browser != nil {
					// Signing out, or in again, ends the browser's session:
					// not the one the next scenarios use.
					fresh, res := signIn(t, app, emailOf(c, owner, editor, viewer), owner.Password)
					require.Equal(t, http.StatusOK, res.Status)
					fresh.realm = owner.RealmID.String()
					c.browser = fresh
				}
				want := s.expect(c.role)
				res := c.send(t, app, s.method, s.path(f), body)
				require.Equal(t, want, res.Status, "%s %s as %s: %s", s.method, s.route, c.name, res.Body)
				switch want {
				case http.StatusForbidden:
					require.Equal(t, "forbidden", res.ErrorCode(t))
					requireUntouched(t, app, owner.Token, f)
				case http.StatusUnauthorized:
					require.Equal(t, "unauthorized", res.ErrorCode(t))
					requireUntouched(t, app, owner.Token, f)
				}
			})
		}
	}
}

func emailOf(c roleCaller, members ...testenv.Tenant) string {
	for _, m := range members {
		if m.Role == c.role {
			return m.Email
		}
	}
	return ""
}

// requireUntouched checks that a refused request changed nothing of the
// fixture: the app's one table, the table's one field, its one row at
// version 1, the token live and without a ceiling, and no app or token made
// under the fixture's names.
func requireUntouched(t *testing.T, app *testenv.App, ownerToken string, f roleFixture) {
	t.Helper()
	res := app.Do(t, "GET", "/api/v1/tables/"+f.TableID, ownerToken, nil)
	require.Equal(t, http.StatusOK, res.Status)
	var tbl struct {
		Name   string
		Fields []struct{ ID, Name string }
	}
	res.JSON(t, &tbl)
	require.Equal(t, "People", tbl.Name)
	require.Len(t, tbl.Fields, 1)
	require.Equal(t, "Name", tbl.Fields[0].Name)

	res = app.Do(t, "GET", "/api/v1/tables/"+f.TableID+"/rows", ownerToken, nil)
	var rows struct {
		Rows []struct {
			ID      string
			Version int
		}
	}
	res.JSON(t, &rows)
	require.Len(t, rows.Rows, 1)
	require.Equal(t, f.RowID, rows.Rows[0].ID)
	require.Equal(t, 1, rows.Rows[0].Version)

	res = app.Do(t, "GET", "/api/v1/apps/"+f.AppID+"/tables", ownerToken, nil)
	require.Len(t, res.Map(t)["tables"], 1)

	var revoked bool
	var limit *int
	require.NoError(t, testenv.Pool(t).QueryRow(context.Background(),
		`SELECT t.revoked_at IS NOT NULL, l.requests_per_minute
		 FROM api_tokens t LEFT JOIN token_limits l ON l.realm_id = t.realm_id AND l.token_id = t.id
		 WHERE t.id = $1`, f.TokenID).Scan(&revoked, &limit))
	require.False(t, revoked)
	require.Nil(t, limit)

	// The automation is as made, and its run's delivery still dead.
	res = app.Do(t, "GET", "/api/v1/tables/"+f.TableID+"/automations", ownerToken, nil)
	require.Equal(t, http.StatusOK, res.Status)
	autos := res.Map(t)["automations"].([]any)
	require.Len(t, autos, 1, "a refused POST made an automation, or a refused DELETE removed one")
	require.Equal(t, "Fixture", autos[0].(map[string]any)["name"])
	var state string
	require.NoError(t, testenv.Pool(t).QueryRow(context.Background(),
		`SELECT state FROM webhook_deliveries WHERE run_id = $1`, f.RunID).Scan(&state))
	require.Equal(t, "dead", state, "a refused replay replayed")

	// Nothing was created under this fixture's names.
	var made int
	require.NoError(t, testenv.Pool(t).QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM api_tokens WHERE name = 'script ' || $1)`, f.TableID).Scan(&made))
	require.Zero(t, made, "a refused POST /tokens made a token")
	res = app.Do(t, "GET", "/api/v1/apps", ownerToken, nil)
	require.NotContains(t, string(res.Body), "New app "+f.TableID, "a refused POST /apps made an app")
}

// TestRolesMatchOpenAPI: the role the served OpenAPI document names for each
// operation (x-appdor-role) is the role the scenario table proves.
func TestRolesMatchOpenAPI(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	res := app.Do(t, "GET", "/api/v1/openapi.json", "", nil)
	require.Equal(t, http.StatusOK, res.Status)
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	res.JSON(t, &doc)
	for _, s := range roleScenarios {
		path := strings.TrimPrefix(s.route, "/api/v1")
		for _, seg := range strings.Split(path, "/") {
			if strings.HasPrefix(seg, ":") {
				path = strings.Replace(path, seg, "{"+seg[1:]+"}", 1)
			}
		}
		raw, ok := doc.Paths[path][strings.ToLower(s.method)]
		require.True(t, ok, "%s %s is not in the OpenAPI document", s.method, path)
		var op struct {
			Role string `json:"x-appdor-role"`
		}
		require.NoError(t, json.Unmarshal(raw, &op))
		want := string(s.min)
		if s.route == "/api/v1/me" {
			want = "" // any member, no realm chosen
		}
		require.Equal(t, want, op.Role, "%s %s", s.method, path)
	}
}
