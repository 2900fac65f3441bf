package automations_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/automations"
	"github.com/appdor/appdor/grid"
	"github.com/appdor/appdor/rls"
	"github.com/appdor/appdor/server"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// quick is a test configuration: workers that look for work often, retries
// in milliseconds, and loopback allowed for the sink.
func quick(c *automations.Config) {
	c.PollInterval = 20 * time.Millisecond
	c.SampleInterval = 100 * time.Millisecond
	c.RetrySchedule = []time.Duration{50 * time.Millisecond, 50 * time.Millisecond}
	c.DeliveryTimeout = 5 * time.Second
	c.AllowCIDRs = loopback
}

// newApp starts an Appdor with quick automations, changed by mutate.
func newApp(t testing.TB, mutate func(*automations.Config)) *testenv.App {
	t.Helper()
	return testenv.NewApp(t, func(c *server.Config) {
		quick(&c.Automations)
		if mutate != nil {
			mutate(&c.Automations)
		}
	})
}

// isolated is a database of the test's own, for tests whose workers must
// be the only ones: every worker on a database serves every realm's queue.
type isolated struct {
	url  string
	pool *pgxpool.Pool
}

func isolate(t *testing.T) isolated {
	t.Helper()
	url, name, err := testenv.CreateDatabase(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = testenv.DropDatabase(context.Background(), name) })
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return isolated{url, pool}
}

// app starts an Appdor on the isolated database.
func (db isolated) app(t *testing.T, mutate func(*automations.Config)) *testenv.App {
	t.Helper()
	serverURL, err := testenv.AsServer(db.url)
	require.NoError(t, err)
	app := testenv.NewApp(t, func(c *server.Config) {
		c.DatabaseURL = serverURL // the serving role, under least privilege
		quick(&c.Automations)
		if mutate != nil {
			mutate(&c.Automations)
		}
	})
	app.Tenancy = tenancy.New(db.pool)
	return app
}

// fixture is a realm with an editor, an app and a table of three text
// fields and a number.
type fixture struct {
	t      testing.TB
	app    *testenv.App
	tenant testenv.Tenant
	appID  string
	table  string
	fields map[string]string // name → id
}

func setup(t testing.TB, app *testenv.App) *fixture {
	t.Helper()
	f := &fixture{t: t, app: app, tenant: app.NewTenant(t, tenancy.RoleEditor, nil)}
	f.appID = f.ok(http.StatusCreated, "POST", "/api/v1/apps", map[string]any{"name": "Ops"})["id"].(string)
	f.table, f.fields = f.makeTable("Orders", "name", "status", "copy")
	return f
}

func (f *fixture) makeTable(name string, fields ...string) (string, map[string]string) {
	f.t.Helper()
	defs := []map[string]any{}
	for _, n := range fields {
		defs = append(defs, map[string]any{"name": n, "type": "text"})
	}
	defs = append(defs, map[string]any{"name": "n", "type": "number"})
	m := f.ok(http.StatusCreated, "POST", "/api/v1/apps/"+f.appID+"/tables", map[string]any{"name": name, "fields": defs})
	ids := map[string]string{}
	for _, x := range m["fields"].([]any) {
		fm := x.(map[string]any)
		ids[fm["name"].(string)] = fm["id"].(string)
	}
	return m["id"].(string), ids
}

func (f *fixture) do(method, path string, body any) testenv.Response {
	f.t.Helper()
	return f.app.Do(f.t, method, path, f.tenant.Token, body)
}

func (f *fixture) ok(status int, method, path string, body any) map[string]any {
	f.t.Helper()
	res := f.do(method, path, body)
	require.Equal(f.t, status, res.Status, "%s %s: %s", method, path, res.Body)
	if len(res.Body) == 0 {
		return nil
	}
	return res.Map(f.t)
}

// cells keys cells by field name → by field id.
func (f *fixture) cells(byName map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range byName {
		out[f.fields[k]] = v
	}
	return out
}

// insert writes rows (cells by field name) and returns their ids.
func (f *fixture) insert(rows ...map[string]any) []string {
	f.t.Helper()
	var in []map[string]any
	for _, r := range rows {
		in = append(in, map[string]any{"cells": f.cells(r)})
	}
	m := f.ok(http.StatusCreated, "POST", "/api/v1/tables/"+f.table+"/rows", map[string]any{"rows": in})
	var ids []string
	for _, r := range m["rows"].([]any) {
		ids = append(ids, r.(map[string]any)["id"].(string))
	}
	return ids
}

func (f *fixture) automations() string { return "/api/v1/tables/" + f.table + "/automations" }

// create makes an automation and returns its answer.
func (f *fixture) create(body map[string]any) map[string]any {
	f.t.Helper()
	return f.ok(http.StatusCreated, "POST", f.automations(), body)
}

func webhook(url string) map[string]any { return map[string]any{"type": "webhook", "url": url} }

// secretOf is the secret of the automation answer's first webhook action.
func secretOf(t testing.TB, a map[string]any) string {
	t.Helper()
	for _, x := range a["actions"].([]any) {
		if s, ok := x.(map[string]any)["secret"].(string); ok {
			return s
		}
	}
	t.Fatal("no secret in the answer")
	return ""
}

// runs reads an automation's run log.
func (f *fixture) runs(id string) []automations.Run {
	f.t.Helper()
	res := f.do("GET", f.automations()+"/"+id+"/runs", nil)
	require.Equal(f.t, http.StatusOK, res.Status, string(res.Body))
	var out struct {
		Runs []automations.Run `json:"runs"`
	}
	res.JSON(f.t, &out)
	return out.Runs
}

// sink is a webhook receiver that records every request and answers with
// what answer says for the nth request (from 1).
type sink struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []received
	answer func(n int, w http.ResponseWriter)
}

type received struct {
	header http.Header
	body   []byte
}

func newSink(t testing.TB, answer func(n int, w http.ResponseWriter)) *sink {
	s := &sink{answer: answer}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.got = append(s.got, received{r.Header.Clone(), b})
		n := len(s.got)
		s.mu.Unlock()
		if s.answer != nil {
			s.answer(n, w)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sink) received() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.got...)
}

func (s *sink) await(t *testing.T, n int) []received {
	t.Helper()
	require.Eventually(t, func() bool { return len(s.received()) >= n }, 15*time.Second, 10*time.Millisecond,
		"the sink received %d requests, not %d", len(s.received()), n)
	return s.received()
}

