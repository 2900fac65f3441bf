package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// harnessApp is the application_name of the suite's own connections, which
// the backend-terminating fault spares.
const harnessApp = "appdor-faults-harness"

// stack is what the suite runs on: the real binary, a database and a Redis of
// its own, and the server process.
type stack struct {
	t       *testing.T
	dir     string
	bin     string
	dbName  string
	dbURL   string
	pool    *pgxpool.Pool // the suite's, straight to the database
	redis   *redisServer
	srv     *exec.Cmd
	exited  chan struct{}
	base    string
	logPath string
	realms  [2]*realm
	extra   []*realm // realms that join for the held-lock fault only
}

// realm is one tenant the traffic writes to, with its table.
type realm struct {
	name    string
	token   string
	tableID string
	fieldID string
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// redisServer is a redis-server the suite starts, stops and starts again on
// one port, so stopping it disturbs no other test.
type redisServer struct {
	t    *testing.T
	bin  string
	port int
	cmd  *exec.Cmd
}

// redisServerEnv names the redis-server binary when it is not on PATH.
const redisServerEnv = "APPDOR_TEST_REDIS_SERVER"

func startRedis(t *testing.T) *redisServer {
	t.Helper()
	name := "redis-server"
	if v := os.Getenv(redisServerEnv); v != "" {
		name = v
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("the fault suite starts a Redis of its own, to stop it: it needs redis-server on PATH or its path in %s (Debian: apt-get install redis-server): %v",
			redisServerEnv, err)
	}
	r := &redisServer{t: t, bin: bin, port: freePort(t)}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *redisServer) url() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }

func (r *redisServer) start() {
	r.t.Helper()
	r.cmd = exec.Command(r.bin, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	require.NoError(r.t, r.cmd.Start())
	opt, err := rueidis.ParseURL(r.url())
	require.NoError(r.t, err)
	opt.DisableCache = true
	require.Eventually(r.t, func() bool {
		c, err := rueidis.NewClient(opt)
		if err != nil {
			return false
		}
		defer c.Close()
		return c.Do(context.Background(), c.B().Ping().Build()).Error() == nil
	}, 10*time.Second, 20*time.Millisecond, "redis-server on port %d did not answer", r.port)
}

func (r *redisServer) stop() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// setup builds the binary, makes the database, starts Redis and the server,
// and gives each of two realms a token and a table.
func setup(t *testing.T) *stack {
	t.Helper()
	s := &stack{t: t, dir: t.TempDir()}
	testenv.AdminURL(t) // fails, saying which variable to set, when there is no PostgreSQL
	s.redis = startRedis(t)

	s.bin = filepath.Join(s.dir, "appdor")
	build := exec.Command("go", "build", "-o", s.bin, "./cmd/appdor")
	build.Dir = "../.."
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/appdor: %s", out)

	ctx := context.Background()
	s.dbURL, s.dbName, err = testenv.CreateDatabase(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = testenv.DropDatabase(context.Background(), s.dbName) })
	pcfg, err := pgxpool.ParseConfig(s.dbURL)
	require.NoError(t, err)
	pcfg.ConnConfig.RuntimeParams["application_name"] = harnessApp
	s.pool, err = pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(s.pool.Close)

	ten := tenancy.New(s.pool)
	all := make([]*realm, len(s.realms)+extraRealms)
	for i := range all {
		r, err := ten.CreateRealm(ctx, fmt.Sprintf("faults %d", i))
		require.NoError(t, err)
		email := fmt.Sprintf("owner%d@faults.test", i)
		_, err = ten.CreateUser(ctx, r.ID, email, "correct horse", tenancy.RoleOwner)
		require.NoError(t, err)
		_, secret, err := ten.CreateToken(ctx, r.ID, email, "traffic", nil)
		require.NoError(t, err)
		all[i] = &realm{name: fmt.Sprintf("realm%d", i), token: secret}
	}
	copy(s.realms[:], all)
	s.extra = all[len(s.realms):]
	s.startServer()
	for _, r := range all {
		r.tableID, r.fieldID = s.createTable(r.token, "traffic")
	}
	return s
}

// extraRealms is how many realms join the held-lock fault: with the two of
// the traffic, more requests than the pool has connections.
const extraRealms = 6

// Settings of the server under test: short bounds, so a fault is felt and
// answered within the suite's time.
var serverSettings = []string{
	"APPDOR_ACQUIRE_TIMEOUT=500ms",
	"APPDOR_STATEMENT_TIMEOUT=2s",
	"APPDOR_SHUTDOWN_DRAIN=3s",
	"APPDOR_DB_MAX_CONNS=4",
	"APPDOR_FAIRNESS_SEATS=6", // more than the pool: the held lock fills it
	"APPDOR_MIGRATE=false",
	"APPDOR_LOG_LEVEL=info",
	"APPDOR_UNAUTHENTICATED_REQUESTS_PER_SECOND=1000",
	"APPDOR_UNAUTHENTICATED_BURST=1000",
}

