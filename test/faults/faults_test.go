// Package faults is the fault-injection suite: it builds and starts the real
// binary on a database and a Redis of its own and, under steady mixed traffic
// from two realms, breaks what the server stands on — every PostgreSQL
// backend of its database terminated, its Redis stopped and started again,
// the pool filled by a lock held from outside, SIGTERM during CSV imports.
// After each fault every request got a 2xx, a 429, or a 503 with Retry-After
// (never a 500, never a hang past its deadline), nothing acknowledged was
// lost, and the server recovered by itself; the figures are logged.
//
// It needs what the other tests need (APPDOR_TEST_DATABASE_URL, a role that
// may create databases) and redis-server (on PATH, or its path in
// APPDOR_TEST_REDIS_SERVER), and fails saying so when either is missing. It
// never touches another database or the shared Redis.
package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func asURLError(err error, target **url.Error) bool { return errors.As(err, target) }

// tally is what one phase's traffic got.
type tally struct {
	mu       sync.Mutex
	statuses map[string]int
	bad      []string
}

func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	keys := make([]string, 0, len(t.statuses))
	for k := range t.statuses {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s:%d ", k, t.statuses[k])
	}
	return strings.TrimSpace(b.String())
}

// traffic is two realms' steady reads and writes.
type traffic struct {
	s         *stack
	cur       atomic.Pointer[tally]
	gone      atomic.Bool // the server was told to stop: a refused connection is expected
	stop      chan struct{}
	wg        sync.WaitGroup
	acked     [2]atomic.Int64 // writes answered 201, per realm
	report    []string        // a line per fault survived
	attempted [2]atomic.Int64 // writes sent, per realm
}

func startTraffic(s *stack) *traffic {
	tr := &traffic{s: s, stop: make(chan struct{})}
	tr.cur.Store(&tally{statuses: map[string]int{}})
	for i := range s.realms {
		for w := range 2 {
			tr.wg.Add(1)
			go tr.worker(i, w)
		}
	}
	return tr
}

func (tr *traffic) halt() {
	close(tr.stop)
	tr.wg.Wait()
}