// awaitRun waits for the automation's newest run to reach status.
func (f *fixture) awaitRun(id, status string) automations.Run {
	f.t.Helper()
	var last []automations.Run
	require.Eventually(f.t, func() bool {
		last = f.runs(id)
		return len(last) > 0 && last[0].Status == status
	}, 15*time.Second, 20*time.Millisecond, "no run reached %s: %+v", status, last)
	return last[0]
}

func TestCRUDValidationAndRoles(t *testing.T) {
	t.Parallel()
	app := newApp(t, nil)
	f := setup(t, app)
	other := app.NewTenant(t, tenancy.RoleEditor, nil)

	a := f.create(map[string]any{
		"name":      "Notify CRM",
		"trigger":   map[string]any{"event": "row.updated", "fields": []string{f.fields["status"]}},
		"condition": []string{f.fields["status"] + ":eq:done"},
		"actions":   []any{webhook("https://example.com/hook")},
	})
	id := a["id"].(string)
	require.Equal(t, true, a["enabled"])
	secret := secretOf(t, a)
	require.True(t, strings.HasPrefix(secret, "whsec_"), secret)
	_, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)

	// The secret is shown once: reads never have it.
	got := f.ok(http.StatusOK, "GET", f.automations()+"/"+id, nil)
	require.NotContains(t, got["actions"].([]any)[0].(map[string]any), "secret")
	list := f.ok(http.StatusOK, "GET", f.automations(), nil)["automations"].([]any)
	require.Len(t, list, 1)
	require.NotContains(t, list[0].(map[string]any)["actions"].([]any)[0].(map[string]any), "secret")

	// A change that keeps the webhook's id keeps its secret and shows none; a
	// new webhook gets a new secret, shown.
	action := got["actions"].([]any)[0].(map[string]any)
	p := f.ok(http.StatusOK, "PATCH", f.automations()+"/"+id, map[string]any{
		"name": "Notify CRM and ERP", "enabled": false,
		"actions": []any{action, webhook("https://example.org/erp")},
	})
	require.Equal(t, "Notify CRM and ERP", p["name"])
	require.Equal(t, false, p["enabled"])
	acts := p["actions"].([]any)
	require.Equal(t, action["id"], acts[0].(map[string]any)["id"])
	require.NotContains(t, acts[0].(map[string]any), "secret")
	require.True(t, strings.HasPrefix(acts[1].(map[string]any)["secret"].(string), "whsec_"))

	// Validation: 422 with details naming each wrong member.
	for name, tc := range map[string]struct {
		body  map[string]any
		field string
	}{
		"unknown event":      {map[string]any{"name": "x", "trigger": map[string]any{"event": "row.exploded"}, "actions": []any{webhook("https://e.com")}}, "trigger.event"},
		"condition field":    {map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "condition": []string{"nope:eq:1"}, "actions": []any{webhook("https://e.com")}}, "condition"},
		"condition on gone":  {map[string]any{"name": "x", "trigger": map[string]any{"event": "row.deleted"}, "condition": []string{f.fields["status"] + ":eq:x"}, "actions": []any{webhook("https://e.com")}}, "condition"},
		"bad url":            {map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{webhook("ftp://e.com")}}, "actions[0].url"},
		"no actions":         {map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{}}, "actions"},
		"unknown type":       {map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{map[string]any{"type": "email"}}}, "actions[0].type"},
		"wrong cell type":    {map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{map[string]any{"type": "update_row", "cells": map[string]any{f.fields["n"]: "many"}}}}, "actions[0].cells." + f.fields["n"]},
		"template elsewhere": {map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{map[string]any{"type": "update_row", "cells": map[string]any{f.fields["copy"]: "{{" + uuid.NewString() + "}}"}}}}, "actions[0].cells." + f.fields["copy"]},
		"no table":           {map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{map[string]any{"type": "create_row", "cells": map[string]any{f.fields["copy"]: "x"}}}}, "actions[0].table"},
		"fields on create":   {map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created", "fields": []string{f.fields["status"]}}, "actions": []any{webhook("https://e.com")}}, "trigger.fields"},
		"missing name":       {map[string]any{"trigger": map[string]any{"event": "row.created"}, "actions": []any{webhook("https://e.com")}}, "name"},
	} {
		t.Run(name, func(t *testing.T) {
			res := f.do("POST", f.automations(), tc.body)
			require.Equal(t, http.StatusUnprocessableEntity, res.Status, string(res.Body))
			require.Equal(t, "validation_failed", res.ErrorCode(t))
			require.Contains(t, string(res.Body), `"field":"`+tc.field+`"`, string(res.Body))
		})
	}
	// create_row only writes to a table of the same app.
	otherApp := f.ok(http.StatusCreated, "POST", "/api/v1/apps", map[string]any{"name": "Other"})["id"].(string)
	ot := f.ok(http.StatusCreated, "POST", "/api/v1/apps/"+otherApp+"/tables", map[string]any{"name": "T", "fields": []any{map[string]any{"name": "a", "type": "text"}}})
	res := f.do("POST", f.automations(), map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"},
		"actions": []any{map[string]any{"type": "create_row", "table": ot["id"], "cells": map[string]any{ot["fields"].([]any)[0].(map[string]any)["id"].(string): "x"}}}})
	require.Equal(t, http.StatusUnprocessableEntity, res.Status, string(res.Body))
	require.Contains(t, string(res.Body), "same app")
	// Unknown members of the body are refused.
	res = f.do("POST", f.automations(), map[string]any{"name": "x", "when": "now"})
	require.Equal(t, http.StatusBadRequest, res.Status, string(res.Body))

	// Roles: a viewer reads, and may not manage.
	viewer := app.AddMember(t, f.tenant.RealmID, tenancy.RoleViewer, nil)
	require.Equal(t, http.StatusOK, app.Do(t, "GET", f.automations(), viewer.Token, nil).Status)
	require.Equal(t, http.StatusOK, app.Do(t, "GET", f.automations()+"/"+id+"/runs", viewer.Token, nil).Status)
	res = app.Do(t, "POST", f.automations(), viewer.Token, map[string]any{"name": "x"})
	require.Equal(t, http.StatusForbidden, res.Status)
	require.Equal(t, http.StatusForbidden, app.Do(t, "DELETE", f.automations()+"/"+id, viewer.Token, "{}").Status)

	// Another realm sees nothing of it.
	require.Equal(t, http.StatusNotFound, app.Do(t, "GET", f.automations()+"/"+id, other.Token, nil).Status)
	require.Equal(t, http.StatusNotFound, app.Do(t, "GET", f.automations(), other.Token, nil).Status)

	f.ok(http.StatusNoContent, "DELETE", f.automations()+"/"+id, nil)
	require.Equal(t, http.StatusNotFound, f.do("GET", f.automations()+"/"+id, nil).Status)
	require.Equal(t, http.StatusNotFound, f.do("DELETE", f.automations()+"/"+id, nil).Status)
}

