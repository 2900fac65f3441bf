package test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/limiter"
	"github.com/appdor/appdor/server"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// DefaultLoginCeilings gives an app the sign-in ceilings' defaults (the test
// configuration raises them: parallel tests sign in from 127.0.0.1).
func DefaultLoginCeilings(cfg *server.Config) {
	cfg.LoginAddressPerMinute, cfg.LoginAccountPerMinute = 0, 0
}

// attempt signs in to app in process from addr.
func attempt(t *testing.T, app *testenv.App, addr, email, password string) *httptest.ResponseRecorder {
	t.Helper()
	body, err := json.Marshal(map[string]string{"email": email, "password": password})
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodPost, "/api/v1/auth/login", strings.NewReader(string(body)))
	req.RemoteAddr = addr + ":40000"
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	app.Handler().ServeHTTP(rec, req)
	return rec
}

func requireSignInRateLimited(t *testing.T, rec *httptest.ResponseRecorder, msg string) {
	t.Helper()
	require.Equal(t, http.StatusTooManyRequests, rec.Code, "%s: %s", msg, rec.Body)
	require.Equal(t, "rate_limited", errorCode(t, rec), msg)
	require.NotEmpty(t, rec.Header().Get("Retry-After"), msg)
}

// TestSignInGuessingIsRefused: wrong passwords for one account from one
// address are checked up to the account's allowance, then refused 429
// rate_limited with Retry-After before any password check or database work,
// the right password included; the same address may still sign in to
// another account, and the refusals are on /metrics.
func TestSignInGuessingIsRefused(t *testing.T) {
	t.Parallel()
	app := testenv.NewApp(t, DefaultLoginCeilings)
	ann := app.NewTenant(t, tenancy.RoleOwner, nil)
	bob := app.NewTenant(t, tenancy.RoleOwner, nil)
	addr := clientAddress(t)
	wrong := func() float64 { return metric(t, app, "appdor_logins_total", map[string]string{"result": "wrong"}) }

	for i := range limiter.DefaultLoginAccountPerMinute {
		rec := attempt(t, app, addr, ann.Email, "wrong horse")
		require.Equal(t, http.StatusUnauthorized, rec.Code, "guess %d: %s", i, rec.Body)
	}
	checked := wrong()
	require.EqualValues(t, limiter.DefaultLoginAccountPerMinute, checked)
	before := acquires(app)
	// 15 more, and two below: within the address's allowance of 30, so the
	// account's ceiling is the one that refuses.
	for range 15 {
		requireSignInRateLimited(t, attempt(t, app, addr, ann.Email, "wrong horse"), "guess after the allowance")
	}
	// Another spelling of the same account is the same account.
	requireSignInRateLimited(t, attempt(t, app, addr, "  "+strings.ToUpper(ann.Email)+" ", "wrong horse"), "the email in capitals")
	requireSignInRateLimited(t, attempt(t, app, addr, ann.Email, ann.Password), "the right password, too")
	require.Equal(t, checked, wrong(), "no password was checked for a refused attempt")
	require.Equal(t, before, acquires(app), "no database work for a refused attempt")
	require.EqualValues(t, 17, metric(t, app, "appdor_logins_total", map[string]string{"result": "rate_limited"}))
	require.EqualValues(t, 17, metric(t, app, "appdor_limiter_decisions_total",
		map[string]string{"scope": "login_account", "result": "refused"}))

	rec := attempt(t, app, addr, bob.Email, bob.Password)
	require.Equal(t, http.StatusOK, rec.Code, "another account from the same address: %s", rec.Body)
}

// TestSignInAccountCeilingHoldsAcrossAddresses: guesses at one account from
// as many addresses as it takes get the account's allowance, no more.
func TestSignInAccountCeilingHoldsAcrossAddresses(t *testing.T) {
	t.Parallel()
	app := testenv.NewApp(t, DefaultLoginCeilings)
	ann := app.NewTenant(t, tenancy.RoleOwner, nil)
	for i := range limiter.DefaultLoginAccountPerMinute {
		rec := attempt(t, app, clientAddress(t), ann.Email, "wrong horse")
		require.Equal(t, http.StatusUnauthorized, rec.Code, "guess %d: %s", i, rec.Body)
	}
	for range 5 {
		requireSignInRateLimited(t, attempt(t, app, clientAddress(t), ann.Email, "wrong horse"), "a guess from a fresh address")
	}
	requireSignInRateLimited(t, attempt(t, app, clientAddress(t), ann.Email, ann.Password), "the right password from a fresh address")
}

// TestSignInFloodLeavesOthersIn: while one address floods the sign-in with
// guesses at one account and made-up accounts, with a single password check
// at a time, another person signs in from another address, again and again:
// the flood is refused by the ceilings before it takes the check.
func TestSignInFloodLeavesOthersIn(t *testing.T) {
	t.Parallel()
	app := testenv.NewApp(t, func(cfg *server.Config) {
		DefaultLoginCeilings(cfg)
		cfg.LoginConcurrency = 1
	})
	ann := app.NewTenant(t, tenancy.RoleOwner, nil)
	bob := app.NewTenant(t, tenancy.RoleOwner, nil)
	attacker, bobAddr := clientAddress(t), clientAddress(t)

	var (
		stop                      atomic.Bool
		wg                        sync.WaitGroup
		checked, refused, limited atomic.Int64
	)
	t.Cleanup(func() { stop.Store(true); wg.Wait() }) // before the app stops
	for w := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				email := ann.Email
				if (w+i)%2 == 1 {
					email = uuid.NewString()[:12] + "@example.test"
				}
				rec := attempt(t, app, attacker, email, "wrong horse")
				switch {
				case rec.Code == http.StatusUnauthorized:
					checked.Add(1)
				case rec.Code == http.StatusTooManyRequests && errorCode(t, rec) == "rate_limited":
					refused.Add(1)
					time.Sleep(20 * time.Millisecond) // cheap to refuse, yet the tests beside this one need the cores
				case rec.Code == http.StatusTooManyRequests:
					limited.Add(1) // concurrency_limited: no check was free
				default:
					t.Errorf("flood: status %d: %s", rec.Code, rec.Body)
					return
				}
			}
		}()
	}
	// Let the flood spend what allowance it has (its checks take the one
	// slot meanwhile), until it is refused outright, or for ten seconds.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		n := refused.Load()
		time.Sleep(200 * time.Millisecond)
		if refused.Load()-n > 50 {
			break
		}
	}
	for i := range 5 {
		rec := attempt(t, app, bobAddr, bob.Email, bob.Password)
		require.Equal(t, http.StatusOK, rec.Code, "bob's sign-in %d during the flood: %s", i, rec.Body)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("flood: %d checked (401), %d rate_limited, %d concurrency_limited", checked.Load(), refused.Load(), limited.Load())
	require.LessOrEqual(t, checked.Load(), int64(limiter.DefaultLoginAddressPerMinute+2),
		"the attacker's address got its allowance (and what it earned meanwhile), no more")
}
