package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/server"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// served is an App on a database of its own, reached through proxies that a
// test can cut, and served by ServeListener as `appdor serve` serves it.
type served struct {
	url     string
	pool    *pgxpool.Pool // the test's own, straight to the database
	pg      *testenv.Proxy
	redis   *testenv.Proxy
	token   string
	tableID string
	fieldID string
	app     *server.App
	logs    *logBuffer
	stop    context.CancelFunc
	stopped chan error
}

// serve starts an App whose PostgreSQL and Redis are behind proxies;
// redisDown starts it with Redis cut.
func serve(t *testing.T, redisDown bool, mutate func(*server.Config)) *served {
	t.Helper()
	ctx := context.Background()
	dbURL, dbName, err := testenv.CreateDatabase(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = testenv.DropDatabase(context.Background(), dbName) })
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	s := &served{pg: testenv.NewProxy(t, u.Host)}
	u.Host = s.pg.Addr()
	q := u.Query()
	q.Set("application_name", "appdor-faults") // whose backends TestTerminatedBackendsAre503 ends
	u.RawQuery = q.Encode()
	ropt, err := rueidis.ParseURL(testenv.RedisURL(t))
	require.NoError(t, err)
	s.redis = testenv.NewProxy(t, ropt.InitAddress[0])
	if redisDown {
		s.redis.Down()
	}
	s.pool, err = pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(s.pool.Close)

	cfg := testenv.Config(t)
	cfg.DatabaseURL = u.String()
	cfg.RedisURL = "redis://" + s.redis.Addr() + "/0"
	if mutate != nil {
		mutate(&cfg)
	}
	s.logs = &logBuffer{}
	app, err := server.New(ctx, cfg, slog.New(slog.NewJSONHandler(s.logs, nil)))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", s.logs.String())
		}
	})
	require.NoError(t, err)
	s.app = app
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s.url = "http://" + ln.Addr().String()
	sctx, stop := context.WithCancel(ctx)
	s.stop, s.stopped = stop, make(chan error, 1)
	go func() {
		err := app.ServeListener(sctx, ln)
		app.Close()
		s.stopped <- err
	}()
	t.Cleanup(func() {
		stop()
		<-s.stopped
	})

	ten := tenancy.New(s.pool)
	realm, err := ten.CreateRealm(ctx, "faults")
	require.NoError(t, err)
	_, err = ten.CreateUser(ctx, realm.ID, "ann@faults.test", "correct horse", tenancy.RoleOwner)
	require.NoError(t, err)
	_, s.token, err = ten.CreateToken(ctx, realm.ID, "ann@faults.test", "faults", nil)
	require.NoError(t, err)
	if !redisDown {
		res := s.do(t, "POST", "/api/v1/apps", `{"name":"A"}`)
		require.Equal(t, http.StatusCreated, res.status, res.body)
		var app struct{ ID string }
		require.NoError(t, json.Unmarshal([]byte(res.body), &app))
		res = s.do(t, "POST", "/api/v1/apps/"+app.ID+"/tables", `{"name":"T","fields":[{"name":"N","type":"text"}]}`)
		require.Equal(t, http.StatusCreated, res.status, res.body)
		var table struct {
			ID     string
			Fields []struct{ ID string }
		}
		require.NoError(t, json.Unmarshal([]byte(res.body), &table))
		s.tableID, s.fieldID = table.ID, table.Fields[0].ID
	}
	return s
}

// logBuffer holds a server's log lines.
type logBuffer struct{ testenv.SyncBuffer }

// count is how many lines have msg as their message.
func (l *logBuffer) count(msg string) int {
	return strings.Count(l.String(), `"msg":"`+msg)
}

type answer struct {
	status     int
	retryAfter string
	body       string
	err        error
}

func (s *served) send(method, path, body string) answer {
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	client := http.Client{Timeout: 10 * time.Second}
	res, err := client.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return answer{status: res.StatusCode, retryAfter: res.Header.Get("Retry-After"), body: string(b)}
}

func (s *served) do(t *testing.T, method, path, body string) answer {
	t.Helper()
	a := s.send(method, path, body)
	require.NoError(t, a.err)
	return a
}

func (s *served) ready(t *testing.T) (int, map[string]any) {
	t.Helper()
	res, err := http.Get(s.url + "/readyz")
	require.NoError(t, err)
	defer res.Body.Close()
	var m map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&m))
	return res.StatusCode, m
}

func (s *served) writeRow(t *testing.T) answer {
	t.Helper()
	return s.do(t, "POST", "/api/v1/tables/"+s.tableID+"/rows", fmt.Sprintf(`{"rows":[{"cells":{%q:"x"}}]}`, s.fieldID))
}