func TestWebhookIsSignedAndFollowsTheCondition(t *testing.T) {
	t.Parallel()
	f := setup(t, newApp(t, nil))
	s := newSink(t, nil)
	a := f.create(map[string]any{
		"name": "Done", "trigger": map[string]any{"event": "row.created"},
		"condition": []string{f.fields["status"] + ":eq:done"},
		"actions":   []any{webhook(s.srv.URL + "/hook")},
	})
	wh, err := standardwebhooks.NewWebhook(secretOf(t, a))
	require.NoError(t, err)

	ids := f.insert(map[string]any{"name": "a", "status": "done"}, map[string]any{"name": "b", "status": "open"})
	got := s.await(t, 1)
	require.NoError(t, wh.Verify(got[0].body, got[0].header), "the signature verifies with the secret shown at creation")
	require.True(t, strings.HasPrefix(got[0].header.Get("webhook-id"), "msg_"))
	require.Equal(t, "application/json", got[0].header.Get("Content-Type"))

	var p automations.WebhookPayload
	require.NoError(t, json.Unmarshal(got[0].body, &p))
	require.Equal(t, "row.created", p.Type)
	require.Equal(t, f.table, p.Data.TableID.String())
	require.Len(t, p.Data.Rows, 1, "the condition keeps only the done row")
	require.Equal(t, ids[0], p.Data.Rows[0].ID.String())
	var cells map[string]string
	require.NoError(t, json.Unmarshal(p.Data.Rows[0].Cells, &cells))
	require.Equal(t, "a", cells[f.fields["name"]])

	// A tampered body does not verify.
	require.Error(t, wh.Verify(append(got[0].body, ' '), got[0].header))

	run := f.awaitRun(a["id"].(string), "succeeded")
	require.Len(t, run.Deliveries, 1)
	require.Equal(t, "delivered", run.Deliveries[0].State)
	require.Equal(t, got[0].header.Get("webhook-id"), run.Deliveries[0].ID)
	require.NotNil(t, run.LatencyMS)
	time.Sleep(200 * time.Millisecond)
	require.Len(t, s.received(), 1, "one write batch, one delivery")
}

func TestUpdateRowAndCreateRow(t *testing.T) {
	t.Parallel()
	f := setup(t, newApp(t, nil))
	log, logFields := f.makeTable("Log", "title")
	a := f.create(map[string]any{
		"name": "Stamp and log", "trigger": map[string]any{"event": "row.created"},
		"actions": []any{
			map[string]any{"type": "update_row", "cells": map[string]any{
				f.fields["status"]: "seen", f.fields["copy"]: "{{" + f.fields["name"] + "}}"}},
			map[string]any{"type": "create_row", "table": log, "cells": map[string]any{
				logFields["title"]: "{{" + f.fields["copy"] + "}}", logFields["n"]: 7}},
		},
	})
	// A run older than the retention, which the next run clears.
	old := automations.UUIDAt(time.Now().Add(-automations.RunRetention - time.Hour))
	_, err := testenv.Pool(t).Exec(t.Context(),
		`INSERT INTO automation_runs (realm_id, id, automation_id, event, event_id, row_ids, hop, status, queued_at, finished_at)
		 VALUES ($1, $2, $3, 'row.created', 0, '{}', 0, 'succeeded', now(), now())`, f.tenant.RealmID, old, a["id"])
	require.NoError(t, err)
	require.Len(t, f.runs(a["id"].(string)), 1)

	ids := f.insert(map[string]any{"name": "widget"})
	var runs []automations.Run
	require.Eventually(t, func() bool {
		runs = f.runs(a["id"].(string))
		return len(runs) > 0 && runs[0].ID != old && runs[0].Status == "succeeded"
	}, 15*time.Second, 20*time.Millisecond)
	require.Len(t, runs, 1, "the old run was pruned")

	row := f.ok(http.StatusOK, "GET", "/api/v1/tables/"+f.table+"/rows/"+ids[0], nil)
	cells := row["cells"].(map[string]any)
	require.Equal(t, "seen", cells[f.fields["status"]])
	require.Equal(t, "widget", cells[f.fields["copy"]], "update_row copies the name")
	require.EqualValues(t, 2, row["version"])

	logged := f.ok(http.StatusOK, "GET", "/api/v1/tables/"+log+"/rows", nil)["rows"].([]any)
	require.Len(t, logged, 1)
	lc := logged[0].(map[string]any)["cells"].(map[string]any)
	require.Equal(t, "widget", lc[logFields["title"]], "create_row sees what update_row wrote before it")
	require.EqualValues(t, 7, lc[logFields["n"]])
}

// TestALaterAutomationSeesAnEarlierOnesWrite: an event's automations run in
// order, and a webhook with no condition after an update_row sends the row
// as the update_row left it, not as the event's write did (an evaluation
// reads a small event's rows with the event, and those are stale once an
// automation has written).
func TestALaterAutomationSeesAnEarlierOnesWrite(t *testing.T) {
	t.Parallel()
	f := setup(t, newApp(t, nil))
	s := newSink(t, nil)
	f.create(map[string]any{
		"name": "Stamp", "trigger": map[string]any{"event": "row.created"},
		"actions": []any{map[string]any{"type": "update_row", "cells": map[string]any{f.fields["status"]: "seen"}}},
	})
	f.create(map[string]any{
		"name": "Notify", "trigger": map[string]any{"event": "row.created"},
		"actions": []any{webhook(s.srv.URL + "/hook")},
	})
	ids := f.insert(map[string]any{"name": "a", "status": "new"})
	got := s.await(t, 1)
	var p automations.WebhookPayload
	require.NoError(t, json.Unmarshal(got[0].body, &p))
	require.Len(t, p.Data.Rows, 1)
	require.Equal(t, ids[0], p.Data.Rows[0].ID.String())
	var cells map[string]string
	require.NoError(t, json.Unmarshal(p.Data.Rows[0].Cells, &cells))
	require.Equal(t, "seen", cells[f.fields["status"]], "the webhook sends the row as the update_row left it")
	require.Equal(t, "a", cells[f.fields["name"]])
}

