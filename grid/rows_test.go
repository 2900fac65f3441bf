package grid_test

import (
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/test/testenv"
)

func TestRowBatches(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tb := f.table("Tasks", field("Name", "text"), field("Points", "number", map[string]any{"precision": 1}),
		field("Done", "checkbox"), field("Tags", "multi_select", map[string]any{"choices": []string{"a", "b"}}))
	rowsPath := "/api/v1/tables/" + tb.ID + "/rows"

	t.Run("a 1,001-row batch is refused, and nothing written", func(t *testing.T) {
		rows := make([]map[string]any, 1001)
		for i := range rows {
			rows[i] = map[string]any{"cells": tb.cells(map[string]any{"Name": "x"})}
		}
		res := f.do("POST", rowsPath, map[string]any{"rows": rows})
		require.Equal(t, http.StatusRequestEntityTooLarge, res.Status)
		require.Equal(t, "too_large", res.ErrorCode(t))
		res = f.do("PATCH", rowsPath, map[string]any{"rows": rows})
		require.Equal(t, http.StatusRequestEntityTooLarge, res.Status)
		ids := make([]string, 1001)
		for i := range ids {
			ids[i] = "0190a000-0000-7000-8000-000000000000"
		}
		res = f.do("DELETE", rowsPath, map[string]any{"ids": ids})
		require.Equal(t, http.StatusRequestEntityTooLarge, res.Status)
	})

	t.Run("invalid cells fail the whole batch with details", func(t *testing.T) {
		res := f.do("POST", rowsPath, map[string]any{"rows": []any{
			map[string]any{"cells": tb.cells(map[string]any{"Name": "fine"})},
			map[string]any{"cells": tb.cells(map[string]any{"Points": "many"})},
			map[string]any{"cells": tb.cells(map[string]any{"Tags": []string{"c"}})},
		}})
		require.Equal(t, http.StatusUnprocessableEntity, res.Status, string(res.Body))
		require.Equal(t, "validation_failed", res.ErrorCode(t))
		var e struct {
			Error struct {
				Details []struct {
					Row     int    `json:"row"`
					Field   string `json:"field"`
					Message string `json:"message"`
				} `json:"details"`
			} `json:"error"`
		}
		res.JSON(t, &e)
		require.Len(t, e.Error.Details, 2)
		byRow := map[int]string{}
		for _, d := range e.Error.Details {
			byRow[d.Row] = d.Field
			require.NotEmpty(t, d.Message)
		}
		require.Equal(t, map[int]string{1: tb.Fields["Points"], 2: tb.Fields["Tags"]}, byRow)
		count := f.ok(http.StatusOK, "GET", "/api/v1/tables/"+tb.ID+"/count", nil)
		require.EqualValues(t, 0, count["count"])
	})

	ids := f.insert(tb, []map[string]any{{"Name": "one", "Points": 1.26}, {"Name": "two", "Tags": []string{"a"}}})
	require.Len(t, ids, 2)

	t.Run("PATCH merges cells, clears nulls and bumps the version", func(t *testing.T) {
		m := f.ok(http.StatusOK, "PATCH", rowsPath, map[string]any{"rows": []any{
			map[string]any{"id": ids[0], "version": 1, "cells": tb.cells(map[string]any{"Done": true, "Points": nil})},
		}})
		row := m["rows"].([]any)[0].(map[string]any)
		require.EqualValues(t, 2, row["version"])
		require.Equal(t, tb.cells(map[string]any{"Name": "one", "Done": true}), row["cells"])
	})

	t.Run("a stale version is a conflict and changes no row", func(t *testing.T) {
		res := f.do("PATCH", rowsPath, map[string]any{"rows": []any{
			map[string]any{"id": ids[1], "version": 1, "cells": tb.cells(map[string]any{"Name": "changed"})},
			map[string]any{"id": ids[0], "version": 1, "cells": tb.cells(map[string]any{"Name": "stale"})},
		}})
		require.Equal(t, http.StatusConflict, res.Status, string(res.Body))
		require.Equal(t, "conflict", res.ErrorCode(t))
		for i, want := range []string{"one", "two"} {
			row := f.ok(http.StatusOK, "GET", rowsPath+"/"+ids[i], nil)
			require.Equal(t, want, row["cells"].(map[string]any)[tb.Fields["Name"]])
		}
		row := f.ok(http.StatusOK, "GET", rowsPath+"/"+ids[1], nil)
		require.EqualValues(t, 1, row["version"])
	})

	t.Run("PATCH of a missing row is not found", func(t *testing.T) {
		res := f.do("PATCH", rowsPath, map[string]any{"rows": []any{
			map[string]any{"id": "0190a000-0000-7000-8000-000000000000", "version": 1, "cells": map[string]any{}},
		}})
		require.Equal(t, http.StatusNotFound, res.Status, string(res.Body))
	})

	t.Run("DELETE removes rows and ignores unknown ids", func(t *testing.T) {
		m := f.ok(http.StatusOK, "DELETE", rowsPath, map[string]any{"ids": []string{ids[1], "0190a000-0000-7000-8000-000000000000"}})
		require.EqualValues(t, 1, m["deleted"])
		require.Equal(t, http.StatusNotFound, f.do("GET", rowsPath+"/"+ids[1], nil).Status)
	})
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tb := f.table("Orders", field("Name", "text"))
	path := f.app.URL + "/api/v1/tables/" + tb.ID + "/rows"
	body := map[string]any{"rows": []any{map[string]any{"cells": tb.cells(map[string]any{"Name": "x"})}}}

	send := func(method, key string, body any) (int, map[string]any, http.Header) {
		res := doWithHeader(t, method, path, f.token, body, map[string]string{"Idempotency-Key": key})
		// The fairness controller may refuse concurrent requests of one
		// realm; a client retries those, which is what keys are for.
		for i := 0; res.Status == http.StatusTooManyRequests && i < 100; i++ {
			res = doWithHeader(t, method, path, f.token, body, map[string]string{"Idempotency-Key": key})
		}
		var m map[string]any
		res.JSON(t, &m)
		return res.Status, m, res.Header
	}

	// Concurrent retries of one POST: one write, one answer.
	var wg sync.WaitGroup
	answers := make([]map[string]any, 4)
	statuses := make([]int, 4)
	for i := range answers {
		wg.Go(func() { statuses[i], answers[i], _ = send("POST", "k-1", body) })
	}
	wg.Wait()
	for i := range answers {
		require.Equal(t, http.StatusCreated, statuses[i], "%v", answers[i])
		require.Equal(t, answers[0], answers[i])
	}
	status, again, hdr := send("POST", "k-1", body)
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, answers[0], again)
	require.Equal(t, "true", hdr.Get("Idempotent-Replayed"))
	count := f.ok(http.StatusOK, "GET", "/api/v1/tables/"+tb.ID+"/count", nil)
	require.EqualValues(t, 1, count["count"])

	// The same key with another body is refused with a code.
	other := map[string]any{"rows": []any{map[string]any{"cells": tb.cells(map[string]any{"Name": "y"})}}}
	status, m, _ := send("POST", "k-1", other)
	require.Equal(t, http.StatusConflict, status)
	require.Equal(t, "conflict", m["error"].(map[string]any)["code"])

	// A PATCH retried with its key bumps the version once.
	id := answers[0]["rows"].([]any)[0].(map[string]any)["id"].(string)
	patch := map[string]any{"rows": []any{map[string]any{"id": id, "version": 1, "cells": tb.cells(map[string]any{"Name": "z"})}}}
	s1, a1, _ := send("PATCH", "k-2", patch)
	s2, a2, _ := send("PATCH", "k-2", patch)
	require.Equal(t, http.StatusOK, s1, "%v", a1)
	require.Equal(t, s1, s2)
	require.Equal(t, a1, a2)
	row := f.ok(http.StatusOK, "GET", "/api/v1/tables/"+tb.ID+"/rows/"+id, nil)
	require.EqualValues(t, 2, row["version"])

	// Keys belong to a realm: another realm's identical key is its own.
	g := setup(t)
	res := doWithHeader(t, "POST", path, g.token, body, map[string]string{"Idempotency-Key": "k-1"})
	require.Equal(t, http.StatusNotFound, res.Status)
}

