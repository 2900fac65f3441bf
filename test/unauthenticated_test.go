package test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/limiter"
	"github.com/appdor/appdor/server"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// clientAddress is an address of the benchmarking range (198.18.0.0/15) for
// one test's requests: the per-address quota key lives in the Redis every
// test binary shares, and 127.0.0.1's allowance belongs to the other tests.
func clientAddress(t *testing.T) string {
	t.Helper()
	n, err := rand.Int(rand.Reader, big.NewInt(1<<17-2))
	require.NoError(t, err)
	v := n.Int64() + 1
	return fmt.Sprintf("198.%d.%d.%d", 18+v>>16, v>>8&0xff, v&0xff)
}

func bogusToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "apd_" + base64.RawURLEncoding.EncodeToString(b)
}

// request sends method path to app in process from addr, with a bearer
// token or a session cookie, so that each test has a client address of its
// own.
func request(t *testing.T, app *testenv.App, method, addr, path, token, session string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	req.RemoteAddr = addr + ":40000"
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if session != "" {
		req.AddCookie(&http.Cookie{Name: tenancy.SessionCookie, Value: session})
	}
	rec := httptest.NewRecorder()
	app.Handler().ServeHTTP(rec, req)
	return rec
}

func errorCode(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	return testenv.Response{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}.ErrorCode(t)
}

func acquires(app *testenv.App) int64 { return app.Pool().Stat().AcquireCount() }

// TestBogusTokenFloodIsRefusedPerAddress: made-up tokens from one address
// are looked up in PostgreSQL only up to the address's burst (and what it
// earns meanwhile), then refused 429 rate_limited with Retry-After before any
// database work; a header the client writes does not change whose allowance
// is spent; and a token the server knows keeps working from that address.
func TestBogusTokenFloodIsRefusedPerAddress(t *testing.T) {
	t.Parallel()
	app := testenv.NewApp(t, DefaultUnauthenticated)
	addr := clientAddress(t)
	tenant := app.NewTenant(t, tenancy.RoleOwner, nil)
	require.Equal(t, http.StatusOK, request(t, app, http.MethodGet, addr, "/api/v1/apps", tenant.Token, "").Code)

	const flood = 100
	before := acquires(app)
	start := time.Now()
	var unauthorized, refused int
	for i := range flood {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/apps", nil)
		req.RemoteAddr = addr + ":40000"
		req.Header.Set("Authorization", "Bearer "+bogusToken())
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i%250+1)) // not trusted: ignored
		rec := httptest.NewRecorder()
		app.Handler().ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusUnauthorized:
			unauthorized++
		case http.StatusTooManyRequests:
			refused++
			require.Equal(t, "rate_limited", errorCode(t, rec))
			require.NotEmpty(t, rec.Header().Get("Retry-After"))
		default:
			t.Fatalf("bogus token %d: status %d: %s", i, rec.Code, rec.Body)
		}
	}
	elapsed := time.Since(start)
	lookups := acquires(app) - before
	// The burst, what the rate earns over the flood, and one of slack.
	bound := int64(limiter.DefaultUnauthenticatedBurst + limiter.DefaultUnauthenticatedPerSecond*elapsed.Seconds() + 1)
	t.Logf("%d bogus tokens in %v: %d answered 401, %d refused 429; %d pool acquires (bound %d)",
		flood, elapsed.Round(time.Millisecond), unauthorized, refused, lookups, bound)
	require.Positive(t, refused)
	require.LessOrEqual(t, int64(unauthorized), bound)
	require.LessOrEqual(t, lookups, bound)

	// The known token is answered from the cache, never charged to the
	// address, while the address's made-up tokens are still refused.
	require.Equal(t, http.StatusTooManyRequests, request(t, app, http.MethodGet, addr, "/api/v1/apps", bogusToken(), "").Code)
	res := request(t, app, http.MethodGet, addr, "/api/v1/apps", tenant.Token, "")
	require.Equal(t, http.StatusOK, res.Code, "%s", res.Body)

	metrics := string(app.Do(t, http.MethodGet, "/metrics", "", nil).Body)
	require.Contains(t, metrics, `appdor_limiter_decisions_total{realm="",result="refused",scope="unauthenticated"}`)
}