// TestARefusedActionFailsOnlyItsRun: an action refused when it runs (its
// target's field deleted since) fails its automation's run, with nothing of
// that run kept, not even its webhook queued before the refusal; another
// automation of the same event, with webhook actions only, still delivers.
func TestARefusedActionFailsOnlyItsRun(t *testing.T) {
	t.Parallel()
	f := setup(t, newApp(t, nil))
	s := newSink(t, nil)
	log, logFields := f.makeTable("Log", "title")
	refused := f.create(map[string]any{
		"name": "Log it", "trigger": map[string]any{"event": "row.created"},
		"actions": []any{
			webhook(s.srv.URL + "/refused"),
			map[string]any{"type": "create_row", "table": log, "cells": map[string]any{
				logFields["title"]: "{{" + f.fields["name"] + "}}"}},
		},
	})
	plain := f.create(map[string]any{
		"name": "Notify", "trigger": map[string]any{"event": "row.created"},
		"actions": []any{webhook(s.srv.URL + "/plain")},
	})
	f.ok(http.StatusNoContent, "DELETE", "/api/v1/tables/"+log+"/fields/"+logFields["title"], nil)

	f.insert(map[string]any{"name": "widget"})
	run := f.awaitRun(refused["id"].(string), "failed")
	require.NotNil(t, run.LastError)
	require.Contains(t, *run.LastError, "action 1", "the error names the refused action")
	require.Empty(t, run.Deliveries, "the refused run's webhook, queued before the refusal, went with it")

	got := s.await(t, 1)
	var p automations.WebhookPayload
	require.NoError(t, json.Unmarshal(got[0].body, &p))
	require.Equal(t, plain["id"], p.Data.AutomationID.String(), "the other automation of the event delivered")
	f.awaitRun(plain["id"].(string), "succeeded")
	require.Empty(t, f.ok(http.StatusOK, "GET", "/api/v1/tables/"+log+"/rows", nil)["rows"], "the refused create_row wrote nothing")
	time.Sleep(200 * time.Millisecond)
	require.Len(t, s.received(), 1, "nothing from the refused run")
}

// TestRolledBackWriteEmitsNothing: the event is written in the write's own
// transaction, so a write that rolls back leaves none, and one that commits
// leaves one.
func TestRolledBackWriteEmitsNothing(t *testing.T) {
	t.Parallel()
	iso := isolate(t)
	app := iso.app(t, func(c *automations.Config) { c.Workers = -1 })
	f := setup(t, app)
	f.create(map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{webhook("https://example.com")}})
	realm, table := f.tenant.RealmID, uuid.MustParse(f.table)
	db := rls.New(iso.pool, 0, 0)
	write := func(commit bool) error {
		return db.Tx(t.Context(), realm, func(tx pgx.Tx) error {
			tb, err := grid.LoadTable(t.Context(), tx, realm, table)
			if err != nil {
				return err
			}
			rows, err := grid.InsertRows(t.Context(), tx, realm, tb, []map[string]json.RawMessage{{f.fields["name"]: json.RawMessage(`"x"`)}})
			if err != nil {
				return err
			}
			if err := app.Automations().RowsChanged(t.Context(), tx, realm, table, grid.Change{Event: grid.EventRowCreated,
				Rows: []grid.RowRef{{ID: rows[0].ID, Version: rows[0].Version}}}); err != nil {
				return err
			}
			if !commit {
				return context.Canceled // any error rolls back
			}
			return nil
		})
	}
	require.ErrorIs(t, write(false), context.Canceled)
	require.Zero(t, pendingEvents(t, iso.pool, realm), "a rolled-back write emits nothing")
	require.NoError(t, write(true))
	require.Equal(t, 1, pendingEvents(t, iso.pool, realm), "a committed write emits its event")
	// Through the API too: one batch of three rows is one event.
	f.insert(map[string]any{"name": "a"}, map[string]any{"name": "b"}, map[string]any{"name": "c"})
	require.Equal(t, 2, pendingEvents(t, iso.pool, realm))
	// A table with no automation records no event.
	other, _ := f.makeTable("Quiet", "a")
	f.ok(http.StatusCreated, "POST", "/api/v1/tables/"+other+"/rows", map[string]any{"rows": []any{map[string]any{"cells": map[string]any{}}}})
	require.Equal(t, 2, pendingEvents(t, iso.pool, realm))

	// A CSV import records one event per batch of 1,000 rows, not one a row.
	var csv strings.Builder
	csv.WriteString("name\n")
	for i := range 2500 {
		fmt.Fprintf(&csv, "row %d\n", i)
	}
	req, err := http.NewRequest("POST", app.URL+"/api/v1/tables/"+f.table+"/csv", strings.NewReader(csv.String()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "text/csv")
	req.Header.Set("Authorization", "Bearer "+f.tenant.Token)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusCreated, res.StatusCode, string(body))
	require.Equal(t, 5, pendingEvents(t, iso.pool, realm))

	// The queue's depth per realm is on /metrics.
	require.Eventually(t, func() bool {
		m := f.do("GET", "/metrics", nil)
		return strings.Contains(string(m.Body), `appdor_automation_events_pending{realm="`+realm.String()+`"} 5`)
	}, 5*time.Second, 50*time.Millisecond)
}

func pendingEvents(t *testing.T, pool *pgxpool.Pool, realm uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(),
		`SELECT count(*) FROM automation_events WHERE realm_id = $1 AND state = 'pending'`, realm).Scan(&n))
	return n
}

// TestEventCommittedWithoutWorkersIsDeliveredAfterRestart: a server with no
// worker commits an event and stops (as a crash between commit and delivery
// would leave it); a new server on the same database delivers it.
func TestEventCommittedWithoutWorkersIsDeliveredAfterRestart(t *testing.T) {
	t.Parallel()
	db := isolate(t)
	pool := db.pool
	start := func(workers int) *testenv.App {
		return db.app(t, func(c *automations.Config) { c.Workers = workers })
	}
	s := newSink(t, nil)
	f := setup(t, start(-1))
	a := f.create(map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{webhook(s.srv.URL)}})
	f.insert(map[string]any{"name": "a"})
	time.Sleep(300 * time.Millisecond)
	require.Empty(t, s.received(), "no worker runs yet")
	require.Equal(t, 1, pendingEvents(t, pool, f.tenant.RealmID))

	second := start(2)
	f.app = second
	got := s.await(t, 1)
	f.awaitRun(a["id"].(string), "succeeded")
	require.Zero(t, pendingEvents(t, pool, f.tenant.RealmID))
	time.Sleep(200 * time.Millisecond)
	require.Len(t, s.received(), 1)
	require.NotEmpty(t, got[0].header.Get("webhook-id"))
}

