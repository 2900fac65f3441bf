package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/server"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// seedStormTable makes an app and a table with four text fields in the tenant's
// realm, fills it with n rows, and returns the table's id.
func seedStormTable(t *testing.T, app *testenv.App, token string, n int) string {
	t.Helper()
	res := app.Do(t, http.MethodPost, "/api/v1/apps", token, map[string]any{"name": "storm"})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
	var a struct{ ID string }
	res.JSON(t, &a)
	fields := []map[string]any{}
	for i := range 4 {
		fields = append(fields, map[string]any{"name": fmt.Sprintf("f%d", i), "type": "text"})
	}
	res = app.Do(t, http.MethodPost, "/api/v1/apps/"+a.ID+"/tables", token, map[string]any{"name": "t", "fields": fields})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
	var tbl struct {
		ID     string
		Fields []struct{ ID string }
	}
	res.JSON(t, &tbl)
	rows := make([]map[string]any, n)
	for i := range rows {
		cells := map[string]any{}
		for j, f := range tbl.Fields {
			cells[f.ID] = fmt.Sprintf("row %d, a cell with some text in it, field %d", i, j)
		}
		rows[i] = map[string]any{"cells": cells}
	}
	res = app.Do(t, http.MethodPost, "/api/v1/tables/"+tbl.ID+"/rows", token, map[string]any{"rows": rows})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
	return tbl.ID
}

// stormOutcome is what each side of a storm saw, by status and code.
type stormOutcome struct {
	mu    sync.Mutex
	codes map[string]int // "200", "429 concurrency_limited", "503 unavailable", ...
}

func (o *stormOutcome) add(status int, code string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.codes == nil {
		o.codes = map[string]int{}
	}
	k := strconv.Itoa(status)
	if code != "" {
		k += " " + code
	}
	o.codes[k]++
}

func (o *stormOutcome) count(k string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.codes[k]
}

func (o *stormOutcome) total() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, v := range o.codes {
		n += v
	}
	return n
}

// stormGet reads one page and returns its status, error code and Retry-After.
func stormGet(ctx context.Context, client *http.Client, url, token string) (int, string, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := client.Do(req)
	if err != nil {
		return 0, "", 0, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, "", 0, err
	}
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	if res.StatusCode != http.StatusOK {
		_ = json.Unmarshal(b, &e)
	}
	ra, _ := strconv.Atoi(res.Header.Get("Retry-After"))
	return res.StatusCode, e.Error.Code, time.Duration(ra) * time.Second, nil
}

type stormResult struct {
	victim, storm stormOutcome
	// canceledAcquires is how many pool acquisitions gave up at their
	// deadline during the storm: requests that starved for a connection.
	canceledAcquires int64
}

// runStorm runs 60 concurrent heavy readers in one realm while a victim realm
// makes victimReads light reads one after another, on a small pool with a
// short acquire deadline, so starvation shows as 503s and canceled acquires
// rather than as time.
//
// With untilStarved the victim stops at its first failed read.
func runStorm(t *testing.T, fair bool, victimReads int, untilStarved bool) *stormResult {
	app := testenv.NewApp(t, func(cfg *server.Config) {
		cfg.DBMaxConns = 4
		cfg.AcquireTimeout = 20 * time.Millisecond
		cfg.Fairness.Off = !fair
		cfg.Fairness.WaitBound = 0 // the production wait bound
	})
	stormT := app.NewTenant(t, tenancy.RoleEditor, nil)
	victimT := app.NewTenant(t, tenancy.RoleEditor, nil)
	stormURL := app.URL + "/api/v1/tables/" + seedStormTable(t, app, stormT.Token, 1000) + "/rows?limit=1000"
	victimURL := app.URL + "/api/v1/tables/" + seedStormTable(t, app, victimT.Token, 100) + "/rows?limit=100"

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
	defer client.CloseIdleConnections()
	r := &stormResult{}
	ctx, stop := context.WithCancel(context.Background())
	var (
		wg      sync.WaitGroup
		started atomic.Int64
		warm    = make(chan struct{})
		once    sync.Once
	)
	for range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				status, code, retryAfter, err := stormGet(ctx, client, stormURL, stormT.Token)
				if err != nil {
					return // the storm is over
				}
				r.storm.add(status, code)
				if started.Add(1) == 120 {
					once.Do(func() { close(warm) })
				}
				if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
					// An honest client: it waits as long as it is asked.
					select {
					case <-time.After(retryAfter):
					case <-ctx.Done():
					}
				}
			}
		}()
	}
	<-warm // the storm is on
	before := app.Pool().Stat().CanceledAcquireCount()
	for range victimReads {
		status, code, _, err := stormGet(context.Background(), client, victimURL, victimT.Token)
		require.NoError(t, err)
		r.victim.add(status, code)
		if untilStarved && status != http.StatusOK {
			break
		}
	}
	r.canceledAcquires = app.Pool().Stat().CanceledAcquireCount() - before
	stop()
	wg.Wait()
	t.Logf("fairness %v: victim %v; storm %v; pool acquires canceled at their deadline during the victim's reads: %d",
		fair, r.victim.codes, r.storm.codes, r.canceledAcquires)
	return r
}

// TestStormDoesNotStarveAnotherRealm is the controller's proof through the
// whole HTTP stack, and its negative control: with the controller, every one
// of the victim's reads succeeds while the storm realm is refused and still
// served; with it off, the same storm starves the victim of connections.
// It fails when the controller is unwired.
func TestStormDoesNotStarveAnotherRealm(t *testing.T) {
	t.Parallel()
	const reads = 100

	on := runStorm(t, true, reads, false)
	require.Equal(t, reads, on.victim.count("200"), "with the controller every victim read succeeds: %v", on.victim.codes)
	require.Positive(t, on.storm.count("429 concurrency_limited"), "the controller refused the storm's excess")
	require.Positive(t, on.storm.count("200"), "refusing is not starving: the storm is served too")
	require.Zero(t, on.storm.count("503 unavailable"), "admitted work finds a connection at once")

	off := runStorm(t, false, 10*reads, true)
	require.Zero(t, off.storm.count("429 concurrency_limited"), "switched off, nothing is refused for concurrency")
	require.Positive(t, off.canceledAcquires, "without the controller requests starve for a connection")
	require.Positive(t, off.victim.total()-off.victim.count("200"), "without the controller the victim starves: %v", off.victim.codes)
}
