package grid_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fixture is a realm with an editor token, an app, and a helper for each call
// the grid tests make.
type fixture struct {
	t     *testing.T
	app   *testenv.App
	token string
	appID string
}

func setup(t *testing.T) *fixture {
	t.Helper()
	app := testenv.SharedApp(t)
	tn := app.NewTenant(t, tenancy.RoleEditor, nil)
	f := &fixture{t: t, app: app, token: tn.Token}
	res := f.do("POST", "/api/v1/apps", map[string]any{"name": "Ops"})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
	f.appID = res.Map(t)["id"].(string)
	return f
}

func (f *fixture) do(method, path string, body any) testenv.Response {
	f.t.Helper()
	return f.app.Do(f.t, method, path, f.token, body)
}

// ok sends a request and requires status, returning the decoded body.
func (f *fixture) ok(status int, method, path string, body any) map[string]any {
	f.t.Helper()
	res := f.do(method, path, body)
	require.Equal(f.t, status, res.Status, "%s %s: %s", method, path, res.Body)
	if len(res.Body) == 0 {
		return nil
	}
	return res.Map(f.t)
}

// table makes a table with fields given as name → type (options by name in
// opts) and returns its id and its field ids by name.
type table struct {
	ID     string
	Fields map[string]string
}

func (f *fixture) table(name string, fields ...map[string]any) table {
	f.t.Helper()
	m := f.ok(http.StatusCreated, "POST", "/api/v1/apps/"+f.appID+"/tables", map[string]any{"name": name, "fields": fields})
	tb := table{ID: m["id"].(string), Fields: map[string]string{}}
	for _, x := range m["fields"].([]any) {
		fm := x.(map[string]any)
		tb.Fields[fm["name"].(string)] = fm["id"].(string)
	}
	return tb
}

// insert writes rows (cells keyed by field name) and returns their ids.
func (f *fixture) insert(tb table, rows []map[string]any) []string {
	f.t.Helper()
	var ids []string
	for start := 0; start < len(rows); start += 1000 {
		end := min(start+1000, len(rows))
		batch := make([]map[string]any, 0, end-start)
		for _, r := range rows[start:end] {
			batch = append(batch, map[string]any{"cells": tb.cells(r)})
		}
		m := f.ok(http.StatusCreated, "POST", "/api/v1/tables/"+tb.ID+"/rows", map[string]any{"rows": batch})
		for _, r := range m["rows"].([]any) {
			ids = append(ids, r.(map[string]any)["id"].(string))
		}
	}
	return ids
}

// cells turns cells keyed by field name into cells keyed by field id.
func (tb table) cells(byName map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range byName {
		id, ok := tb.Fields[k]
		if !ok {
			panic(fmt.Sprintf("no field %q", k))
		}
		out[id] = v
	}
	return out
}

func field(name, typ string, opts ...map[string]any) map[string]any {
	m := map[string]any{"name": name, "type": typ}
	if len(opts) > 0 {
		m["options"] = opts[0]
	}
	return m
}

// page is a decoded read.
type page struct {
	Rows []struct {
		ID      string         `json:"id"`
		Version int64          `json:"version"`
		Cells   map[string]any `json:"cells"`
	} `json:"rows"`
	NextCursor *string            `json:"next_cursor"`
	Links      map[string]*string `json:"links"`
}

func (f *fixture) read(path string) page {
	f.t.Helper()
	res := f.do("GET", path, nil)
	require.Equal(f.t, http.StatusOK, res.Status, "GET %s: %s", path, res.Body)
	var p page
	res.JSON(f.t, &p)
	return p
}

// doWithHeader is testenv's Do with extra headers.
func doWithHeader(t *testing.T, method, url, token string, body any, headers map[string]string) testenv.Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		require.NoError(t, err)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return testenv.Response{Status: res.StatusCode, Header: res.Header, Body: b}
}