// TestReadinessWithoutRedis: a server started with Redis away serves (the
// limiter fails open) and says "degraded", 200, naming Redis; once Redis is
// back it says "ready" by itself. PostgreSQL away is "not ready", 503.
func TestReadinessWithoutRedis(t *testing.T) {
	t.Parallel()
	s := serve(t, true, nil)
	status, body := s.ready(t)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "degraded", body["status"])
	require.Equal(t, map[string]any{"database": "ok", "redis": "unreachable"}, body["checks"])
	res := s.do(t, "POST", "/api/v1/apps", `{"name":"without redis"}`)
	require.Equal(t, http.StatusCreated, res.status, "the limiter fails open: %s", res.body)

	s.redis.Up()
	require.Eventually(t, func() bool {
		status, body := s.ready(t)
		return status == http.StatusOK && body["status"] == "ready"
	}, 10*time.Second, 50*time.Millisecond, "ready once Redis is back")

	s.pg.Down()
	status, body = s.ready(t)
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, "not ready", body["status"])
	require.Equal(t, "unreachable", body["checks"].(map[string]any)["database"])
	s.pg.Up()
}

// TestDatabaseCutIs503ThenRecovers: requests that meet a connection to
// PostgreSQL cut under them, or no PostgreSQL at all, are answered 503
// unavailable with Retry-After, never 500; once it is back the pool
// reconnects by itself.
func TestDatabaseCutIs503ThenRecovers(t *testing.T) {
	t.Parallel()
	s := serve(t, false, nil)
	require.Equal(t, http.StatusCreated, s.writeRow(t).status)

	s.pg.Down()
	for range 5 {
		for _, res := range []answer{s.writeRow(t), s.do(t, "GET", "/api/v1/tables/"+s.tableID+"/rows", "")} {
			require.Equal(t, http.StatusServiceUnavailable, res.status, res.body)
			require.NotEmpty(t, res.retryAfter, "a 503 says when to retry")
			require.Contains(t, res.body, `"code":"unavailable"`)
		}
	}
	s.pg.Up()
	require.Eventually(t, func() bool { return s.writeRow(t).status == http.StatusCreated }, 10*time.Second, 50*time.Millisecond,
		"the pool reconnects by itself")
}

// TestTerminatedBackendsAre503: an administrator's pg_terminate_backend
// (SQLSTATE 57P01) under running requests is a 503 with Retry-After, not a
// 500, and the server recovers by itself.
func TestTerminatedBackendsAre503(t *testing.T) {
	t.Parallel()
	s := serve(t, false, nil)
	ctx := context.Background()
	var dbName string
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&dbName))
	statuses := map[int]int{}
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		if i%5 == 0 {
			_, err := s.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = $1 AND application_name = 'appdor-faults'`, dbName)
			require.NoError(t, err)
		}
		res := s.writeRow(t)
		statuses[res.status]++
		if res.status != http.StatusCreated {
			require.Equal(t, http.StatusServiceUnavailable, res.status, res.body)
			require.NotEmpty(t, res.retryAfter)
		}
	}
	t.Logf("answers by status: %v", statuses)
	require.NotZero(t, statuses[http.StatusCreated])
}

// TestShutdownCancelsAfterTheDrain: a CSV import still reading when the
// drain ends stops reading, writes the rows it read and answers 503 with
// Retry-After and how many it inserted; the server returns no error (the
// process exits 0).
func TestShutdownCancelsAfterTheDrain(t *testing.T) {
	t.Parallel()
	s := serve(t, false, func(c *server.Config) { c.ShutdownDrain = 300 * time.Millisecond })
	pr, pw := io.Pipe()
	type result struct {
		answer
		inserted int
	}
	imported := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("POST", s.url+"/api/v1/tables/"+s.tableID+"/csv", pr)
		req.Header.Set("Authorization", "Bearer "+s.token)
		req.Header.Set("Content-Type", "text/csv")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			imported <- result{answer: answer{err: err}}
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		var body struct {
			Error struct{ Details struct{ Inserted int } }
		}
		_ = json.Unmarshal(b, &body)
		imported <- result{answer{status: res.StatusCode, retryAfter: res.Header.Get("Retry-After"), body: string(b)}, body.Error.Details.Inserted}
	}()
	var csv bytes.Buffer
	csv.WriteString("N\n")
	for i := range 2500 {
		fmt.Fprintf(&csv, "row %d\n", i)
	}
	_, err := pw.Write(csv.Bytes()) // two batches of 1,000 are written; 500 rows wait for the rest
	require.NoError(t, err)
	// Until both batches are in: a fixed 300 ms was not always enough on a
	// loaded machine under -race (the import had written nothing yet).
	require.Eventually(t, func() bool {
		var n int
		return s.pool.QueryRow(context.Background(), `SELECT count(*) FROM rows`).Scan(&n) == nil && n >= 2000
	}, 10*time.Second, 20*time.Millisecond, "the import's first two batches were not written")

	start := time.Now()
	s.stop()
	// While the drain lasts the listener is closed; a load balancer that still
	// asks (here: the handler itself) is told to stop sending.
	time.Sleep(50 * time.Millisecond)
	rec := httptest.NewRecorder()
	s.app.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.JSONEq(t, `{"status":"shutting down"}`, rec.Body.String())
	var res result
	select {
	case res = <-imported:
	case <-time.After(10 * time.Second):
		t.Fatal("the import was not answered after the drain")
	}
	require.NoError(t, res.err)
	require.Equal(t, http.StatusServiceUnavailable, res.status, res.body)
	require.NotEmpty(t, res.retryAfter)
	select {
	case err := <-s.stopped:
		require.NoError(t, err, "a shutdown past the drain is still a clean exit")
		s.stopped <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop")
	}
	t.Logf("stopped %v after the signal; the import answered %d having inserted %d rows", time.Since(start), res.status, res.inserted)
	require.Less(t, time.Since(start), 5*time.Second)
	var n int
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT count(*) FROM rows`).Scan(&n))
	require.Equal(t, 2500, res.inserted, "the rows read before the shutdown are written and reported: %s", res.body)
	require.Equal(t, res.inserted, n, "what the import reported is what it wrote")
	pw.Close()
}

