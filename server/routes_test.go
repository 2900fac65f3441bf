package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/fairness"
	"github.com/appdor/appdor/server"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// ungated are the /api/v1 routes that touch no realm's data, so they pass
// neither authentication nor the fairness controller. Adding a route here is a
// decision to be defended in review: every other route must be gated.
var ungated = map[string]string{
	"POST /api/v1/auth/login":  "sign-in: global users and sessions",
	"POST /api/v1/auth/logout": "sign-out: the caller's own session",
	"GET /api/v1/me":           "who am I: global users and memberships",
	"GET /api/v1/openapi.json": "a static document",
	"POST /api/v1/auth/invite": "an invite's one-time secret sets a password: global users and sessions",
	"GET /api/v1/setup":        "the first run: 404 without the process's one-time secret",
	"POST /api/v1/setup":       "the first run: 404 without the process's one-time secret, and nothing once anyone exists",
}

var param = regexp.MustCompile(`:[A-Za-z_]+`)

type route struct{ method, path, name string }

// apiRoutes walks the router: every route registered under /api/v1.
func apiRoutes(t *testing.T, app *testenv.App) []route {
	t.Helper()
	e, ok := app.Handler().(*echo.Echo)
	require.True(t, ok, "the app's handler is the Echo router")
	var out []route
	for _, r := range e.Routes() {
		if !strings.HasPrefix(r.Path, "/api/v1") || strings.HasSuffix(r.Path, "/*") || r.Method == echo.RouteNotFound {
			continue
		}
		path := param.ReplaceAllStringFunc(r.Path, func(string) string { return uuid.NewString() })
		out = append(out, route{r.Method, path, r.Method + " " + r.Path})
	}
	require.NotEmpty(t, out)
	return out
}

func send(t *testing.T, app *testenv.App, r route, token string) testenv.Response {
	t.Helper()
	var body any
	if r.method == http.MethodPost || r.method == http.MethodPatch || r.method == http.MethodPut || r.method == http.MethodDelete {
		body = "{}"
	}
	return app.Do(t, r.method, r.path, token, body)
}

// saturable sizes the controller so that saturate can fill one realm's share
// and queue and leave a seat for others: four seats, one backlogged seat, a
// unit deep once its realm has one outstanding, queues of one, no wait
// expiring, and no flow idle long enough to return unmeasured. (With the
// default second, the credential lookups' flow came back unmeasured when the
// routes took longer than that under -race, and waited for the one
// backlogged seat the test holds.)
func saturable(cfg *server.Config) {
	cfg.Fairness = fairness.Config{Seats: 4, BackloggedSeats: 1, SparseDepth: 1, QueueLength: 1,
		WaitBound: time.Hour, ActiveWindow: time.Hour}
}

// saturate leaves realm marked, holding two seats (one of them the
// backlogged seat) and its queue full, with one seat free that it may not
// take: its next request is refused at once (queue_full). Both flows are
// measured first, and another flow holds a seat, so the realm is not alone.
// Everything is given back when the test ends.
func saturate(t testing.TB, ctl *fairness.Controller, realm string) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var rels []func()
	hold := func(rel func()) {
		mu.Lock()
		rels = append(rels, rel)
		mu.Unlock()
	}
	acquire := func(flow string) func() {
		rel, err := ctl.Acquire(ctx, flow, fairness.Interactive)
		require.NoError(t, err)
		return rel
	}
	var wg sync.WaitGroup
	queue := func() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if rel, err := ctl.Acquire(ctx, realm, fairness.Interactive); err == nil {
				hold(rel)
			}
		}()
		require.Eventually(t, func() bool { return ctl.Queued(realm, fairness.Interactive) == 1 }, 5*time.Second, time.Millisecond)
		_, err := ctl.Acquire(ctx, realm, fairness.Interactive)
		require.Equal(t, appdor.EConcurrencyLimited, appdor.ErrorCode(err), "the realm's queue is full")
	}
	for _, flow := range []string{"someone else", realm} {
		acquire(flow)() // measured: neither runs as work of unknown cost
	}
	// A realm arrives loaded (its averaged depth at SparseDepth) and shows
	// that it is light as that average falls: a quarter of a second (the
	// controller's load window) lets it fall well below.
	time.Sleep(300 * time.Millisecond)
	hold(acquire("someone else"))
	sparse, deep := acquire(realm), acquire(realm)
	queue()              // deep, it waits (the last free seat is not for a realm holding two); the full queue marks it
	deep()               // its queued unit takes the seat
	sparse()             // two seats free, the realm holding one
	hold(acquire(realm)) // marked: the backlogged seat
	queue()              // its next waits for the backlogged seat
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, rel := range rels {
			rel()
		}
	})
}

