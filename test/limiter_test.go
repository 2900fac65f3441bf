package test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/limiter"
	"github.com/appdor/appdor/server"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

func rpm(n int) *int { return &n }

// rateLimitedBody is the body of a 429 from the limiter.
type rateLimitedBody struct {
	Error struct {
		Code         string `json:"code"`
		Message      string `json:"message"`
		RetryAfterMS int64  `json:"retry_after_ms"`
	} `json:"error"`
}

// requireRateLimited checks that res is a well-formed refusal by a ceiling of
// limit, and returns how long it says to wait.
func requireRateLimited(t *testing.T, res testenv.Response, limit int) time.Duration {
	t.Helper()
	require.Equal(t, http.StatusTooManyRequests, res.Status, string(res.Body))
	var b rateLimitedBody
	res.JSON(t, &b)
	require.Equal(t, "rate_limited", b.Error.Code)
	require.NotEmpty(t, b.Error.Message)
	require.Positive(t, b.Error.RetryAfterMS)
	require.LessOrEqual(t, b.Error.RetryAfterMS, int64(60_000))
	ra, err := strconv.Atoi(res.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After is whole seconds: %q", res.Header.Get("Retry-After"))
	require.GreaterOrEqual(t, ra, 1, "Retry-After is never 0")
	// Rounded up: the header covers the wait, and by less than a second more.
	require.GreaterOrEqual(t, int64(ra)*1000, b.Error.RetryAfterMS)
	require.Less(t, int64(ra)*1000, b.Error.RetryAfterMS+1001)
	require.Equal(t, strconv.Itoa(limit), res.Header.Get("RateLimit-Limit"))
	require.Equal(t, "0", res.Header.Get("RateLimit-Remaining"))
	return time.Duration(b.Error.RetryAfterMS) * time.Millisecond
}

// requireAllowed checks an allowed response's RateLimit headers and returns
// RateLimit-Remaining.
func requireAllowed(t *testing.T, res testenv.Response, limit int) int {
	t.Helper()
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.Equal(t, strconv.Itoa(limit), res.Header.Get("RateLimit-Limit"))
	remaining, err := strconv.Atoi(res.Header.Get("RateLimit-Remaining"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, remaining, 0)
	require.Less(t, remaining, limit)
	reset, err := strconv.Atoi(res.Header.Get("RateLimit-Reset"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, reset, 1)
	require.LessOrEqual(t, reset, 60)
	return remaining
}

// fire sends n GET requests with token at once and returns the answers.
func fire(t *testing.T, app *testenv.App, n int, path, token string) []testenv.Response {
	t.Helper()
	out := make([]testenv.Response, n)
	errs := make([]error, n)
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range n {
		done.Go(func() {
			start.Wait()
			out[i], errs[i] = get(app.URL+path, token)
		})
	}
	start.Done()
	done.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	return out
}

// get is app.Do for goroutines: it returns its error instead of failing.
func get(url, token string) (testenv.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return testenv.Response{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return testenv.Response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return testenv.Response{Status: res.StatusCode, Header: res.Header, Body: b}, err
}

// metric sums the samples of name on /metrics whose labels include labels.
func metric(t *testing.T, app *testenv.App, name string, labels map[string]string) float64 {
	t.Helper()
	res := app.Do(t, "GET", "/metrics", "", nil)
	require.Equal(t, http.StatusOK, res.Status)
	sum := 0.0
	sc := bufio.NewScanner(strings.NewReader(string(res.Body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for k, v := range labels {
			ok = ok && strings.Contains(line, k+`="`+v+`"`)
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		require.NoError(t, err, line)
		sum += v
	}
	return sum
}

// TestRateLimitBurstThenSteady: a 60/minute token firing 150 requests at once
// gets its minute's worth, then about one a second; every refusal is
// well-formed; neither another realm's token nor another token of the same
// realm is touched by its ceiling.
func TestRateLimitBurstThenSteady(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	owner := app.NewTenant(t, tenancy.RoleOwner, nil)
	agent := app.AddMember(t, owner.RealmID, tenancy.RoleEditor, rpm(60))
	stranger := app.NewTenant(t, tenancy.RoleOwner, rpm(60))

	start := time.Now()
	answers := fire(t, app, 150, "/api/v1/apps", agent.Token)
	took := time.Since(start)
	allowed, admitted := 0, 0
	for _, res := range answers {
		switch {
		case res.Status == http.StatusOK:
			admitted++
			allowed++
			requireAllowed(t, res, 60)
		case res.ErrorCode(t) == "rate_limited":
			requireRateLimited(t, res, 60)
		default:
			// Allowed by the limiter, then refused by the next gate (the
			// fairness controller's in-flight cap): charged all the same.
			require.Equal(t, http.StatusTooManyRequests, res.Status, string(res.Body))
			require.Equal(t, "60", res.Header.Get("RateLimit-Limit"), "a refusal after the limiter carries its headers: %s", res.Body)
			allowed++
		}
	}
	t.Logf("limiter errors (fail open) during the burst: %v", metric(t, app, "appdor_limiter_decisions_total", map[string]string{"realm": owner.RealmID.String(), "result": "error"}))
	// 60 at once, and one more for each second the burst itself took.
	require.GreaterOrEqual(t, allowed, 60)
	require.LessOrEqual(t, allowed, 60+int(took/time.Second)+1)
	t.Logf("150 at once (in %v): %d allowed by the limiter (%d of them served), %d refused",
		took.Round(time.Millisecond), allowed, admitted, 150-allowed)

	// Another realm's token with the same ceiling, and another token of the
	// same realm, are untouched.
	require.Equal(t, 59, requireAllowed(t, app.Do(t, "GET", "/api/v1/apps", stranger.Token, nil), 60))
	require.Equal(t, http.StatusOK, app.Do(t, "GET", "/api/v1/apps", owner.Token, nil).Status)

	// Then one a second: waiting what a refusal says lets exactly one through.
	var wait time.Duration
	for res := app.Do(t, "GET", "/api/v1/apps", agent.Token, nil); ; res = app.Do(t, "GET", "/api/v1/apps", agent.Token, nil) {
		if res.Status != http.StatusOK {
			wait = requireRateLimited(t, res, 60)
			break
		}
	}
	for range 3 {
		require.LessOrEqual(t, wait, time.Second)
		time.Sleep(wait + 5*time.Millisecond) // a client honouring the refusal
		require.Equal(t, 0, requireAllowed(t, app.Do(t, "GET", "/api/v1/apps", agent.Token, nil), 60))
		wait = requireRateLimited(t, app.Do(t, "GET", "/api/v1/apps", agent.Token, nil), 60)
		require.Greater(t, wait, 500*time.Millisecond, "the next one is about an emission interval away")
	}
}

func auditRows(t *testing.T, realm uuid.UUID) []map[string]any {
	t.Helper()
	rows, err := testenv.Pool(t).Query(context.Background(),
		`SELECT actor, detail FROM audit_log WHERE realm_id = $1 AND action = 'rate_limited' ORDER BY id`, realm)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (map[string]any, error) {
		var actor string
		var detail map[string]any
		err := r.Scan(&actor, &detail)
		detail["actor"] = actor
		return detail, err
	})
	require.NoError(t, err)
	return out
}

// TestRateLimitAuditOncePerEpisode: a token that keeps hammering past its
// ceiling writes one audit row for its refusal episode, not one per emission
// interval, although it earns a request each interval in between.
func TestRateLimitAuditOncePerEpisode(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	owner := app.NewTenant(t, tenancy.RoleOwner, nil)
	agent := app.AddMember(t, owner.RealmID, tenancy.RoleEditor, rpm(60)) // one a second after the burst
	ctx := context.Background()

	var ok, refused int
	for start := time.Now(); time.Since(start) < 2500*time.Millisecond; {
		res := app.Do(t, "GET", "/api/v1/apps", agent.Token, nil)
		if res.Status == http.StatusOK {
			ok++
		} else {
			requireRateLimited(t, res, 60)
			refused++
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("%d allowed, %d refused", ok, refused)
	require.GreaterOrEqual(t, ok, 62, "the burst, then at least two earned while hammering")
	require.Positive(t, refused)
	require.NoError(t, app.Limiter().Flush(ctx))
	rows := auditRows(t, owner.RealmID)
	require.Len(t, rows, 1, "one episode, one row")
	require.Equal(t, agent.TokenID.String(), rows[0]["token"])
	require.EqualValues(t, 60, rows[0]["limit"])
	require.Equal(t, "token:"+agent.TokenID.String(), rows[0]["actor"])
}

// TestRefusalsTouchNoPostgres counts the PostgreSQL transactions that 300
// refused requests cost, on a database of their own so nothing else counts.
func TestRefusalsTouchNoPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, name, err := testenv.CreateDatabase(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = testenv.DropDatabase(context.Background(), name) })

	// Seed through a pool of our own, closed before counting.
	seedPool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	svc := tenancy.New(seedPool)
	realm, err := svc.CreateRealm(ctx, "refusals")
	require.NoError(t, err)
	m, err := svc.CreateUser(ctx, realm.ID, uuid.NewString()[:8]+"@example.test", "correct horse", tenancy.RoleEditor)
	require.NoError(t, err)
	_, token, err := svc.CreateToken(ctx, realm.ID, m.Email, "agent", rpm(5))
	require.NoError(t, err)
	seedPool.Close()

	serverURL, err := testenv.AsServer(url)
	require.NoError(t, err)
	app := testenv.NewApp(t, func(c *server.Config) {
		c.DatabaseURL = serverURL
		// The automation workers poll their queue on their own pool; what
		// is counted here is the request path's work.
		c.Automations.Workers = -1
	})
	for range 5 {
		requireAllowed(t, app.Do(t, "GET", "/api/v1/apps", token, nil), 5)
	}
	requireRateLimited(t, app.Do(t, "GET", "/api/v1/apps", token, nil), 5) // opens the episode: one audit row
	require.NoError(t, app.Limiter().Flush(ctx))

	admin, err := pgx.Connect(ctx, testenv.AdminURL(t))
	require.NoError(t, err)
	defer admin.Close(ctx)
	// transactions ends the app's pooled backends (not the LISTEN one), which
	// makes them report their statistics, and reads the database's count.
	transactions := func() int64 {
		var pids []int32
		require.NoError(t, admin.QueryRow(ctx,
			`SELECT coalesce(array_agg(pid), '{}') FROM pg_stat_activity
			 WHERE datname = $1 AND query NOT LIKE 'LISTEN%'`, name).Scan(&pids))
		_, err := admin.Exec(ctx, `SELECT pg_terminate_backend(p) FROM unnest($1::int[]) p`, pids)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			var n int
			err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)`, pids).Scan(&n)
			return err == nil && n == 0
		}, 10*time.Second, 10*time.Millisecond)
		var n int64
		_, err = admin.Exec(ctx, `SELECT pg_stat_clear_snapshot()`)
		require.NoError(t, err)
		require.NoError(t, admin.QueryRow(ctx,
			`SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1`, name).Scan(&n))
		return n
	}
	before := transactions()
	for range 300 {
		requireRateLimited(t, app.Do(t, "GET", "/api/v1/apps", token, nil), 5)
	}
	after := transactions()
	t.Logf("PostgreSQL transactions for 300 refused requests: %d", after-before)
	require.Zero(t, after-before)

	// The LISTEN connection was spared, so the cache stayed on throughout.
	var n int
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND query LIKE 'LISTEN%'`, name).Scan(&n))
	require.Equal(t, 1, n, "the token cache listens")
}

// startRedis runs a redis-server of the test's own on a free port; the
// shared Redis is never stopped. It returns the URL and a function that
// stops the server (or, given true, starts it again on the same port).
func startRedis(t *testing.T) (string, func(run bool)) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	require.NoError(t, ln.Close())
	var cmd *exec.Cmd
	stop := func() {
		if cmd != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			cmd = nil
		}
	}
	start := func() {
		cmd = exec.Command("/usr/bin/redis-server", "--port", port, "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no")
		require.NoError(t, cmd.Start())
		require.Eventually(t, func() bool {
			c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 100*time.Millisecond)
			if err != nil {
				return false
			}
			defer c.Close()
			_, _ = c.Write([]byte("PING\r\n"))
			line, _ := bufio.NewReader(c).ReadString('\n')
			return strings.HasPrefix(line, "+PONG")
		}, 10*time.Second, 10*time.Millisecond)
	}
	start()
	t.Cleanup(stop)
	return "redis://127.0.0.1:" + port + "/0", func(run bool) {
		stop()
		if run {
			start()
		}
	}
}

// TestRateLimitRedisDown: with Redis stopped mid-test, requests succeed and
// the error counter rises, but a token Redis refused is refused until its
// retry time (the refusal is remembered in the process); when Redis is back
// the limiter decides again.
func TestRateLimitRedisDown(t *testing.T) {
	t.Parallel()
	redisURL, redis := startRedis(t)
	app := testenv.NewApp(t, func(c *server.Config) { c.RedisURL = redisURL })
	tn := app.NewTenant(t, tenancy.RoleOwner, rpm(5))
	errorsOf := func() float64 {
		return metric(t, app, "appdor_limiter_decisions_total", map[string]string{"realm": tn.RealmID.String(), "result": "error"})
	}
	for range 5 {
		requireAllowed(t, app.Do(t, "GET", "/api/v1/apps", tn.Token, nil), 5)
	}
	requireRateLimited(t, app.Do(t, "GET", "/api/v1/apps", tn.Token, nil), 5)
	require.Zero(t, errorsOf())
	other := app.AddMember(t, tn.RealmID, tenancy.RoleEditor, rpm(5)) // never refused

	redis(false)
	requireRateLimited(t, app.Do(t, "GET", "/api/v1/apps", tn.Token, nil), 5) // remembered: no Redis needed
	require.Zero(t, errorsOf())
	const n = 100
	durations := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		res := app.Do(t, "GET", "/api/v1/apps", other.Token, nil)
		durations = append(durations, time.Since(start))
		require.Equal(t, http.StatusOK, res.Status, "fail open: %s", res.Body)
		require.Empty(t, res.Header.Get("RateLimit-Limit"), "nothing decided, nothing claimed")
	}
	require.Equal(t, float64(n), errorsOf())
	slices.Sort(durations)
	t.Logf("Redis down: %d requests, all 200; latency p50 %v, p99 %v, max %v; appdor_limiter_decisions_total{result=\"error\"} = %v",
		n, durations[n/2], durations[n*99/100-1], durations[n-1], errorsOf())

	redis(true) // empty: no state survived, so the token has a fresh minute
	back := time.Now()
	require.Eventually(t, func() bool {
		res := app.Do(t, "GET", "/api/v1/apps", other.Token, nil)
		return res.Status == http.StatusOK && res.Header.Get("RateLimit-Limit") == "5"
	}, 10*time.Second, 20*time.Millisecond, "the limiter decides again once Redis is back")
	t.Logf("Redis back: the limiter decided again after %v", time.Since(back).Round(time.Millisecond))
	for {
		res := app.Do(t, "GET", "/api/v1/apps", other.Token, nil)
		if res.Status != http.StatusOK {
			requireRateLimited(t, res, 5)
			break
		}
	}
	errs := errorsOf()
	require.Greater(t, errs, float64(n))
	require.Equal(t, http.StatusTooManyRequests, app.Do(t, "GET", "/api/v1/apps", other.Token, nil).Status)
	require.Equal(t, errs, errorsOf(), "no more errors once Redis answers")
}