// TestIdempotencyKeysExpire: a key older than a day is forgotten, so its
// reuse runs the write again, and expired keys are cleared as writes go.
func TestIdempotencyKeysExpire(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tb := f.table("Orders", field("Name", "text"))
	path := f.app.URL + "/api/v1/tables/" + tb.ID + "/rows"
	body := map[string]any{"rows": []any{map[string]any{"cells": tb.cells(map[string]any{"Name": "x"})}}}
	for _, k := range []string{"old-1", "old-2", "fresh"} {
		res := doWithHeader(t, "POST", path, f.token, body, map[string]string{"Idempotency-Key": k})
		require.Equal(t, http.StatusCreated, res.Status)
	}
	pool := testenv.Pool(t)
	var realm string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT realm_id::text FROM tables WHERE id = $1`, tb.ID).Scan(&realm))
	_, err := pool.Exec(t.Context(), `UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE realm_id = $1 AND key LIKE 'old-%'`, realm)
	require.NoError(t, err)

	res := doWithHeader(t, "POST", path, f.token, body, map[string]string{"Idempotency-Key": "old-1"})
	require.Equal(t, http.StatusCreated, res.Status)
	require.Empty(t, res.Header.Get("Idempotent-Replayed"), "an expired key runs the write again")
	count := f.ok(http.StatusOK, "GET", "/api/v1/tables/"+tb.ID+"/count", nil)
	require.EqualValues(t, 4, count["count"])

	var keys []string
	rows, err := pool.Query(t.Context(), `SELECT key FROM idempotency_keys WHERE realm_id = $1 ORDER BY key`, realm)
	require.NoError(t, err)
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		keys = append(keys, k)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"fresh", "old-1"}, keys, "old-2 expired and was cleared")
}