// TestAnEvaluationMadeAgainSendsTheSameWebhookID: the workers commit
// asynchronously, so a PostgreSQL crash may lose an evaluation whose
// webhook went out; its event, committed durably with the write, is then
// evaluated again, and the webhook goes again under the id it had. The
// crash is played by putting the event back as it was committed and
// deleting what its evaluation wrote.
func TestAnEvaluationMadeAgainSendsTheSameWebhookID(t *testing.T) {
	t.Parallel()
	db := isolate(t)
	pool := db.pool
	s := newSink(t, nil)
	f := setup(t, db.app(t, func(c *automations.Config) { c.Workers = -1 }))
	a := f.create(map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{webhook(s.srv.URL)}})
	f.insert(map[string]any{"name": "a"})
	var event int64
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT id FROM automation_events WHERE realm_id = $1`, f.tenant.RealmID).Scan(&event))
	_, err := pool.Exec(t.Context(), `CREATE TABLE lost_event AS SELECT * FROM automation_events WHERE id = $1`, event)
	require.NoError(t, err)

	f.app = db.app(t, nil)
	first := s.await(t, 1)
	f.awaitRun(a["id"].(string), "succeeded")

	_, err = pool.Exec(t.Context(), `
		WITH runs AS (DELETE FROM automation_runs WHERE realm_id = $1 AND event_id = $2 RETURNING id),
		     deliveries AS (DELETE FROM webhook_deliveries WHERE realm_id = $1 AND run_id IN (SELECT id FROM runs))
		INSERT INTO automation_events OVERRIDING SYSTEM VALUE SELECT * FROM lost_event`, f.tenant.RealmID, event)
	require.NoError(t, err)
	again := s.await(t, 2)
	require.Equal(t, first[0].header.Get("webhook-id"), again[1].header.Get("webhook-id"), "the same message")
	f.awaitRun(a["id"].(string), "succeeded")

	conn, err := pgx.Connect(t.Context(), testenv.ServerURL(t))
	require.NoError(t, err)
	defer conn.Close(t.Context())
	require.NoError(t, automations.WorkerConnection(t.Context(), conn))
	var sync string
	require.NoError(t, conn.QueryRow(t.Context(), `SHOW synchronous_commit`).Scan(&sync))
	require.Equal(t, "off", sync, "the workers commit asynchronously")
}

// TestAWorkerPlansForTheTableAsItIs: a statement a worker's connection
// prepared while its table was nearly empty, and ran past the point where
// PostgreSQL would settle on a generic plan, still finds one row by its key
// through the index once the table has grown. A plain connection, the
// control, keeps scanning the whole table.
func TestAWorkerPlansForTheTableAsItIs(t *testing.T) {
	t.Parallel()
	plan := func(worker bool) string {
		conn, err := pgx.Connect(t.Context(), testenv.ServerURL(t))
		require.NoError(t, err)
		defer conn.Close(t.Context())
		if worker {
			require.NoError(t, automations.WorkerConnection(t.Context(), conn))
		}
		_, err = conn.Exec(t.Context(), `CREATE TEMPORARY TABLE grows (k bigint PRIMARY KEY, v text NOT NULL);
			INSERT INTO grows SELECT g, 'x' FROM generate_series(1, 3) g`)
		require.NoError(t, err)
		_, err = conn.Exec(t.Context(), `VACUUM grows`) // as a new installation's tables are after migrating
		require.NoError(t, err)
		_, err = conn.Prepare(t.Context(), "one", `SELECT v FROM grows WHERE k = $1`)
		require.NoError(t, err)
		for i := range 8 {
			var v string
			require.NoError(t, conn.QueryRow(t.Context(), "one", i%3+1).Scan(&v))
		}
		_, err = conn.Exec(t.Context(), `INSERT INTO grows SELECT g, repeat('x', 100) FROM generate_series(4, 20000) g`)
		require.NoError(t, err)
		rows, _ := conn.Query(t.Context(), `EXPLAIN (COSTS OFF) EXECUTE one(17)`)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return strings.Join(out, "\n")
	}
	require.Contains(t, plan(false), "Seq Scan on grows", "the control: a plain connection keeps the plan it settled on while the table was small")
	require.Contains(t, plan(true), "Index Scan using grows_pkey", "a worker plans for 20,000 rows")
}

func TestSSRFGuard(t *testing.T) {
	t.Parallel()
	// Loopback is not allowed here: the guard refuses the sink.
	f := setup(t, isolate(t).app(t, func(c *automations.Config) { c.AllowCIDRs = nil }))
	s := newSink(t, nil)
	a := f.create(map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"},
		"actions": []any{webhook(s.srv.URL), webhook("http://10.1.2.3:8080/hook"), webhook("http://169.254.169.254/latest")}})
	f.insert(map[string]any{"name": "a"})
	run := f.awaitRun(a["id"].(string), "dead")
	require.Len(t, run.Deliveries, 3)
	for _, d := range run.Deliveries {
		require.Equal(t, "dead", d.State)
		require.Equal(t, 3, d.Attempts)
		require.NotNil(t, d.LastError)
		require.Contains(t, *d.LastError, "not a permitted destination", "refused at dial time by the guard, not by a timeout")
	}
	require.Empty(t, s.received(), "nothing reached the loopback sink")

	// With loopback allowed (AllowPrivate), the same sink is reached.
	f2 := setup(t, isolate(t).app(t, func(c *automations.Config) { c.AllowCIDRs, c.AllowPrivate = nil, true }))
	a2 := f2.create(map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{webhook(s.srv.URL)}})
	f2.insert(map[string]any{"name": "a"})
	s.await(t, 1)
	f2.awaitRun(a2["id"].(string), "succeeded")
}

func TestRetryKeepsOneWebhookID(t *testing.T) {
	t.Parallel()
	f := setup(t, newApp(t, nil))
	s := newSink(t, func(n int, w http.ResponseWriter) {
		if n == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	a := f.create(map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{webhook(s.srv.URL)}})
	f.insert(map[string]any{"name": "a"})
	got := s.await(t, 2)
	require.Equal(t, got[0].header.Get("webhook-id"), got[1].header.Get("webhook-id"), "a retry is the same message")
	require.Equal(t, got[0].body, got[1].body)
	run := f.awaitRun(a["id"].(string), "succeeded")
	require.Equal(t, 2, run.Attempts)
	require.Equal(t, 2, run.Deliveries[0].Attempts)
	require.Equal(t, http.StatusOK, *run.Deliveries[0].LastStatus)
}

// TestAStoppingWorkerGivesBackItsDelivery: a replica that stops while a
// webhook request of its is in flight gives the delivery back, due at once
// and the attempt not counted, so another replica sends it (with the same
// webhook-id) without waiting out the two-minute lease.
func TestAStoppingWorkerGivesBackItsDelivery(t *testing.T) {
	t.Parallel()
	db := isolate(t)
	first := make(chan struct{})
	s := newSink(t, func(n int, w http.ResponseWriter) {
		if n == 1 {
			close(first)
			time.Sleep(time.Second) // long enough for the replica to stop meanwhile
		}
		w.WriteHeader(http.StatusOK)
	})
	stopping := db.app(t, nil)
	f := setup(t, stopping)
	a := f.create(map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{webhook(s.srv.URL)}})
	f.insert(map[string]any{"name": "a"})
	select {
	case <-first:
	case <-time.After(15 * time.Second):
		t.Fatal("the webhook was never sent")
	}
	stopping.Automations().Close() // mid-request
	var state string
	var attempts int
	var due bool
	require.NoError(t, db.pool.QueryRow(t.Context(),
		`SELECT state, attempts, next_attempt_at <= now() FROM webhook_deliveries WHERE realm_id = $1`,
		f.tenant.RealmID).Scan(&state, &attempts, &due))
	require.Equal(t, "pending", state)
	require.Zero(t, attempts, "an abandoned attempt is not counted")
	require.True(t, due, "given back due now, not at the lease's end")

	other := db.app(t, nil) // the replica that takes over, same database
	f.app = other
	got := s.await(t, 2)
	require.Equal(t, got[0].header.Get("webhook-id"), got[1].header.Get("webhook-id"), "the same message")
	run := f.awaitRun(a["id"].(string), "succeeded")
	require.Equal(t, 1, run.Attempts)
}

// TestAFirstAttemptInFlightIsLeased: the evaluation records its webhook
// delivery already claimed, its first attempt under a lease, for its worker
// to send once the evaluation commits; while that request is in flight the
// idle workers polling beside it do not send it again, and the attempt is
// counted once.
func TestAFirstAttemptInFlightIsLeased(t *testing.T) {
	t.Parallel()
	db := isolate(t)
	inFlight, answer := make(chan struct{}), make(chan struct{})
	s := newSink(t, func(n int, w http.ResponseWriter) {
		if n == 1 {
			close(inFlight)
			<-answer
		}
		w.WriteHeader(http.StatusOK)
	})
	f := setup(t, db.app(t, func(c *automations.Config) { c.Workers = 4 }))
	a := f.create(map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{webhook(s.srv.URL)}})
	f.insert(map[string]any{"name": "a"})
	select {
	case <-inFlight:
	case <-time.After(15 * time.Second):
		t.Fatal("the webhook was never sent")
	}
	var state string
	var attempts int
	var leased bool
	require.NoError(t, db.pool.QueryRow(t.Context(),
		`SELECT state, attempts, next_attempt_at > now() + interval '1 minute' FROM webhook_deliveries WHERE realm_id = $1`,
		f.tenant.RealmID).Scan(&state, &attempts, &leased))
	require.Equal(t, "pending", state)
	require.Equal(t, 1, attempts, "recorded as its first attempt")
	require.True(t, leased, "leased to the worker sending it")
	time.Sleep(300 * time.Millisecond) // three idle workers poll meanwhile
	require.Len(t, s.received(), 1, "no other worker sends it while its request is in flight")
	close(answer)
	run := f.awaitRun(a["id"].(string), "succeeded")
	require.Equal(t, 1, run.Attempts)
	require.Equal(t, 1, run.Deliveries[0].Attempts)
	require.Len(t, s.received(), 1)
}

func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	f := setup(t, newApp(t, nil))
	s := newSink(t, func(n int, w http.ResponseWriter) {
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	a := f.create(map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{webhook(s.srv.URL)}})
	f.insert(map[string]any{"name": "a"})
	first := time.Now()
	s.await(t, 1)
	first = time.Now()
	s.await(t, 2)
	require.GreaterOrEqual(t, time.Since(first), 900*time.Millisecond, "the retry waits for Retry-After, not the 50ms schedule")
	f.awaitRun(a["id"].(string), "succeeded")
}

func TestGoneDisablesTheWebhook(t *testing.T) {
	t.Parallel()
	f := setup(t, newApp(t, nil))
	s := newSink(t, func(n int, w http.ResponseWriter) { w.WriteHeader(http.StatusGone) })
	a := f.create(map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{webhook(s.srv.URL)}})
	id := a["id"].(string)
	f.insert(map[string]any{"name": "a"})
	run := f.awaitRun(id, "failed")
	require.Equal(t, "failed", run.Deliveries[0].State)
	require.Equal(t, 1, run.Deliveries[0].Attempts, "410 is not retried")
	got := f.ok(http.StatusOK, "GET", f.automations()+"/"+id, nil)
	require.Equal(t, true, got["actions"].([]any)[0].(map[string]any)["disabled"])

	f.insert(map[string]any{"name": "b"})
	time.Sleep(500 * time.Millisecond)
	require.Len(t, s.received(), 1, "a disabled webhook is not called again")
	// The owner's audit log says so.
	owner := f.app.AddMember(t, f.tenant.RealmID, tenancy.RoleOwner, nil)
	res := f.app.Do(t, "GET", "/api/v1/audit?action=webhook_disabled", owner.Token, nil)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	entries := res.Map(t)["entries"].([]any)
	require.Len(t, entries, 1)
	require.Equal(t, s.srv.URL, entries[0].(map[string]any)["detail"].(map[string]any)["url"])
}

func TestDeadDeliveryIsReplayedWithItsID(t *testing.T) {
	t.Parallel()
	f := setup(t, newApp(t, nil))
	var mu sync.Mutex
	fail := true
	s := newSink(t, func(n int, w http.ResponseWriter) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	a := f.create(map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{webhook(s.srv.URL)}})
	id := a["id"].(string)
	f.insert(map[string]any{"name": "a"})
	run := f.awaitRun(id, "dead")
	require.Equal(t, 3, run.Deliveries[0].Attempts, "the first attempt and two retries")
	require.Contains(t, *run.LastError, "502")

	mu.Lock()
	fail = false
	mu.Unlock()
	replay := f.automations() + "/" + id + "/runs/" + run.ID.String() + "/replay"
	r := f.ok(http.StatusAccepted, "POST", replay, nil)
	require.Equal(t, "pending", r["status"])
	got := s.await(t, 4)
	f.awaitRun(id, "succeeded")
	for _, g := range got {
		require.Equal(t, run.Deliveries[0].ID, g.header.Get("webhook-id"))
	}
	// Nothing left to replay.
	res := f.do("POST", replay, nil)
	require.Equal(t, http.StatusConflict, res.Status, string(res.Body))
	require.Equal(t, http.StatusNotFound, f.do("POST", f.automations()+"/"+id+"/runs/"+uuid.NewString()+"/replay", nil).Status)
}

func TestBacklogBoundRefusesWrites(t *testing.T) {
	t.Parallel()
	app := isolate(t).app(t, func(c *automations.Config) { c.Workers, c.Backlog = -1, 2 })
	f := setup(t, app)
	f.create(map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{webhook("https://example.com")}})
	f.insert(map[string]any{"name": "a"})
	f.insert(map[string]any{"name": "b"})
	res := f.do("POST", "/api/v1/tables/"+f.table+"/rows", map[string]any{"rows": []any{map[string]any{"cells": f.cells(map[string]any{"name": "c"})}}})
	require.Equal(t, http.StatusTooManyRequests, res.Status, string(res.Body))
	require.Equal(t, automations.EBacklog, res.ErrorCode(t))
	require.Equal(t, "10", res.Header.Get("Retry-After"))
	count := f.ok(http.StatusOK, "GET", "/api/v1/tables/"+f.table+"/count", nil)
	require.EqualValues(t, 2, count["count"], "the refused write wrote nothing")
	// A table without automations is not held back.
	other, _ := f.makeTable("Quiet", "a")
	f.ok(http.StatusCreated, "POST", "/api/v1/tables/"+other+"/rows", map[string]any{"rows": []any{map[string]any{"cells": map[string]any{}}}})
	// Nor is another realm.
	g := setup(t, app)
	g.create(map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{webhook("https://example.com")}})
	g.insert(map[string]any{"name": "a"})

	res = f.do("GET", "/metrics", nil)
	require.Contains(t, string(res.Body), "appdor_automation_backlog_refused_total 1")
}

func TestHopLimitStopsASelfTriggeringChain(t *testing.T) {
	t.Parallel()
	db := isolate(t)
	f := setup(t, db.app(t, func(c *automations.Config) { c.MaxHops = 3 }))
	a := f.create(map[string]any{"name": "loop", "trigger": map[string]any{"event": "row.updated"},
		"actions": []any{map[string]any{"type": "update_row", "cells": map[string]any{f.fields["status"]: "again"}}}})
	ids := f.insert(map[string]any{"name": "a"})
	f.ok(http.StatusOK, "PATCH", "/api/v1/tables/"+f.table+"/rows", map[string]any{"rows": []any{
		map[string]any{"id": ids[0], "version": 1, "cells": f.cells(map[string]any{"name": "b"})}}})
	// The write's event (hop 0) and three more hops each update the row.
	require.Eventually(t, func() bool { return len(f.runs(a["id"].(string))) == 4 }, 15*time.Second, 20*time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	require.Len(t, f.runs(a["id"].(string)), 4, "the chain stopped")
	row := f.ok(http.StatusOK, "GET", "/api/v1/tables/"+f.table+"/rows/"+ids[0], nil)
	require.EqualValues(t, 6, row["version"])
	require.Zero(t, pendingEvents(t, db.pool, f.tenant.RealmID))
	res := f.do("GET", "/metrics", nil)
	require.Contains(t, string(res.Body), "appdor_automation_hop_limit_total 1")
}

// TestFairDequeue: a realm with thousands of due events and a realm with
// one, queued after all of them: the quiet realm's event is among the first
// claims. A FIFO shared by the realms would hand out the storm's 3,000 first.
func TestFairDequeue(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := isolate(t).pool
	ten := tenancy.New(pool)
	storm, err := ten.CreateRealm(ctx, "storm")
	require.NoError(t, err)
	quiet, err := ten.CreateRealm(ctx, "quiet")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO automation_events (realm_id, table_id, event, row_ids, versions, run_at, created_at)
		SELECT $1, gen_random_uuid(), 'row.created', ARRAY[gen_random_uuid()], ARRAY[1::bigint],
		       now() - interval '1 hour' + g * interval '1 millisecond', now() - interval '1 hour'
		FROM generate_series(1, 3000) g`, storm.ID)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO automation_events (realm_id, table_id, event, row_ids, versions)
		VALUES ($1, gen_random_uuid(), 'row.created', ARRAY[gen_random_uuid()], ARRAY[1::bigint])`, quiet.ID)
	require.NoError(t, err)

	q := automations.NewEventQueue(pool)
	var order []uuid.UUID
	for range 3 {
		realm, ok, err := q.Claim(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		order = append(order, realm)
	}
	require.Contains(t, order, quiet.ID, "the quiet realm's one event is claimed within the first three claims")
	// Claimed events are leased: the quiet realm has nothing due any more,
	// and the storm goes on being served.
	for range 5 {
		realm, ok, err := q.Claim(ctx)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, storm.ID, realm)
	}
	var leased int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM automation_events WHERE run_at > now()`).Scan(&leased))
	require.Equal(t, 8, leased)
}