// TestSessionChargedToRealm: a browser session has no token ceiling; it is
// charged to its realm's, which the realm's tokens share.
func TestSessionChargedToRealm(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	tn := app.NewTenant(t, tenancy.RoleOwner, nil)
	_, err := testenv.Pool(t).Exec(context.Background(), `UPDATE realms SET requests_per_minute = 3 WHERE id = $1`, tn.RealmID)
	require.NoError(t, err)
	res := app.Do(t, "POST", "/api/v1/auth/login", "", map[string]any{"email": tn.Email, "password": tn.Password})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	cookies := (&http.Response{Header: res.Header}).Cookies()
	require.NotEmpty(t, cookies)
	// A browser's read: the session cookie and the realm chosen by header.
	browse := func() testenv.Response {
		req, err := http.NewRequest(http.MethodGet, app.URL+"/api/v1/apps", nil)
		require.NoError(t, err)
		for _, ck := range cookies {
			req.AddCookie(ck)
		}
		req.Header.Set(tenancy.RealmHeader, tn.RealmID.String())
		r, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer r.Body.Close()
		b, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		return testenv.Response{Status: r.StatusCode, Header: r.Header, Body: b}
	}
	for range 3 {
		requireAllowed(t, browse(), 3)
	}
	res = browse()
	requireRateLimited(t, res, 3)
	require.Contains(t, res.Map(t)["error"].(map[string]any)["message"], "realm")
	requireRateLimited(t, app.Do(t, "GET", "/api/v1/apps", tn.Token, nil), 3)
}

