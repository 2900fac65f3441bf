package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/server"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// TestMetricsLoopbackOnlyByDefault: with no token and no listener of its
// own, /metrics answers loopback clients of the main listener and nobody
// else, nor a loopback peer passing on a forwarded request.
func TestMetricsLoopbackOnlyByDefault(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	res := app.Do(t, http.MethodGet, "/metrics", "", nil) // over real HTTP, from 127.0.0.1
	require.Equal(t, http.StatusOK, res.Status)
	require.Contains(t, string(res.Body), "appdor_fairness_enabled")

	for name, rec := range map[string]int{
		"a remote client":              inProcess(t, app, http.MethodGet, "/metrics", "203.0.113.5:4000", false, "", nil).Code,
		"a private-network client":     inProcess(t, app, http.MethodGet, "/metrics", "10.0.0.7:4000", false, "", nil).Code,
		"a proxy on the same host":     inProcess(t, app, http.MethodGet, "/metrics", "127.0.0.1:4000", false, "", map[string]string{"X-Forwarded-For": "203.0.113.5"}).Code,
		"a proxy on the same host (2)": inProcess(t, app, http.MethodGet, "/metrics", "[::1]:4000", false, "", map[string]string{"Forwarded": "for=203.0.113.5"}).Code,
	} {
		require.Equal(t, http.StatusForbidden, rec, name)
	}
	rec := inProcess(t, app, http.MethodGet, "/metrics", "203.0.113.5:4000", false, "", nil)
	require.Contains(t, rec.Body.String(), `"code":"forbidden"`)
	require.NotContains(t, rec.Body.String(), "appdor_")
	require.Equal(t, http.StatusOK, inProcess(t, app, http.MethodGet, "/metrics", "[::1]:4000", false, "", nil).Code)
}

// TestMetricsToken: with a token, /metrics answers whoever sends it, from
// anywhere, and nobody else.
func TestMetricsToken(t *testing.T) {
	t.Parallel()
	const token = "metrics-0123456789abcdef"
	app := testenv.NewApp(t, func(c *server.Config) { c.MetricsToken = token })
	const remote = "203.0.113.6:4000"
	for name, h := range map[string]map[string]string{
		"none":        nil,
		"wrong":       {"Authorization": "Bearer metrics-0123456789abcdeX"},
		"not bearer":  {"Authorization": "Basic " + token},
		"a prefix":    {"Authorization": "Bearer metrics-0123"},
		"from a peer": {"Authorization": "Bearer "},
	} {
		rec := inProcess(t, app, http.MethodGet, "/metrics", remote, false, "", h)
		require.Equal(t, http.StatusUnauthorized, rec.Code, name)
		require.Contains(t, rec.Header().Get("WWW-Authenticate"), "Bearer", name)
		require.NotContains(t, rec.Body.String(), "appdor_", name)
	}
	rec := inProcess(t, app, http.MethodGet, "/metrics", remote, false, "", map[string]string{"Authorization": "Bearer " + token})
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), "appdor_http_request_duration_seconds")
	require.Equal(t, http.StatusUnauthorized, app.Do(t, http.MethodGet, "/metrics", "", nil).Status, "loopback needs it too")
}

// TestMetricsListen: with a listener of its own, /metrics is served there
// and the main listener answers 404 for it.
func TestMetricsListen(t *testing.T) {
	t.Parallel()
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		return ln.Addr().String()
	}
	metricsAddr, mainAddr := free(), free()
	app := testenv.NewApp(t, func(c *server.Config) { c.MetricsListen, c.Listen = metricsAddr, mainAddr })
	serveListeners(t, app)

	var res *http.Response
	require.Eventually(t, func() bool {
		var err error
		res, err = http.Get("http://" + metricsAddr + "/metrics")
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	main := app.Do(t, http.MethodGet, "/metrics", "", nil)
	require.Equal(t, http.StatusNotFound, main.Status, "%s", main.Body)
	require.Equal(t, "not_found", main.ErrorCode(t))
	res, err := http.Get("http://" + metricsAddr + "/api/v1/apps")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusNotFound, res.StatusCode, "the metrics listener serves /metrics only")
	res, err = http.Get("http://" + metricsAddr + "/debug/pprof/heap")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusNotFound, res.StatusCode, "no profiles without --pprof")
}