// TestASlowReceiverDoesNotDelayAnotherRealm: a realm whose receiver takes
// seconds to answer holds neither a background seat nor more than half the
// workers, its events and deliveries together, so another realm's webhook
// is delivered meanwhile.
func TestASlowReceiverDoesNotDelayAnotherRealm(t *testing.T) {
	t.Parallel()
	db := isolate(t)
	app := db.app(t, func(c *automations.Config) { c.Workers, c.DeliveryTimeout = 4, time.Minute })
	release := make(chan struct{})
	slow := newSink(t, func(n int, w http.ResponseWriter) {
		select {
		case <-release:
		case <-time.After(time.Minute):
		}
		w.WriteHeader(http.StatusOK)
	})
	fast := newSink(t, nil)
	t.Cleanup(func() { close(release) }) // before the sinks close, which waits for their requests
	s := setup(t, app)
	q := setup(t, app)
	s.create(map[string]any{"name": "slow", "trigger": map[string]any{"event": "row.created"}, "actions": []any{webhook(slow.srv.URL)}})
	q.create(map[string]any{"name": "fast", "trigger": map[string]any{"event": "row.created"}, "actions": []any{webhook(fast.srv.URL)}})
	for i := range 6 {
		s.insert(map[string]any{"name": fmt.Sprint(i)})
	}
	slow.await(t, 2)                          // the slow realm's requests are in flight
	s.insert(map[string]any{"name": "later"}) // its event waits: the realm's two workers are busy
	waiting := pendingEvents(t, db.pool, s.tenant.RealmID)
	require.Positive(t, waiting)
	start := time.Now()
	q.insert(map[string]any{"name": "q"})
	fast.await(t, 1)
	require.Less(t, time.Since(start), 2*time.Second, "the quiet realm's webhook waited for the slow receiver")
	require.Len(t, slow.received(), 2, "the slow realm holds at most half the workers")
	require.Equal(t, waiting, pendingEvents(t, db.pool, s.tenant.RealmID),
		"the slow realm's events are not claimed while its deliveries hold half the workers")
}