// TestLimiterOff: with the limiter off nothing is refused or claimed.
func TestLimiterOff(t *testing.T) {
	t.Parallel()
	app := testenv.NewApp(t, func(c *server.Config) { c.LimiterOff = true })
	tn := app.NewTenant(t, tenancy.RoleOwner, rpm(1))
	for range 3 {
		res := app.Do(t, "GET", "/api/v1/apps", tn.Token, nil)
		require.Equal(t, http.StatusOK, res.Status)
		require.Empty(t, res.Header.Get("RateLimit-Limit"))
	}
	require.Nil(t, app.Limiter())
}

// TestTokenAPI: owners create, list, limit and revoke their realm's tokens;
// secrets are shown once; nobody reaches another realm's tokens.
func TestTokenAPI(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	owner := app.NewTenant(t, tenancy.RoleOwner, nil)
	editor := app.AddMember(t, owner.RealmID, tenancy.RoleEditor, nil)
	stranger := app.NewTenant(t, tenancy.RoleOwner, nil)

	res := app.Do(t, "POST", "/api/v1/tokens", owner.Token, map[string]any{"name": "agent", "requests_per_minute": 2})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
	var created struct {
		ID                uuid.UUID `json:"id"`
		RealmID           uuid.UUID `json:"realm_id"`
		UserID            uuid.UUID `json:"user_id"`
		RequestsPerMinute *int      `json:"requests_per_minute"`
		Token             string    `json:"token"`
	}
	res.JSON(t, &created)
	require.Equal(t, owner.RealmID, created.RealmID)
	require.Equal(t, owner.UserID, created.UserID, "the token acts as its creator")
	require.Equal(t, 2, *created.RequestsPerMinute)
	require.True(t, strings.HasPrefix(created.Token, "apd_"))
	requireAllowed(t, app.Do(t, "GET", "/api/v1/apps", created.Token, nil), 2)

	// The list shows this realm's tokens, never a secret or a hash.
	res = app.Do(t, "GET", "/api/v1/tokens", owner.Token, nil)
	require.Equal(t, http.StatusOK, res.Status)
	require.NotContains(t, string(res.Body), created.Token)
	require.NotContains(t, string(res.Body), `"hash"`)
	require.NotContains(t, string(res.Body), `"token"`)
	var list struct {
		Tokens []map[string]any `json:"tokens"`
	}
	res.JSON(t, &list)
	require.Len(t, list.Tokens, 3) // owner's, editor's, agent
	for _, tok := range list.Tokens {
		require.Equal(t, owner.RealmID.String(), tok["realm_id"])
	}

	path := "/api/v1/tokens/" + created.ID.String()
	for _, c := range []struct {
		name, method, path, token string
		body                      any
		status                    int
	}{
		{"editor may not create", "POST", "/api/v1/tokens", editor.Token, map[string]any{"name": "x"}, 403},
		{"editor may not list", "GET", "/api/v1/tokens", editor.Token, nil, 403},
		{"editor may not revoke", "DELETE", path, editor.Token, nil, 403},
		{"no name", "POST", "/api/v1/tokens", owner.Token, map[string]any{"requests_per_minute": 5}, 422},
		{"zero ceiling", "POST", "/api/v1/tokens", owner.Token, map[string]any{"name": "x", "requests_per_minute": 0}, 422},
		{"unknown key", "POST", "/api/v1/tokens", owner.Token, map[string]any{"name": "x", "secret": "y"}, 400},
		{"patch without the key", "PATCH", path, owner.Token, map[string]any{}, 400},
		{"patch a fraction", "PATCH", path, owner.Token, map[string]any{"requests_per_minute": 1.5}, 422},
		{"patch a negative", "PATCH", path, owner.Token, map[string]any{"requests_per_minute": -1}, 422},
		{"patch another realm's token", "PATCH", "/api/v1/tokens/" + stranger.TokenID.String(), owner.Token, map[string]any{"requests_per_minute": 1}, 404},
		{"revoke another realm's token", "DELETE", "/api/v1/tokens/" + stranger.TokenID.String(), owner.Token, nil, 404},
		{"malformed id", "DELETE", "/api/v1/tokens/nope", owner.Token, nil, 404},
	} {
		res := app.Do(t, c.method, c.path, c.token, c.body)
		require.Equal(t, c.status, res.Status, "%s: %s", c.name, res.Body)
		require.NotEmpty(t, res.ErrorCode(t), c.name)
	}
	requireAllowed(t, app.Do(t, "GET", "/api/v1/apps", stranger.Token, nil), limiter.DefaultRealmLimit)

	// PATCH changes the ceiling at once (the cached answer is dropped), and
	// null removes it.
	res = app.Do(t, "PATCH", path, owner.Token, map[string]any{"requests_per_minute": 100})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.EqualValues(t, 100, res.Map(t)["requests_per_minute"])
	requireAllowed(t, app.Do(t, "GET", "/api/v1/apps", created.Token, nil), 100)
	res = app.Do(t, "PATCH", path, owner.Token, json.RawMessage(`{"requests_per_minute": null}`))
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.Nil(t, res.Map(t)["requests_per_minute"])
	requireAllowed(t, app.Do(t, "GET", "/api/v1/apps", created.Token, nil), limiter.DefaultRealmLimit)

	// DELETE revokes at once, and again is a no-op.
	require.Equal(t, http.StatusNoContent, app.Do(t, "DELETE", path, owner.Token, nil).Status)
	require.Equal(t, http.StatusUnauthorized, app.Do(t, "GET", "/api/v1/apps", created.Token, nil).Status)
	require.Equal(t, http.StatusNoContent, app.Do(t, "DELETE", path, owner.Token, nil).Status)
}

