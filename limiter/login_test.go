package limiter_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/limiter"
	"github.com/appdor/appdor/test/testenv"
)

// TestLoginCeilings: sign-in attempts get the address's allowance and the
// account's, on a fake clock; the account's holds across addresses; an
// attempt the address refuses spends nothing of the account's; refusals are
// rate_limited with the wait, counted under their scope, and an episode is
// logged once per scope with the address and the account's key, never the
// email.
func TestLoginCeilings(t *testing.T) {
	t.Parallel()
	opt, err := rueidis.ParseURL(testenv.RedisURL(t))
	require.NoError(t, err)
	opt.DisableCache = true
	client, err := rueidis.NewClient(opt)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	lim := limiter.New(limiter.Config{Client: client, Registerer: reg, Log: slog.New(slog.NewJSONHandler(&logs, nil)),
		LoginAddressPerMinute: 6, LoginAccountPerMinute: 3})
	t.Cleanup(lim.Close)
	now := time.Now().UnixMicro()
	lim.SetClock(func() int64 { return now })
	ctx := context.Background()
	// Addresses of the benchmarking range and accounts no other test uses:
	// the keys are in the shared Redis.
	addr := func() string { return fmt.Sprintf("198.18.%d.%d", rand.N(256), rand.N(254)+1) }
	account := func() string { return uuid.NewString() + "@example.test" }

	t.Run("per account, across addresses", func(t *testing.T) {
		ann := account()
		for i := range 3 {
			require.True(t, lim.AllowLogin(ctx, addr(), ann).Allowed, "attempt %d", i)
		}
		d := lim.AllowLogin(ctx, addr(), ann)
		require.False(t, d.Allowed)
		require.Equal(t, limiter.ScopeLoginAccount, d.Scope)
		require.Equal(t, 20*time.Second, d.RetryAfter, "3 a minute: one every 20 s")
		err := lim.ScreenLogin(ctx, addr(), ann)
		var ae *appdor.Error
		require.ErrorAs(t, err, &ae)
		require.Equal(t, appdor.ERateLimited, ae.Code)
		require.Contains(t, ae.Message, "this account")
		require.Equal(t, 20*time.Second, ae.RetryAfter)
		require.True(t, lim.AllowLogin(ctx, addr(), account()).Allowed, "another account has its own allowance")
	})

	t.Run("per address, whatever the account", func(t *testing.T) {
		a := addr()
		bob := account()
		for i := range 6 {
			require.True(t, lim.AllowLogin(ctx, a, account()).Allowed, "attempt %d", i)
		}
		d := lim.AllowLogin(ctx, a, bob)
		require.False(t, d.Allowed)
		require.Equal(t, limiter.ScopeLoginAddress, d.Scope)
		require.Equal(t, 10*time.Second, d.RetryAfter)
		for range 5 {
			require.False(t, lim.AllowLogin(ctx, a, bob).Allowed)
		}
		// Refused at the address, bob spent nothing of his allowance.
		for i := range 3 {
			require.True(t, lim.AllowLogin(ctx, addr(), bob).Allowed, "bob's attempt %d from elsewhere", i)
		}
		now += (10 * time.Second).Microseconds()
		require.True(t, lim.AllowLogin(ctx, a, account()).Allowed, "one earned per 10 s")
	})

	out := logs.String()
	require.Equal(t, 2, strings.Count(out, "rate_limited: a refusal episode begins"), out)
	require.Contains(t, out, `"flag":"login-account-attempts-per-minute"`)
	require.Contains(t, out, `"flag":"login-address-attempts-per-minute"`)
	require.Contains(t, out, `"account_key":"`)
	require.NotContains(t, out, "@example.test", "no email in the log")
	require.Equal(t, 2.0, decisions(t, reg, uuid.Nil, "login_account", "refused"))
	require.Equal(t, 6.0, decisions(t, reg, uuid.Nil, "login_address", "refused"))
}

func TestLoginKeys(t *testing.T) {
	t.Parallel()
	require.Equal(t, "appdor:quota:login:addr:{192.0.2.7}", limiter.LoginAddressKey("::ffff:192.0.2.7"))
	require.Equal(t, "appdor:quota:login:addr:{2001:db8:1:2::/64}", limiter.LoginAddressKey("2001:db8:1:2:aaaa::1"))
	k := limiter.LoginAccountKey("ann@example.test")
	require.True(t, strings.HasPrefix(k, "appdor:quota:login:account:{"), k)
	require.NotContains(t, k, "ann")
	require.NotEqual(t, k, limiter.LoginAccountKey("bob@example.test"))
}

func TestLoginCeilingsOff(t *testing.T) {
	t.Parallel()
	lim := limiter.New(limiter.Config{}) // no Redis is asked when off
	t.Cleanup(lim.Close)
	for range 100 {
		require.NoError(t, lim.ScreenLogin(context.Background(), "192.0.2.1", "ann@example.test"))
	}
}