// TestSlowClientsAreCut: a client that sends its headers or its body too
// slowly is disconnected at --read-header-timeout or --read-timeout, while a
// CSV import that keeps moving may take longer than --read-timeout, and one
// that stalls for --stream-timeout is cut.
func TestSlowClientsAreCut(t *testing.T) {
	t.Parallel()
	s := serve(t, false, func(c *server.Config) {
		c.ReadHeaderTimeout = 200 * time.Millisecond
		c.ReadTimeout = 400 * time.Millisecond
		c.StreamTimeout = 400 * time.Millisecond
	})
	host := strings.TrimPrefix(s.url, "http://")
	closedWithin := func(t *testing.T, send string, d time.Duration) {
		t.Helper()
		conn, err := net.Dial("tcp", host)
		require.NoError(t, err)
		defer conn.Close()
		_, err = io.WriteString(conn, send)
		require.NoError(t, err)
		start := time.Now()
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.Copy(io.Discard, conn) // until the server closes it
		require.Less(t, time.Since(start), d, "the server held a slow client")
	}
	t.Run("headers", func(t *testing.T) {
		closedWithin(t, "GET /healthz HTTP/1.1\r\nHost: x\r\n", 2*time.Second)
	})
	t.Run("body", func(t *testing.T) {
		closedWithin(t, "POST /api/v1/apps HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+s.token+
			"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"na", 3*time.Second)
	})

	importSlowly := func(pause time.Duration) answer {
		pr, pw := io.Pipe()
		go func() {
			_, _ = io.WriteString(pw, "N\n")
			for i := range 8 {
				time.Sleep(pause)
				if _, err := fmt.Fprintf(pw, "slow %d\n", i); err != nil {
					return
				}
			}
			pw.Close()
		}()
		req, _ := http.NewRequest("POST", s.url+"/api/v1/tables/"+s.tableID+"/csv", pr)
		req.Header.Set("Authorization", "Bearer "+s.token)
		req.Header.Set("Content-Type", "text/csv")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return answer{err: err}
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return answer{status: res.StatusCode, body: string(b)}
	}
	t.Run("a CSV import that keeps moving", func(t *testing.T) {
		res := importSlowly(100 * time.Millisecond) // 800 ms in all: twice --read-timeout
		require.NoError(t, res.err)
		require.Equal(t, http.StatusCreated, res.status, res.body)
		require.Contains(t, res.body, `"inserted":8`)
	})
	t.Run("a CSV import that stalls", func(t *testing.T) {
		start := time.Now()
		res := importSlowly(time.Second)
		require.Less(t, time.Since(start), 3*time.Second)
		require.True(t, res.err != nil || res.status >= 400, "a stalled import is not served: %+v", res)
		require.Equal(t, 1, s.logs.count("stream_timeout"), "the cut is logged, with its setting")
	})
}
