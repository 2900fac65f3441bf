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

// TestAddressCeiling: a client address gets its burst of lookups of unknown
// credentials, then one per emission interval; a refusal is rate_limited
// with the wait; an episode is logged once, with the address and without a
// label per address on the metric.
func TestAddressCeiling(t *testing.T) {
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
		UnauthenticatedPerSecond: 20, UnauthenticatedBurst: 40})
	t.Cleanup(lim.Close)
	now := time.Now().UnixMicro()
	lim.SetClock(func() int64 { return now })
	ctx := context.Background()
	// An address of the benchmarking range no other test uses: the key is in
	// the shared Redis.
	addr := fmt.Sprintf("198.18.%d.%d", rand.N(256), rand.N(254)+1)

	for i := range 40 {
		require.True(t, lim.AllowAddress(ctx, addr).Allowed, "lookup %d of the burst", i)
	}
	d := lim.AllowAddress(ctx, addr)
	require.False(t, d.Allowed)
	require.Equal(t, limiter.ScopeUnauthenticated, d.Scope)
	require.Equal(t, 50*time.Millisecond, d.RetryAfter)
	err = lim.ScreenAddress(ctx, addr)
	var ae *appdor.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, appdor.ERateLimited, ae.Code)
	require.Equal(t, 50*time.Millisecond, ae.RetryAfter)

	now += (50 * time.Millisecond).Microseconds()
	require.True(t, lim.AllowAddress(ctx, addr).Allowed, "one earned per 50 ms")
	require.False(t, lim.AllowAddress(ctx, addr).Allowed)
	require.True(t, lim.AllowAddress(ctx, "198.19.255.254").Allowed, "another address has its own allowance")

	require.Equal(t, 1, strings.Count(logs.String(), "rate_limited: a refusal episode begins"), logs.String())
	require.Contains(t, logs.String(), `"address":"`+addr+`"`)
	require.Contains(t, logs.String(), `"flag":"unauthenticated-requests-per-second"`)
	require.Equal(t, 3.0, decisions(t, reg, uuid.Nil, "unauthenticated", "refused"))
}

func TestAddressKey(t *testing.T) {
	t.Parallel()
	require.Equal(t, "appdor:quota:addr:{192.0.2.7}", limiter.AddressKey("192.0.2.7"))
	require.Equal(t, "appdor:quota:addr:{192.0.2.7}", limiter.AddressKey("::ffff:192.0.2.7"))
	// An IPv6 client is its /64: one subscriber has the whole block.
	require.Equal(t, "appdor:quota:addr:{2001:db8:1:2::/64}", limiter.AddressKey("2001:db8:1:2:aaaa::1"))
	require.Equal(t, limiter.AddressKey("2001:db8:1:2::5"), limiter.AddressKey("2001:db8:1:2:ffff:ffff:ffff:ffff"))
}

func TestAddressCeilingOff(t *testing.T) {
	t.Parallel()
	lim := limiter.New(limiter.Config{}) // no Redis is asked when off
	t.Cleanup(lim.Close)
	for range 100 {
		require.NoError(t, lim.ScreenAddress(context.Background(), "192.0.2.1"))
	}
}