// TestRevokeReachesTheCache: a revoke made elsewhere (the CLI, another
// replica) reaches this process's token cache through NOTIFY.
func TestRevokeReachesTheCache(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	tn := app.NewTenant(t, tenancy.RoleOwner, nil)
	require.Equal(t, http.StatusOK, app.Do(t, "GET", "/api/v1/apps", tn.Token, nil).Status) // cached now
	_, err := app.Tenancy.RevokeToken(context.Background(), tn.TokenID)                     // another Service, no cache
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return app.Do(t, "GET", "/api/v1/apps", tn.Token, nil).Status == http.StatusUnauthorized
	}, time.Second, 5*time.Millisecond, "revoked within a second")
}

// BenchmarkRefusedRequest is a refused request through the whole stack, over
// real HTTP on loopback: client and server share the process, so read its
// time, not its allocations.
func BenchmarkRefusedRequest(b *testing.B) {
	app := testenv.SharedApp(b)
	tn := app.NewTenant(b, tenancy.RoleOwner, rpm(1))
	if _, err := get(app.URL+"/api/v1/apps", tn.Token); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := get(app.URL+"/api/v1/apps", tn.Token)
		if err != nil || res.Status != http.StatusTooManyRequests {
			b.Fatal(err, res.Status)
		}
	}
}