// burst starts one reader in each of the stack's extra realms until the
// returned function is called. A realm with one request at a time is always
// sparse to the fairness controller, so together they take more seats than
// the pool has connections.
func (tr *traffic) burst() (end func()) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, r := range tr.s.extra {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				a := tr.record(fmt.Sprintf("GET rows (%s)", r.name),
					send(tr.s.base, "GET", "/api/v1/tables/"+r.tableID+"/rows?limit=50", r.token, "", nil))
				if a.err != nil || a.status == http.StatusTooManyRequests {
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	return func() {
		close(stop)
		wg.Wait()
	}
}

func (tr *traffic) worker(i, w int) {
	defer tr.wg.Done()
	r := tr.s.realms[i]
	for n := 0; ; n++ {
		select {
		case <-tr.stop:
			return
		default:
		}
		var a answer
		if (n+w)%2 == 0 {
			a = tr.write(i, fmt.Sprintf("w%d-%d", w, n))
		} else {
			a = tr.record(fmt.Sprintf("GET rows (%s)", r.name),
				send(tr.s.base, "GET", "/api/v1/tables/"+r.tableID+"/rows?limit=50", r.token, "", nil))
		}
		pause := 20 * time.Millisecond
		if a.status == http.StatusTooManyRequests || a.status == http.StatusServiceUnavailable || a.err != nil {
			pause = 100 * time.Millisecond
		}
		time.Sleep(pause)
	}
}

// write adds one row to realm i's table and counts it acknowledged on 201.
func (tr *traffic) write(i int, text string) answer {
	r := tr.s.realms[i]
	tr.attempted[i].Add(1)
	a := tr.record(fmt.Sprintf("POST rows (%s)", r.name), send(tr.s.base, "POST", "/api/v1/tables/"+r.tableID+"/rows", r.token,
		"application/json", strings.NewReader(fmt.Sprintf(`{"rows":[{"cells":{%q:%q}}]}`, r.fieldID, text))))
	if a.status == http.StatusCreated {
		tr.acked[i].Add(1)
	}
	return a
}

// record classifies an answer into the current phase's tally: a 2xx, a 429,
// a 503 with Retry-After, or (once the server is stopping) a refused
// connection are fine; anything else is a violation.
func (tr *traffic) record(what string, a answer) answer {
	t := tr.cur.Load()
	key, bad := "", ""
	switch {
	case a.err != nil && tr.gone.Load() && refused(a.err):
		key = "refused (stopped)"
	case a.err != nil:
		key, bad = "error", fmt.Sprintf("%s: no answer after %v: %v", what, a.took.Round(time.Millisecond), a.err)
	case a.status >= 200 && a.status < 300, a.status == http.StatusTooManyRequests:
		key = fmt.Sprint(a.status)
	case a.status == http.StatusServiceUnavailable && a.retryAfter != "":
		key = "503"
		var e struct{ Error struct{ Message string } }
		if json.Unmarshal(a.body, &e) == nil && e.Error.Message != "" {
			key = fmt.Sprintf("503 (%s)", e.Error.Message)
		}
	default:
		key, bad = fmt.Sprint(a.status), fmt.Sprintf("%s: %d (Retry-After %q): %.300s", what, a.status, a.retryAfter, a.body)
	}
	t.mu.Lock()
	t.statuses[key]++
	if bad != "" && len(t.bad) < 20 {
		t.bad = append(t.bad, bad)
	}
	t.mu.Unlock()
	return a
}

// phase runs fault under the traffic, then waits until the server has
// recovered by itself (ready, and a write of each realm answered 201),
// and checks and logs what the traffic got.
func (tr *traffic) phase(t *testing.T, name string, fault func(t *testing.T)) *tally {
	tl := &tally{statuses: map[string]int{}}
	tr.cur.Store(tl)
	time.Sleep(500 * time.Millisecond) // steady traffic first
	fault(t)
	end := time.Now()
	var recovered time.Duration
	for {
		status, ready := tr.s.ready()
		if status == http.StatusOK && ready == "ready" &&
			tr.write(0, "probe").status == http.StatusCreated && tr.write(1, "probe").status == http.StatusCreated {
			recovered = time.Since(end)
			break
		}
		require.Less(t, time.Since(end), 15*time.Second, "%s: the server did not recover by itself (readyz %d %s)", name, status, ready)
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // and traffic goes on
	tr.cur.Store(&tally{statuses: map[string]int{}})
	line := fmt.Sprintf("%s: recovered %v after the fault; requests by status: %s", name, recovered.Round(time.Millisecond), tl)
	t.Log(line)
	tr.report = append(tr.report, line)
	require.Empty(t, tl.bad, "%s: answers that are not a 2xx, a 429 or a 503 with Retry-After", name)
	require.Less(t, recovered, 10*time.Second, "%s: recovery", name)
	tr.checkRows(t, name)
	return tl
}

// checkRows: every acknowledged write is there, and nothing beyond what was
// sent. The traffic goes on meanwhile, so the writes acknowledged are read
// before the rows are counted and the writes sent after: a write answered
// between the count and a later read of its acknowledgement was counted as
// lost (163 rows, 164 acknowledged).
func (tr *traffic) checkRows(t *testing.T, name string) {
	for i, r := range tr.s.realms {
		acked := tr.acked[i].Load()
		n := int64(tr.s.rowsIn(r.tableID))
		sent := tr.attempted[i].Load()
		require.GreaterOrEqual(t, n, acked, "%s: %s lost acknowledged writes", name, r.name)
		require.LessOrEqual(t, n, sent, "%s: %s has rows nobody sent", name, r.name)
	}
}

func TestFaults(t *testing.T) {
	s := setup(t)
	tr := startTraffic(s)
	defer func() {
		select {
		case <-tr.stop:
		default:
			tr.halt()
		}
	}()
	ctx := context.Background()

	t.Run("postgres backends terminated", func(t *testing.T) {
		tr.phase(t, "terminate", func(t *testing.T) {
			for range 3 {
				var n int
				require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
					WHERE datname = $1 AND pid <> pg_backend_pid() AND application_name <> $2`, s.dbName, harnessApp).Scan(&n))
				t.Logf("terminated %d backends of %s", n, s.dbName)
				time.Sleep(300 * time.Millisecond)
			}
		})
	})

	t.Run("redis stopped and started", func(t *testing.T) {
		tr.phase(t, "redis", func(t *testing.T) {
			s.redis.stop()
			require.Eventually(t, func() bool {
				status, ready := s.ready()
				return status == http.StatusOK && ready == "degraded"
			}, 5*time.Second, 50*time.Millisecond, "readiness says degraded, 200, while Redis is away")
			time.Sleep(1500 * time.Millisecond) // traffic goes on, unlimited
			s.redis.start()
		})
		require.Equal(t, 1, s.logLines("limiter: redis unreachable; allowing requests unlimited"), "one WARN for the outage")
		require.Equal(t, 1, s.logLines("limiter: redis answers again; deciding requests"), "one INFO when Redis is back")
	})

	t.Run("pool filled by a held lock", func(t *testing.T) {
		tl := tr.phase(t, "lock", func(t *testing.T) {
			tx, err := s.pool.Begin(ctx)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, `LOCK TABLE rows IN ACCESS EXCLUSIVE MODE`)
			require.NoError(t, err)
			// More requests than the pool has connections: those admitted
			// wait on the lock until --statement-timeout, the others for a
			// connection until --acquire-timeout; each is answered 503.
			end := tr.burst()
			time.Sleep(3 * time.Second)
			require.NoError(t, tx.Rollback(ctx))
			end()
		})
		tl.mu.Lock()
		defer tl.mu.Unlock()
		n := 0
		for k, v := range tl.statuses {
			if strings.HasPrefix(k, "503") {
				n += v
			}
		}
		require.NotZero(t, n, "the lock was felt: requests waited, then were answered 503")
	})

	t.Run("SIGTERM during CSV imports", func(t *testing.T) {
		done, _ := s.createTable(s.realms[0].token, "import done")
		stalled, _ := s.createTable(s.realms[1].token, "import stalled")
		tl := &tally{statuses: map[string]int{}}
		tr.cur.Store(tl)

		// One import finishes within the drain; the other stalls past it.
		finishing := startImport(s.base, done, s.realms[0].token, 3000, 6, 250*time.Millisecond, false)
		stalling := startImport(s.base, stalled, s.realms[1].token, 1500, 1, 0, true)
		time.Sleep(500 * time.Millisecond)

		tr.gone.Store(true)
		signaled := time.Now()
		require.NoError(t, s.srv.Process.Signal(syscall.SIGTERM))
		select {
		case <-s.exited:
		case <-time.After(15 * time.Second):
			t.Fatal("the server did not exit after SIGTERM")
		}
		exited := time.Since(signaled)
		code := s.srv.ProcessState.ExitCode()
		tr.halt()
		a, b := <-finishing, <-stalling
		t.Logf("sigterm: exited with %d after %v; the finishing import answered %d (%d rows), the stalled one %d (Retry-After %q, %d rows); requests by status: %s",
			code, exited.Round(time.Millisecond), a.status, a.inserted, b.status, b.retryAfter, b.inserted, tl)
		require.Equal(t, 0, code, "a SIGTERM is a clean exit, requests past the drain or not")
		require.Less(t, exited, 3*time.Second+2*time.Second, "the drain (3s), then the cancelled requests, then exit")
		require.Empty(t, tl.bad, "answers that are not a 2xx, a 429 or a 503 with Retry-After")

		require.NoError(t, a.err)
		require.Equal(t, http.StatusCreated, a.status, "the import that ends within the drain is served: %s", a.body)
		require.Equal(t, 3000, a.inserted)
		require.Equal(t, a.inserted, s.rowsIn(done), "the rows the import acknowledged are there")

		require.NoError(t, b.err)
		require.Equal(t, http.StatusServiceUnavailable, b.status, "the import past the drain is cancelled: %s", b.body)
		require.NotEmpty(t, b.retryAfter)
		require.Equal(t, 1500, b.inserted, "the import stopped by the shutdown writes the rows it read, and says so")
		require.Equal(t, b.inserted, s.rowsIn(stalled), "the rows the stopped import acknowledged are there")
		tr.checkRows(t, "sigterm")
		tr.report = append(tr.report, fmt.Sprintf("sigterm: exit 0 after %v; requests by status: %s", exited.Round(time.Millisecond), tl))
	})
	if !t.Failed() {
		t.Logf("faults survived: %d\n%s", len(tr.report), strings.Join(tr.report, "\n"))
	}
}

// imported is a CSV import's answer.
type imported struct {
	answer
	inserted int
}

// startImport streams rows lines of CSV into table, in chunks with a pause
// between them; with stall it then waits (its body open) until the server
// answers.
func startImport(base, table, token string, rows, chunks int, pause time.Duration, stall bool) <-chan imported {
	out := make(chan imported, 1)
	pr, pw := io.Pipe()
	answered := make(chan struct{})
	go func() {
		_, _ = io.WriteString(pw, "N\n")
		per := rows / chunks
		for c := range chunks {
			var b bytes.Buffer
			for i := range per {
				fmt.Fprintf(&b, "row %d\n", c*per+i)
			}
			if _, err := pw.Write(b.Bytes()); err != nil {
				return
			}
			time.Sleep(pause)
		}
		if stall {
			<-answered
		}
		pw.Close()
	}()
	go func() {
		defer close(answered)
		a := send(base, "POST", "/api/v1/tables/"+table+"/csv", token, "text/csv", pr)
		var body struct {
			Inserted int
			Error    struct{ Details struct{ Inserted int } }
		}
		_ = json.Unmarshal(a.body, &body)
		out <- imported{a, max(body.Inserted, body.Error.Details.Inserted)}
	}()
	return out
}