// TestAQuietRealmsEventIsHandedToAWaitingWorker: a realm with nothing in
// the workers has its event handed to a waiting worker at the write's
// commit; its next event, written while its first webhook is in flight, is
// claimed from the queue.
func TestAQuietRealmsEventIsHandedToAWaitingWorker(t *testing.T) {
	t.Parallel()
	db := isolate(t)
	// No poll: a worker gets work only when a write wakes it or hands it.
	app := db.app(t, func(c *automations.Config) { c.Workers, c.PollInterval = 4, time.Hour })
	release := make(chan struct{})
	k := newSink(t, func(n int, w http.ResponseWriter) {
		if n == 1 {
			<-release
		}
		w.WriteHeader(http.StatusNoContent)
	})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	f := setup(t, app)
	a := f.create(map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{webhook(k.srv.URL)}})
	f.insert(map[string]any{"name": "first"})
	k.await(t, 1) // in flight: the realm holds a worker
	f.insert(map[string]any{"name": "second"})
	close(release)
	k.await(t, 2)
	require.Eventually(t, func() bool {
		runs := f.runs(a["id"].(string))
		return len(runs) == 2 && runs[0].Status == "succeeded" && runs[1].Status == "succeeded"
	}, 15*time.Second, 20*time.Millisecond)
	var evaluated []string
	for _, l := range strings.Split(string(f.do("GET", "/metrics", nil).Body), "\n") {
		if strings.HasPrefix(l, "appdor_automation_events_evaluated_total{") {
			evaluated = append(evaluated, l)
		}
	}
	require.ElementsMatch(t, []string{`appdor_automation_events_evaluated_total{path="claimed"} 1`,
		`appdor_automation_events_evaluated_total{path="handed"} 1`}, evaluated)
	require.Zero(t, pendingEvents(t, db.pool, f.tenant.RealmID))
}

