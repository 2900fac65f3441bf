package server_test

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/server"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// inProcess sends a request to app's handler as if from remote (host:port),
// over TLS when tlsOn, with the given headers.
func inProcess(t *testing.T, app *testenv.App, method, path, remote string, tlsOn bool, body string, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.RemoteAddr = remote
	if tlsOn {
		req.TLS = &tls.ConnectionState{}
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	app.Handler().ServeHTTP(rec, req)
	return rec
}

func signInBody(tenant testenv.Tenant) string {
	return `{"email":"` + tenant.Email + `","password":"` + tenant.Password + `"}`
}

// TestSecureCookieFollowsOnlyTrustedProxies: a sign-in over plain HTTP that
// claims X-Forwarded-Proto: https gets cookies without the Secure flag unless
// its direct peer is a configured trusted proxy — a private-network peer is
// not trusted for being private.
func TestSecureCookieFollowsOnlyTrustedProxies(t *testing.T) {
	t.Parallel()
	secure := func(rec *httptest.ResponseRecorder) bool {
		t.Helper()
		require.Equal(t, http.StatusOK, rec.Code, "%s", rec.Body)
		cookies := (&http.Response{Header: rec.Header()}).Cookies()
		require.Len(t, cookies, 2)
		require.Equal(t, cookies[0].Secure, cookies[1].Secure)
		return cookies[0].Secure
	}
	spoof := map[string]string{"X-Forwarded-Proto": "https"}

	plain := testenv.NewApp(t, nil)
	tenant := plain.NewTenant(t, tenancy.RoleOwner, nil)
	for _, peer := range []string{"10.1.2.3:5000", "127.0.0.1:5000", "203.0.113.9:5000"} {
		require.False(t, secure(inProcess(t, plain, http.MethodPost, "/api/v1/auth/login", peer, false, signInBody(tenant), spoof)),
			"no trusted proxy: %s chose the Secure flag", peer)
	}
	require.True(t, secure(inProcess(t, plain, http.MethodPost, "/api/v1/auth/login", "203.0.113.9:5000", true, signInBody(tenant), nil)),
		"over TLS the cookies are Secure")

	_, proxies, err := net.ParseCIDR("10.0.0.0/8")
	require.NoError(t, err)
	proxied := testenv.NewApp(t, func(c *server.Config) { c.TrustedProxies = []*net.IPNet{proxies} })
	tenant = proxied.NewTenant(t, tenancy.RoleOwner, nil)
	require.True(t, secure(inProcess(t, proxied, http.MethodPost, "/api/v1/auth/login", "10.1.2.3:5000", false, signInBody(tenant), spoof)),
		"a trusted proxy names the scheme")
	require.False(t, secure(inProcess(t, proxied, http.MethodPost, "/api/v1/auth/login", "192.168.1.5:5000", false, signInBody(tenant), spoof)),
		"a peer outside the trusted proxies does not")
}

// TestHSTS: with HSTS on, HTTPS responses carry Strict-Transport-Security
// (and plain HTTP ones do not, nor a spoofed https); off by default.
func TestHSTS(t *testing.T) {
	t.Parallel()
	const peer = "203.0.113.10:5000"
	off := testenv.SharedApp(t)
	require.Empty(t, inProcess(t, off, http.MethodGet, "/healthz", peer, true, "", nil).Header().Get("Strict-Transport-Security"))

	on := testenv.NewApp(t, func(c *server.Config) { c.HSTS = true })
	require.Equal(t, "max-age=31536000", inProcess(t, on, http.MethodGet, "/healthz", peer, true, "", nil).Header().Get("Strict-Transport-Security"))
	require.Equal(t, "max-age=31536000", inProcess(t, on, http.MethodGet, "/api/v1/nope", peer, true, "", nil).Header().Get("Strict-Transport-Security"),
		"errors too")
	require.Empty(t, inProcess(t, on, http.MethodGet, "/healthz", peer, false, "", nil).Header().Get("Strict-Transport-Security"))
	require.Empty(t, inProcess(t, on, http.MethodGet, "/healthz", peer, false, "", map[string]string{"X-Forwarded-Proto": "https"}).
		Header().Get("Strict-Transport-Security"))
}

// TestNoSniff: API answers, errors included, say X-Content-Type-Options:
// nosniff.
func TestNoSniff(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	tenant := app.NewTenant(t, tenancy.RoleOwner, nil)
	for _, res := range []testenv.Response{
		app.Do(t, http.MethodGet, "/api/v1/apps", tenant.Token, nil),
		app.Do(t, http.MethodGet, "/api/v1/apps", "", nil),
		app.Do(t, http.MethodGet, "/api/v1/no-such-route", "", nil),
		app.Do(t, http.MethodPost, "/api/v1/auth/login", "", "{"),
		app.Do(t, http.MethodGet, "/api/v1/openapi.json", "", nil),
	} {
		require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"), "status %d: %s", res.Status, res.Body)
	}
}

// TestRequestIDIsBoundedAndSanitised: a client's X-Request-Id is echoed when
// it is short and plain; otherwise it is replaced by a fresh one.
func TestRequestIDIsBoundedAndSanitised(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	id := func(sent string) string {
		rec := inProcess(t, app, http.MethodGet, "/healthz", "203.0.113.11:5000", false, "", map[string]string{"X-Request-Id": sent})
		got := rec.Header().Get("X-Request-Id")
		require.NotEmpty(t, got)
		return got
	}
	for _, ok := range []string{"abc-123", "0f8fad5b-d9cb-469f-a165-70867728950e", "job_7.retry:2", strings.Repeat("a", 64)} {
		require.Equal(t, ok, id(ok))
	}
	for _, bad := range []string{
		strings.Repeat("a", 65),
		strings.Repeat("x", 5000),
		`a" level=ERROR msg="forged`,
		"a\tb",
		"caf\u00e9",
		"a b",
		"{}",
	} {
		got := id(bad)
		require.NotEqual(t, bad, got)
		require.LessOrEqual(t, len(got), 64)
		require.Regexp(t, `^[A-Za-z0-9]+$`, got, "a fresh id")
	}
}
