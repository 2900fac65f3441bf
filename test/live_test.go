package test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/server"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// sseEvent is one server-sent event.
type sseEvent struct {
	ID, Event string
	Data      map[string]any
}

// sse is an open event stream.
type sse struct {
	res    *http.Response
	events chan sseEvent
	cancel context.CancelFunc
}

// openStream opens GET /tables/{table}/events on app as token, with
// Last-Event-ID when lastID is set. A stream that does not open returns its
// response, body read, and nil.
func openStream(t *testing.T, app *testenv.App, token, table, lastID string) (*sse, testenv.Response) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", app.URL+"/api/v1/tables/"+table+"/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	if res.StatusCode != http.StatusOK {
		defer cancel()
		defer res.Body.Close()
		var b strings.Builder
		_, _ = bufio.NewReader(res.Body).WriteTo(&b)
		return nil, testenv.Response{Status: res.StatusCode, Header: res.Header, Body: []byte(b.String())}
	}
	require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	s := &sse{res: res, events: make(chan sseEvent, 100), cancel: cancel}
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(res.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.Event != "" {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.ID = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.Event = line[7:]
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(line[6:]), &ev.Data)
			}
		}
	}()
	t.Cleanup(s.close)
	require.Equal(t, "hello", s.next(t).Event)
	return s, testenv.Response{Status: res.StatusCode}
}

func (s *sse) close() {
	s.cancel()
	s.res.Body.Close()
}

// next is the stream's next event, within five seconds.
func (s *sse) next(t *testing.T) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-s.events:
		require.True(t, ok, "the stream ended")
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	return sseEvent{}
}