// TestRepeatedBogusCredentialIsAnsweredFromMemory: a token or a session
// found unknown is answered 401 without PostgreSQL for a while, and is not
// charged to the address again.
func TestRepeatedBogusCredentialIsAnsweredFromMemory(t *testing.T) {
	t.Parallel()
	app := testenv.NewApp(t, DefaultUnauthenticated)
	addr := clientAddress(t)

	token := bogusToken()
	require.Equal(t, http.StatusUnauthorized, request(t, app, http.MethodGet, addr, "/api/v1/apps", token, "").Code)
	session := "aps_" + strings.TrimPrefix(bogusToken(), "apd_")
	require.Equal(t, http.StatusUnauthorized, request(t, app, http.MethodGet, addr, "/api/v1/me", "", session).Code)

	before := acquires(app)
	for range 100 { // more than the address's burst: none of it is charged
		res := request(t, app, http.MethodGet, addr, "/api/v1/apps", token, "")
		require.Equal(t, http.StatusUnauthorized, res.Code, "%s", res.Body)
		res = request(t, app, http.MethodGet, addr, "/api/v1/me", "", session)
		require.Equal(t, http.StatusUnauthorized, res.Code, "%s", res.Body)
	}
	require.Zero(t, acquires(app)-before, "pool acquires for 200 repeated bogus credentials")
}

// TestRevokedTokenIsRefusedAndANewOneWorks: the memory of unknown
// credentials neither keeps a revoked token alive nor hides a new one — a new
// token has a fresh random secret, which nobody could have sent before.
func TestRevokedTokenIsRefusedAndANewOneWorks(t *testing.T) {
	t.Parallel()
	app := testenv.NewApp(t, DefaultUnauthenticated)
	addr := clientAddress(t)
	tenant := app.NewTenant(t, tenancy.RoleOwner, nil)
	require.Equal(t, http.StatusOK, request(t, app, http.MethodGet, addr, "/api/v1/apps", tenant.Token, "").Code)

	_, err := app.Tenancy.RevokeToken(context.Background(), tenant.TokenID)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return request(t, app, http.MethodGet, addr, "/api/v1/apps", tenant.Token, "").Code == http.StatusUnauthorized
	}, 5*time.Second, 10*time.Millisecond)
	before := acquires(app)
	require.Equal(t, http.StatusUnauthorized, request(t, app, http.MethodGet, addr, "/api/v1/apps", tenant.Token, "").Code)
	require.Zero(t, acquires(app)-before, "a revoked token is remembered as unknown")

	_, secret, err := app.Tenancy.CreateToken(context.Background(), tenant.RealmID, tenant.Email, "after", nil)
	require.NoError(t, err)
	res := request(t, app, http.MethodGet, addr, "/api/v1/apps", secret, "")
	require.Equal(t, http.StatusOK, res.Code, "%s", res.Body)
}

// TestUnknownCredentialLookupsTakeASeat: the lookup of a credential nobody
// knows runs under the Gate, and the Gate's refusal is the answer (429
// concurrency_limited, with its Retry-After); a credential that authenticated
// lately is looked up without a seat.
func TestUnknownCredentialLookupsTakeASeat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The token is made elsewhere (another replica, a command): this
	// service has never seen it.
	elsewhere := tenancy.New(testenv.Pool(t))
	realm, err := elsewhere.CreateRealm(ctx, "seats for lookups")
	require.NoError(t, err)
	email := fmt.Sprintf("seat-%d@example.test", time.Now().UnixNano())
	_, err = elsewhere.CreateUser(ctx, realm.ID, email, "a long password", tenancy.RoleOwner)
	require.NoError(t, err)
	_, secret, err := elsewhere.CreateToken(ctx, realm.ID, email, "seat", nil)
	require.NoError(t, err)
	svc := tenancy.New(testenv.Pool(t))

	var seats, refuse atomic.Int64
	svc.SetGuard(tenancy.Guard{Gate: func(ctx context.Context) (func(), error) {
		if refuse.Load() == 1 {
			return nil, &appdor.Error{Code: appdor.EConcurrencyLimited, Message: "full", RetryAfter: 2 * time.Second}
		}
		seats.Add(1)
		return func() {}, nil
	}})

	_, err = svc.LookupToken(ctx, secret)
	require.NoError(t, err)
	_, err = svc.LookupToken(ctx, bogusToken())
	require.Equal(t, appdor.EUnauthorized, appdor.ErrorCode(err))
	require.EqualValues(t, 2, seats.Load(), "each unknown credential's lookup takes a seat")

	refuse.Store(1)
	_, err = svc.LookupToken(ctx, bogusToken())
	var ae *appdor.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, appdor.EConcurrencyLimited, ae.Code)
	require.Equal(t, 2*time.Second, ae.RetryAfter)
	// No token cache runs here: the known token is looked up again, without a seat.
	p, err := svc.LookupToken(ctx, secret)
	require.NoError(t, err)
	require.Equal(t, realm.ID, p.RealmID)
}

// DefaultUnauthenticated sets the server's ceiling on lookups of unknown
// credentials back to its defaults (testenv raises it for parallel tests).
func DefaultUnauthenticated(cfg *server.Config) {
	cfg.UnauthenticatedPerSecond, cfg.UnauthenticatedBurst = 0, 0
}
