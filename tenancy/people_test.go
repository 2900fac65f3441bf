package tenancy

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor"
)

// TestLoginConcurrencyRefuses: with every password check busy for the whole
// wait, a sign-in is refused with concurrency_limited and a Retry-After, is
// counted, and never reaches the database (the Service here has none).
func TestLoginConcurrencyRefuses(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	p := NewPeople(New(nil), PeopleConfig{LoginConcurrency: 1, LoginWait: time.Millisecond, Registerer: reg})
	p.slots <- struct{}{} // the one check is busy

	e := echo.New()
	req := httptest.NewRequest(http.MethodPost, "/api/v1/auth/login", strings.NewReader(`{"email":"a@b.c","password":"whatever1"}`))
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	err := p.login(e.NewContext(req, httptest.NewRecorder()))
	require.Equal(t, appdor.EConcurrencyLimited, appdor.ErrorCode(err))
	var ae *appdor.Error
	require.ErrorAs(t, err, &ae)
	require.Positive(t, ae.RetryAfter)
	require.Equal(t, 1.0, counterValue(t, p.refused))
	require.Equal(t, 1.0, counterValue(t, p.logins.WithLabelValues("refused")))
}

// TestLoginScreenComesFirst: an attempt the screen refuses is answered with
// the screen's error before it waits for a password check (here every check
// is busy, and the wait is an hour), and is counted as rate_limited; the
// screen sees the client's address and the normalised email.
func TestLoginScreenComesFirst(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	var gotAddr, gotAccount string
	refusal := &appdor.Error{Code: appdor.ERateLimited, Message: "slow down", RetryAfter: 6 * time.Second}
	p := NewPeople(New(nil), PeopleConfig{LoginConcurrency: 1, LoginWait: time.Hour, Registerer: reg,
		Screen: func(_ context.Context, addr, account string) error {
			gotAddr, gotAccount = addr, account
			return refusal
		}})
	p.slots <- struct{}{} // the one check is busy

	e := echo.New()
	req := httptest.NewRequest(http.MethodPost, "/api/v1/auth/login", strings.NewReader(`{"email":"  Ann@Example.TEST ","password":"whatever1"}`))
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	req.RemoteAddr = "192.0.2.44:5000"
	err := p.login(e.NewContext(req, httptest.NewRecorder()))
	require.Same(t, refusal, err)
	require.Equal(t, "192.0.2.44", gotAddr)
	require.Equal(t, "ann@example.test", gotAccount)
	require.Equal(t, 1.0, counterValue(t, p.logins.WithLabelValues("rate_limited")))
	require.Zero(t, counterValue(t, p.refused))
}

func TestLoginConcurrencyDefault(t *testing.T) {
	t.Parallel()
	p := NewPeople(New(nil), PeopleConfig{})
	require.GreaterOrEqual(t, cap(p.slots), 1)
	require.Equal(t, DefaultLoginWait, p.wait)
}

func TestCSRFToken(t *testing.T) {
	t.Parallel()
	a, b := "aps_one", "aps_two"
	require.True(t, CheckCSRF(a, CSRFToken(a)))
	require.False(t, CheckCSRF(a, CSRFToken(b)))
	require.False(t, CheckCSRF(a, ""))
	require.NotEqual(t, string(hashSecret(a)), CSRFToken(a))
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

// TestSessionCookiesSecureOverTLS: over TLS both cookies are Secure; the
// session's is HttpOnly, the CSRF token's is readable by the page.
func TestSessionCookiesSecureOverTLS(t *testing.T) {
	t.Parallel()
	e := echo.New()
	for _, tlsOn := range []bool{false, true} {
		req := httptest.NewRequest(http.MethodPost, "/api/v1/auth/login", nil)
		if tlsOn {
			req.TLS = &tls.ConnectionState{}
		}
		rec := httptest.NewRecorder()
		SetSessionCookies(e.NewContext(req, rec), Session{Secret: "aps_x", CSRF: CSRFToken("aps_x"), ExpiresAt: time.Now().Add(SessionTTL)})
		cookies := (&http.Response{Header: rec.Header()}).Cookies()
		require.Len(t, cookies, 2)
		for _, ck := range cookies {
			require.Equal(t, tlsOn, ck.Secure, ck.Name)
			require.Equal(t, ck.Name == SessionCookie, ck.HttpOnly, ck.Name)
			require.Equal(t, http.SameSiteLaxMode, ck.SameSite)
			require.Equal(t, "/", ck.Path)
		}
	}
}