func (s *stack) startServer() {
	t := s.t
	port := freePort(t)
	s.base = fmt.Sprintf("http://127.0.0.1:%d", port)
	s.logPath = filepath.Join(s.dir, "server.log")
	logf, err := os.Create(s.logPath)
	require.NoError(t, err)
	t.Cleanup(func() { logf.Close() })
	s.srv = exec.Command(s.bin, "serve")
	s.srv.Env = append(os.Environ(), append([]string{
		"APPDOR_DATABASE_URL=" + s.dbURL,
		"APPDOR_REDIS_URL=" + s.redis.url(),
		fmt.Sprintf("APPDOR_LISTEN=127.0.0.1:%d", port),
	}, serverSettings...)...)
	s.srv.Stdout, s.srv.Stderr = logf, logf
	require.NoError(t, s.srv.Start())
	s.exited = make(chan struct{})
	go func() { _ = s.srv.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		select {
		case <-s.exited:
		default:
			_ = s.srv.Process.Kill()
			<-s.exited
		}
		if t.Failed() {
			t.Logf("server log, last lines:\n%s", s.tail(30))
		}
	})
	require.Eventually(t, func() bool {
		status, _ := s.ready()
		return status == http.StatusOK
	}, 60*time.Second, 50*time.Millisecond, "appdor serve did not become ready:\n%s", s.tail(20))
}

// ready is /readyz's status and its "status" field.
func (s *stack) ready() (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	res, err := c.Get(s.base + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	var body struct{ Status string }
	_ = json.NewDecoder(res.Body).Decode(&body)
	return res.StatusCode, body.Status
}

func (s *stack) createTable(token, name string) (tableID, fieldID string) {
	t := s.t
	res := send(s.base, "POST", "/api/v1/apps", token, "application/json", strings.NewReader(`{"name":"`+name+`"}`))
	require.Equal(t, http.StatusCreated, res.status, "%+v", res)
	var app struct{ ID string }
	require.NoError(t, json.Unmarshal(res.body, &app))
	res = send(s.base, "POST", "/api/v1/apps/"+app.ID+"/tables", token, "application/json",
		strings.NewReader(`{"name":"`+name+`","fields":[{"name":"N","type":"text"}]}`))
	require.Equal(t, http.StatusCreated, res.status, "%+v", res)
	var table struct {
		ID     string
		Fields []struct{ ID string }
	}
	require.NoError(t, json.Unmarshal(res.body, &table))
	return table.ID, table.Fields[0].ID
}

// rowsIn counts a table's rows straight from the database.
func (s *stack) rowsIn(tableID string) int {
	var n int
	require.NoError(s.t, s.pool.QueryRow(context.Background(), `SELECT count(*) FROM rows WHERE table_id = $1`, tableID).Scan(&n))
	return n
}

// logLines counts the server's log lines whose msg is msg.
func (s *stack) logLines(msg string) int {
	f, err := os.Open(s.logPath)
	require.NoError(s.t, err)
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct{ Msg string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == msg {
			n++
		}
	}
	return n
}

func (s *stack) tail(n int) string {
	b, _ := os.ReadFile(s.logPath)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// answer is one HTTP exchange as the traffic sees it.
type answer struct {
	status     int
	retryAfter string
	body       []byte
	err        error
	took       time.Duration
}

// deadline is every request's own: a request not answered within it hung.
const deadline = 6 * time.Second

var client = &http.Client{Timeout: deadline}

func send(base, method, path, token, contentType string, body io.Reader) answer {
	start := time.Now()
	req, err := http.NewRequest(method, base+path, body)
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := client.Do(req)
	if err != nil {
		return answer{err: err, took: time.Since(start)}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return answer{status: res.StatusCode, retryAfter: res.Header.Get("Retry-After"), body: b, err: err, took: time.Since(start)}
}

// refused says whether err is a connection the server refused or closed
// because it is gone (after a shutdown), not a hang.
func refused(err error) bool {
	var ue *url.Error
	if !asURLError(err, &ue) || ue.Timeout() {
		return false
	}
	msg := err.Error()
	// "server closed idle connection": the request went out on a kept-alive
	// connection the stopping server was closing as idle, so it was never
	// read (the transport retries only idempotent requests by itself).
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "connection reset") || strings.Contains(msg, "EOF") ||
		strings.Contains(msg, "server closed idle connection")
}