// serveListeners runs app's listeners until the test ends.
func serveListeners(t *testing.T, app *testenv.App) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// TestPprofOnTheMetricsListener: with Pprof, Go's profiles are served on the
// metrics listener to whoever may read /metrics there (here, the bearer of
// the metrics token), but not the command line, and never on the main
// listener.
func TestPprofOnTheMetricsListener(t *testing.T) {
	t.Parallel()
	const token = "pprof-metrics-token-0123"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	metricsAddr := ln.Addr().String()
	require.NoError(t, ln.Close())
	app := testenv.NewApp(t, func(c *server.Config) { c.MetricsListen, c.MetricsToken, c.Pprof = metricsAddr, token, true })
	serveListeners(t, app)
	get := func(path string, auth bool) (int, string) {
		req, err := http.NewRequest(http.MethodGet, "http://"+metricsAddr+path, nil)
		require.NoError(t, err)
		if auth {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	require.Eventually(t, func() bool { code, _ := get("/metrics", true); return code == http.StatusOK }, 5*time.Second, 10*time.Millisecond)

	code, body := get("/debug/pprof/goroutine?debug=1", false)
	require.Equal(t, http.StatusUnauthorized, code, "%s", body)
	code, body = get("/debug/pprof/goroutine?debug=1", true)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "goroutine profile:")
	code, body = get("/debug/pprof/profile?seconds=1", true)
	require.Equal(t, http.StatusOK, code)
	require.NotEmpty(t, body, "a CPU profile")
	code, _ = get("/debug/pprof/cmdline", true)
	require.Equal(t, http.StatusNotFound, code, "the command line may hold a secret")
	main := app.Do(t, http.MethodGet, "/debug/pprof/goroutine?debug=1", "", nil)
	require.NotContains(t, string(main.Body), "goroutine profile:", "never on the main listener")
}

// scrape parses /metrics (read from loopback).
func scrape(t *testing.T, app *testenv.App) map[string][]model.LabelSet {
	t.Helper()
	res := app.Do(t, http.MethodGet, "/metrics", "", nil)
	require.Equal(t, http.StatusOK, res.Status)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(res.Body)))
	require.NoError(t, err)
	out := map[string][]model.LabelSet{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			ls := model.LabelSet{}
			for _, l := range m.GetLabel() {
				ls[model.LabelName(l.GetName())] = model.LabelValue(l.GetValue())
			}
			out[name] = append(out[name], ls)
		}
	}
	return out
}

// TestHTTPMetricLabelsBounded: made-up methods and paths do not make series
// of their own: unknown methods are "other", unmatched routes "unmatched".
func TestHTTPMetricLabelsBounded(t *testing.T) {
	t.Parallel()
	app := testenv.NewApp(t, nil)
	tenant := app.NewTenant(t, tenancy.RoleOwner, nil)
	for range 20 {
		method := "M" + strings.ToUpper(strings.ReplaceAll(uuid.NewString()[:8], "-", ""))
		for _, path := range []string{"/api/v1/apps", "/" + uuid.NewString(), "/api/v1/" + uuid.NewString() + "/x", "/metrics"} {
			req, err := http.NewRequest(method, app.URL+path, nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+tenant.Token)
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			res.Body.Close()
			require.Less(t, res.StatusCode, 500, "%s %s", method, path)
		}
		app.Do(t, http.MethodGet, "/api/v1/"+uuid.NewString(), tenant.Token, nil)
		app.Do(t, http.MethodGet, "/api/v1/tables/"+uuid.NewString()+"/rows", tenant.Token, nil)
	}

	routes := map[string]bool{"unmatched": true}
	for _, r := range app.Handler().(*echo.Echo).Routes() {
		routes[r.Path] = true
	}
	methods := map[string]bool{}
	for _, ls := range scrape(t, app)["appdor_http_request_duration_seconds"] {
		methods[string(ls["method"])] = true
		require.True(t, routes[string(ls["route"])], "route label %q", ls["route"])
	}
	for m := range methods {
		require.Contains(t, []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other"}, m)
	}
	require.True(t, methods["other"])
}

// realmSeries lists the families that have a series labelled realm.
func realmSeries(t *testing.T, app *testenv.App, realm string) []string {
	t.Helper()
	var names []string
	for name, sets := range scrape(t, app) {
		for _, ls := range sets {
			if string(ls["realm"]) == realm {
				names = append(names, name)
				break
			}
		}
	}
	return names
}

// TestRealmSeriesForgotten: a realm that has sent no request for the idle
// setting loses its series on /metrics — the limiter's and the fairness
// controller's, counters included — while a realm at work keeps its own; a
// forgotten realm that comes back starts its series afresh.
func TestRealmSeriesForgotten(t *testing.T) {
	t.Parallel()
	app := testenv.NewApp(t, nil)
	quiet := app.NewTenant(t, tenancy.RoleOwner, nil)
	busy := app.NewTenant(t, tenancy.RoleOwner, nil)
	get := func(token string) {
		res := app.Do(t, http.MethodGet, "/api/v1/apps", token, nil)
		require.Equal(t, http.StatusOK, res.Status, "%s", res.Body)
	}
	get(quiet.Token)
	mark := time.Now()
	get(busy.Token)
	for _, tenant := range []testenv.Tenant{quiet, busy} {
		have := realmSeries(t, app, tenant.RealmID.String())
		for _, want := range []string{"appdor_limiter_decisions_total", "appdor_fairness_dispatched_total",
			"appdor_fairness_wait_seconds", "appdor_fairness_seats_in_use"} {
			require.Contains(t, have, want)
		}
	}

	// As a scrape would at mark + idle: quiet has been idle that long,
	// busy not quite.
	require.Equal(t, 1, app.ForgetIdleRealms(mark.Add(server.DefaultMetricsRealmIdle)))
	require.Empty(t, realmSeries(t, app, quiet.RealmID.String()), "the quiet realm is forgotten")
	require.Contains(t, realmSeries(t, app, busy.RealmID.String()), "appdor_limiter_decisions_total")
	require.Contains(t, realmSeries(t, app, busy.RealmID.String()), "appdor_fairness_dispatched_total")

	get(quiet.Token)
	require.Contains(t, realmSeries(t, app, quiet.RealmID.String()), "appdor_limiter_decisions_total", "back: counted afresh")
}