// TestEveryDataRouteIsGated fails when a route that reads or writes realm
// data bypasses authentication or the fairness controller: with the realm's
// slots all taken, every gated route must answer 429 concurrency_limited
// before its handler runs, whatever its input.
func TestEveryDataRouteIsGated(t *testing.T) {
	t.Parallel()
	app := testenv.NewApp(t, saturable)
	ctl := app.Fairness()
	require.NotNil(t, ctl)
	tenant := app.NewTenant(t, tenancy.RoleOwner, nil)
	realm := tenant.RealmID.String()
	routes := apiRoutes(t, app)

	for _, r := range routes {
		if _, ok := ungated[r.name]; ok {
			continue
		}
		res := send(t, app, r, "")
		require.Equal(t, http.StatusUnauthorized, res.Status, "%s without credentials: %s", r.name, res.Body)
	}

	saturate(t, ctl, realm)

	gated := 0
	for _, r := range routes {
		if _, ok := ungated[r.name]; ok {
			continue
		}
		res := send(t, app, r, tenant.Token)
		require.Equal(t, http.StatusTooManyRequests, res.Status, "%s bypasses the fairness controller: %s", r.name, res.Body)
		require.Equal(t, "concurrency_limited", res.ErrorCode(t), r.name)
		require.NotEmpty(t, res.Header.Get("Retry-After"), r.name)
		gated++
	}
	require.Positive(t, gated)

	// Another realm is not affected by this one's slots.
	other := app.NewTenant(t, tenancy.RoleOwner, nil)
	res := app.Do(t, http.MethodGet, "/api/v1/apps", other.Token, nil)
	require.Equal(t, http.StatusOK, res.Status, "%s", res.Body)

	// The diagnosis is on /metrics.
	metrics := string(app.Do(t, http.MethodGet, "/metrics", "", nil).Body)
	for _, want := range []string{
		`appdor_fairness_seats_in_use{level="interactive",realm="` + realm + `"} 2`,
		`appdor_fairness_queue_length{level="interactive",realm="` + realm + `"} 1`,
		`appdor_fairness_dispatched_total{level="interactive",realm="` + other.RealmID.String() + `"} 1`,
		`appdor_fairness_refused_total{level="interactive",realm="` + realm + `",reason="queue_full"}`,
		`appdor_fairness_wait_seconds_bucket{level="interactive",realm="` + realm + `",le="0.0005"}`,
		`appdor_fairness_seats{level="interactive"} 4`,
		`appdor_fairness_seats{level="background"}`,
		`appdor_fairness_active_realms`,
		`appdor_fairness_enabled 1`,
		`appdor_http_request_duration_seconds_count{method="GET",route="/api/v1/apps",status="429"}`,
		`appdor_db_pool_empty_acquires_total`,
		`appdor_db_pool_acquire_wait_seconds_total`,
		`appdor_db_pool_max_conns 16`,
	} {
		require.Contains(t, metrics, want)
	}
}

// TestUngatedRoutesExist keeps the allowlist honest: a route that no longer
// exists must leave it.
func TestUngatedRoutesExist(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	have := map[string]bool{}
	for _, r := range apiRoutes(t, app) {
		have[r.name] = true
	}
	for name := range ungated {
		require.True(t, have[name], "%s is allowlisted as ungated but not registered", name)
	}
}

// BenchmarkRequest is a request's server-side cost through the whole stack
// (request id, access log, authentication from the token cache, the rate
// limiter's Redis round trip, the fairness gate), in process: refused by the
// fairness controller, and admitted (a one-statement read) for reference.
func BenchmarkRequest(b *testing.B) {
	for _, limiterOff := range []bool{false, true} {
		app := testenv.NewApp(b, func(cfg *server.Config) {
			saturable(cfg)
			cfg.RealmRequestsPerMinute = 100_000_000
			cfg.LimiterOff = limiterOff
		})
		refusedT := app.NewTenant(b, tenancy.RoleOwner, nil)
		admittedT := app.NewTenant(b, tenancy.RoleOwner, nil)
		saturate(b, app.Fairness(), refusedT.RealmID.String())
		run := func(b *testing.B, token string, want int) {
			h := app.Handler()
			req := httptest.NewRequest(http.MethodGet, "/api/v1/apps", nil)
			req.Header.Set("Authorization", "Bearer "+token)
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != want {
					b.Fatalf("status %d, want %d: %s", rec.Code, want, rec.Body)
				}
			}
		}
		suffix := ""
		if limiterOff {
			suffix = "-limiter-off"
		}
		b.Run("refused"+suffix, func(b *testing.B) { run(b, refusedT.Token, http.StatusTooManyRequests) })
		b.Run("admitted"+suffix, func(b *testing.B) { run(b, admittedT.Token, http.StatusOK) })
	}
}