func ids(v any) []string {
	var out []string
	for _, x := range asSlice(v) {
		out = append(out, x.(string))
	}
	slices.Sort(out)
	return out
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// TestLiveEditReachesAnotherReplica: two replicas share PostgreSQL and
// Redis; what is written through one reaches a stream open on the other, as
// row ids and never cells, coalesced; a field change is a resync; another
// realm cannot subscribe; and an open stream holds no fairness seat.
func TestLiveEditReachesAnotherReplica(t *testing.T) {
	t.Parallel()
	one, two := testenv.NewApp(t, nil), testenv.NewApp(t, nil)
	a := one.NewTenant(t, tenancy.RoleEditor, nil)
	s := seed(t, one, a.Token, 1)
	st, _ := openStream(t, two, a.Token, s.TableID, "")
	require.Zero(t, two.Fairness().InUse(0), "an open stream holds no seat")

	sent := time.Now()
	res := one.Do(t, "POST", "/api/v1/tables/"+s.TableID+"/rows", a.Token,
		map[string]any{"rows": []map[string]any{{"cells": map[string]any{s.FieldID: "Ann"}}, {"cells": map[string]any{s.FieldID: "Bob"}}}})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
	var made struct {
		Rows []struct {
			ID      string `json:"id"`
			Version int64  `json:"version"`
		} `json:"rows"`
	}
	res.JSON(t, &made)
	ev := st.next(t)
	// The seed's own row is published after its commit, off the request
	// path, and may reach the stream first, alone or coalesced with ours.
	for slices.Equal(ids(ev.Data["created"]), []string{s.RowID}) {
		ev = st.next(t)
	}
	t.Logf("write on one to event on two: %s", time.Since(sent))
	require.Equal(t, "rows", ev.Event)
	require.NotEmpty(t, ev.ID)
	require.Equal(t, s.TableID, ev.Data["table"])
	created := slices.DeleteFunc(ids(ev.Data["created"]), func(id string) bool { return id == s.RowID })
	require.Equal(t, ids([]any{made.Rows[0].ID, made.Rows[1].ID}), created)
	require.NotContains(t, ev.Data, "cells")

	// Several writes within a coalescing window arrive as one message.
	for _, r := range made.Rows {
		res = one.Do(t, "PATCH", "/api/v1/tables/"+s.TableID+"/rows", a.Token, map[string]any{
			"rows": []map[string]any{{"id": r.ID, "version": r.Version, "cells": map[string]any{s.FieldID: "changed"}}}})
		require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	}
	res = one.Do(t, "DELETE", "/api/v1/tables/"+s.TableID+"/rows", a.Token, map[string]any{"ids": []string{s.RowID}})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	var updated, deleted []string
	for len(updated) < 2 || len(deleted) < 1 {
		ev = st.next(t)
		require.Equal(t, "rows", ev.Event)
		updated = append(updated, ids(ev.Data["updated"])...)
		deleted = append(deleted, ids(ev.Data["deleted"])...)
	}
	slices.Sort(updated)
	require.Equal(t, ids([]any{made.Rows[0].ID, made.Rows[1].ID}), updated)
	require.Equal(t, []string{s.RowID}, deleted)

	res = one.Do(t, "POST", "/api/v1/tables/"+s.TableID+"/fields", a.Token, map[string]any{"name": "Later", "type": "text"})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
	ev = st.next(t)
	require.Equal(t, "resync", ev.Event)
	require.Equal(t, "fields", ev.Data["reason"])

	b := two.NewTenant(t, tenancy.RoleOwner, nil)
	_, res = openStream(t, two, b.Token, s.TableID, "")
	require.Equal(t, http.StatusNotFound, res.Status, "another realm's table: %s", res.Body)
	_, res = openStream(t, two, a.Token, "not-a-table", "")
	require.Equal(t, http.StatusNotFound, res.Status)
}

// TestLiveResumeAndCaps: a client back within the resume window gets what
// it missed; one whose id is unknown gets a resync; more rows than BulkRows
// are a resync; and streams past a user's cap are refused with a coded 429.
func TestLiveResumeAndCaps(t *testing.T) {
	t.Parallel()
	app := testenv.NewApp(t, func(c *server.Config) {
		c.Live.MaxStreamsPerUser = 2
		c.Live.BulkRows = 5
	})
	a := app.NewTenant(t, tenancy.RoleEditor, nil)
	s := seed(t, app, a.Token, 1)
	write := func(n int) []string {
		rows := make([]map[string]any, n)
		for i := range rows {
			rows[i] = map[string]any{"cells": map[string]any{s.FieldID: "x"}}
		}
		res := app.Do(t, "POST", "/api/v1/tables/"+s.TableID+"/rows", a.Token, map[string]any{"rows": rows})
		require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
		var out []string
		for _, r := range asSlice(res.Map(t)["rows"]) {
			out = append(out, r.(map[string]any)["id"].(string))
		}
		slices.Sort(out)
		return out
	}

	st, _ := openStream(t, app, a.Token, s.TableID, "")
	first := write(1)
	ev := st.next(t)
	if slices.Equal(ids(ev.Data["created"]), []string{s.RowID}) {
		// The seed's own row: its event is published after its write
		// commits, from a goroutine, and can reach the replica after the
		// stream opened (a CI run).
		ev = st.next(t)
	}
	require.Equal(t, first, ids(ev.Data["created"]))
	st.close()
	require.Eventually(t, func() bool { return app.Live().Streams() == 0 }, 5*time.Second, 10*time.Millisecond)
	missed := write(2)
	time.Sleep(200 * time.Millisecond) // the events reach the replica's memory
	back, _ := openStream(t, app, a.Token, s.TableID, ev.ID)
	ev = back.next(t)
	require.Equal(t, "rows", ev.Event)
	require.Equal(t, missed, ids(ev.Data["created"]), "what the client missed, replayed")

	lost, _ := openStream(t, app, a.Token, s.TableID, "someone-else-1")
	ev = lost.next(t)
	require.Equal(t, "resync", ev.Event)
	require.Equal(t, "resume", ev.Data["reason"], "an id the replica does not know")

	// The user holds two streams: a third is refused, with a code.
	_, res := openStream(t, app, a.Token, s.TableID, "")
	require.Equal(t, http.StatusTooManyRequests, res.Status, string(res.Body))
	require.Equal(t, "concurrency_limited", res.ErrorCode(t))
	require.Contains(t, string(res.Body), `"reason":"live_streams"`)
	require.Contains(t, string(res.Body), `"limit":"live-streams-per-user"`)
	require.NotEmpty(t, res.Header.Get("Retry-After"))
	lost.close()
	require.Eventually(t, func() bool { return app.Live().Streams() == 1 }, 5*time.Second, 10*time.Millisecond)
	again, _ := openStream(t, app, a.Token, s.TableID, "")

	// More rows at once than BulkRows: a resync, not a flood of ids.
	write(6)
	for _, st := range []*sse{back, again} {
		ev = st.next(t)
		require.Equal(t, "resync", ev.Event)
		require.Equal(t, "bulk", ev.Data["reason"])
	}

	// The shutdown ends every stream at its start, rather than let them hold
	// the drain, and opens no new one.
	app.Live().EndStreams()
	for _, st := range []*sse{back, again} {
		select {
		case _, open := <-st.events:
			require.False(t, open, "the stream ended")
		case <-time.After(5 * time.Second):
			t.Fatal("the stream outlived EndStreams")
		}
	}
	_, res = openStream(t, app, a.Token, s.TableID, "")
	require.Equal(t, http.StatusServiceUnavailable, res.Status, string(res.Body))
}