// TestAHandedEventIsTakenOnce: a handed event that a claim of the queue
// leased meanwhile is not evaluated by the worker it was handed to, and an
// event handed twice is evaluated once.
func TestAHandedEventIsTakenOnce(t *testing.T) {
	t.Parallel()
	db := isolate(t)
	app := db.app(t, func(c *automations.Config) { c.Workers = -1 }) // nothing runs but what the test hands
	k := newSink(t, nil)
	f := setup(t, app)
	a := f.create(map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{webhook(k.srv.URL)}})
	f.insert(map[string]any{"name": "first"})
	f.insert(map[string]any{"name": "second"})
	realm := f.tenant.RealmID
	var ids []int64
	rows, err := db.pool.Query(t.Context(), `SELECT id FROM automation_events WHERE realm_id = $1 ORDER BY id`, realm)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, 2)

	claimed, ok, err := automations.NewEventQueue(db.pool).Claim(t.Context()) // leases the oldest: the first
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, realm, claimed)
	app.Automations().Hand(t.Context(), realm, uuid.MustParse(f.table), ids[0])
	require.Empty(t, f.runs(a["id"].(string)), "a leased event is its claim's, not the hand's")
	require.Equal(t, 2, pendingEvents(t, db.pool, realm))

	app.Automations().Hand(t.Context(), realm, uuid.MustParse(f.table), ids[1])
	app.Automations().Hand(t.Context(), realm, uuid.MustParse(f.table), ids[1])
	k.await(t, 1)
	time.Sleep(100 * time.Millisecond)
	require.Len(t, k.received(), 1, "an event handed twice is delivered once")
	require.Len(t, f.runs(a["id"].(string)), 1)
	require.Equal(t, 1, pendingEvents(t, db.pool, realm), "the leased event is still the claim's")
}

// TestAnEventOfADeletedTableIsConsumed: events whose table is gone by the
// time they run are consumed with no run, handed or claimed.
func TestAnEventOfADeletedTableIsConsumed(t *testing.T) {
	t.Parallel()
	db := isolate(t)
	k := newSink(t, nil)
	f := setup(t, db.app(t, func(c *automations.Config) { c.Workers = -1 }))
	f.create(map[string]any{"name": "x", "trigger": map[string]any{"event": "row.created"}, "actions": []any{webhook(k.srv.URL)}})
	f.insert(map[string]any{"name": "first"})
	f.insert(map[string]any{"name": "second"})
	realm, table := f.tenant.RealmID, uuid.MustParse(f.table)
	var first int64
	require.NoError(t, db.pool.QueryRow(t.Context(), `SELECT min(id) FROM automation_events WHERE realm_id = $1`, realm).Scan(&first))
	_, err := db.pool.Exec(t.Context(), `DELETE FROM tables WHERE realm_id = $1 AND id = $2`, realm, table) // as a realm's deletion does
	require.NoError(t, err)

	f.app.Automations().Hand(t.Context(), realm, table, first)
	require.Equal(t, 1, pendingEvents(t, db.pool, realm), "the handed event is consumed")
	f.app = db.app(t, func(c *automations.Config) { c.Workers = 2 }) // and the other claimed
	require.Eventually(t, func() bool { return pendingEvents(t, db.pool, realm) == 0 }, 15*time.Second, 20*time.Millisecond)
	var runs int
	require.NoError(t, db.pool.QueryRow(t.Context(), `SELECT count(*) FROM automation_runs WHERE realm_id = $1`, realm).Scan(&runs))
	require.Zero(t, runs)
	require.Empty(t, k.received())
}

func TestUUIDAtOrdersWithUUIDv7(t *testing.T) {
	t.Parallel()
	before := automations.UUIDAt(time.Now().Add(-time.Second))
	id, err := uuid.NewV7()
	require.NoError(t, err)
	after := automations.UUIDAt(time.Now().Add(time.Second))
	require.Equal(t, uuid.Version(7), before.Version())
	require.Negative(t, strings.Compare(before.String(), id.String()))
	require.Positive(t, strings.Compare(after.String(), id.String()))
}
