package limiter_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/limiter"
	"github.com/appdor/appdor/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// step fires n requests at the instant at (from the scenario's start) and
// expects allowed of them to pass; retry is the last refusal's wait (0: none
// refused), remaining what the last allowed request left (-1: not checked).
type step struct {
	at        time.Duration
	n         int
	allowed   int
	retry     time.Duration
	remaining int
}

type scenario struct {
	name  string
	limit int // per minute
	steps []step
}

const us = time.Microsecond

var scenarios = []scenario{
	{"burst: a whole minute at once, then nothing", 60, []step{
		{0, 61, 60, time.Second, 0},
	}},
	{"steady rate: one a second after the burst", 60, []step{
		{0, 60, 60, 0, 0},
		{time.Second, 2, 1, time.Second, 0},
		{1500 * time.Millisecond, 1, 0, 500 * time.Millisecond, -1},
		{2 * time.Second, 1, 1, 0, 0},
		{2 * time.Second, 1, 0, time.Second, -1},
	}},
	{"retry after is exact, in µs, and rounds up to whole seconds", 7, []step{
		{0, 8, 7, 8571428 * us, 0},
		{8571427 * us, 1, 0, 1 * us, -1},
		{8571428 * us, 1, 1, 0, 0},
	}},
	{"partial recovery: half a minute earns half the burst", 10, []step{
		{0, 10, 10, 0, 0},
		{30 * time.Second, 6, 5, 6 * time.Second, 0},
	}},
	{"an idle key expires and a fresh burst follows", 60, []step{
		{0, 60, 60, 0, 0},
		{time.Minute, 1, 1, 0, 59},
		{time.Minute, 60, 59, time.Second, 0},
	}},
	{"a ceiling of one", 1, []step{
		{0, 2, 1, time.Minute, 0},
		{59 * time.Second, 1, 0, time.Second, -1},
		{time.Minute, 1, 1, 0, 0},
	}},
}

// decider is one request at a fake instant (µs) against a fresh key per
// scenario.
type decider func(now int64, limit int) (allowed bool, retry time.Duration, remaining int)

func run(t *testing.T, sc scenario, base int64, decide decider) {
	t.Helper()
	for i, st := range sc.steps {
		now := base + st.at.Microseconds()
		allowed, lastRetry, lastRemaining := 0, time.Duration(0), -1
		for range st.n {
			ok, retry, remaining := decide(now, sc.limit)
			if ok {
				allowed++
				lastRemaining = remaining
			} else {
				lastRetry = retry
				require.GreaterOrEqual(t, limiter.CeilSeconds(retry), int64(1), "Retry-After is never 0")
			}
		}
		require.Equal(t, st.allowed, allowed, "step %d: allowed", i)
		require.Equal(t, st.retry, lastRetry, "step %d: retry after", i)
		if st.remaining >= 0 {
			require.Equal(t, st.remaining, lastRemaining, "step %d: remaining", i)
		}
	}
}

// TestGCRAFakeClock runs the scenarios through the Go arithmetic.
func TestGCRAFakeClock(t *testing.T) {
	t.Parallel()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			m := limiter.NewModel()
			run(t, sc, 1_000_000_000, func(now int64, limit int) (bool, time.Duration, int) {
				ok, retry, remaining, _ := m.Decide("k", now, limit)
				return ok, time.Duration(retry) * us, int(remaining)
			})
			// Once the last tat has passed, the key is gone.
			require.Zero(t, m.Keys(1_000_000_000+2*time.Minute.Microseconds()))
		})
	}
}

func TestRetryAfterRoundsUp(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]int64{
		us: 1, time.Millisecond: 1, 999999 * us: 1, time.Second: 1, time.Second + us: 2, 8571428 * us: 9, time.Minute: 60,
	} {
		require.Equal(t, want, limiter.CeilSeconds(d), "%v", d)
	}
}

type fixture struct {
	client rueidis.Client
	lim    *limiter.Limiter
	reg    *prometheus.Registry
	now    int64 // the fake clock, µs
}

func setup(t testing.TB) *fixture {
	t.Helper()
	opt, err := rueidis.ParseURL(testenv.RedisURL(t))
	require.NoError(t, err)
	opt.DisableCache = true
	client, err := rueidis.NewClient(opt)
	require.NoError(t, err)
	f := &fixture{client: client, reg: prometheus.NewRegistry(), now: time.Now().UnixMicro()}
	f.lim = limiter.New(limiter.Config{Client: client, Registerer: f.reg})
	t.Cleanup(func() {
		f.lim.Close()
		client.Close()
	})
	return f
}

func (f *fixture) clock() { f.lim.SetClock(func() int64 { return f.now }) }

// TestGCRAScript runs the same scenarios through the Lua script in the real
// Redis, on a fake clock passed to the script.
func TestGCRAScript(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.clock()
	ctx := context.Background()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			realm := uuid.New()
			run(t, sc, f.now, func(now int64, limit int) (bool, time.Duration, int) {
				f.now = now
				d := f.lim.Allow(ctx, limiter.Subject{Realm: realm, RealmLimit: limit})
				require.NoError(t, d.Err)
				require.Equal(t, limiter.ScopeRealm, d.Scope)
				require.Equal(t, limit, d.Limit)
				return d.Allowed, d.RetryAfter, d.Remaining
			})
		})
	}
}

// TestKeysExpireWhenIdle: a key lives exactly as long as its tat is ahead,
// and then Redis drops it.
func TestKeysExpireWhenIdle(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	realm, token := uuid.New(), uuid.New()
	for range 60 {
		require.True(t, f.lim.Allow(ctx, limiter.Subject{Realm: realm, Token: token, TokenLimit: 60, RealmLimit: 6000}).Allowed)
	}
	ttl, err := f.client.Do(ctx, f.client.B().Pttl().Key(limiter.TokenKey(realm, token)).Build()).AsInt64()
	require.NoError(t, err)
	require.InDelta(t, 60_000, ttl, 1_000, "the token key lives until its tat: a minute after 60 requests")
	ttl, err = f.client.Do(ctx, f.client.B().Pttl().Key(limiter.RealmKey(realm)).Build()).AsInt64()
	require.NoError(t, err)
	require.InDelta(t, 600, ttl, 100, "the realm key: 60 requests of a 6000/minute ceiling")

	// A ceiling of 60,000/minute charges 1 ms a request: the key is gone at once.
	quick := uuid.New()
	require.True(t, f.lim.Allow(ctx, limiter.Subject{Realm: quick, RealmLimit: 60_000}).Allowed)
	require.Eventually(t, func() bool {
		n, err := f.client.Do(ctx, f.client.B().Exists().Key(limiter.RealmKey(quick)).Build()).AsInt64()
		return err == nil && n == 0
	}, 5*time.Second, 5*time.Millisecond)
}

// TestTwoCeilings: a request passes only when both its token's and its
// realm's ceilings allow it, and a refusal by one charges neither.
func TestTwoCeilings(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.clock()
	ctx := context.Background()

	t.Run("the token refuses; the realm is not charged", func(t *testing.T) {
		realm, a, b := uuid.New(), uuid.New(), uuid.New()
		for i := range 3 {
			d := f.lim.Allow(ctx, limiter.Subject{Realm: realm, Token: a, TokenLimit: 2, RealmLimit: 100})
			require.Equal(t, i < 2, d.Allowed)
			require.Equal(t, limiter.ScopeToken, d.Scope, "the tighter ceiling is reported")
			require.Equal(t, 2, d.Limit)
		}
		// Another token of the realm is untouched by a's ceiling.
		for range 2 {
			d := f.lim.Allow(ctx, limiter.Subject{Realm: realm, Token: b, TokenLimit: 2, RealmLimit: 100})
			require.True(t, d.Allowed)
		}
		d := f.lim.Allow(ctx, limiter.Subject{Realm: realm, RealmLimit: 100})
		require.True(t, d.Allowed)
		require.Equal(t, 100-5, d.Remaining, "four allowed before and this one; the refusal cost nothing")
	})

	t.Run("the realm refuses; the token is not charged", func(t *testing.T) {
		realm, a := uuid.New(), uuid.New()
		for i := range 4 {
			d := f.lim.Allow(ctx, limiter.Subject{Realm: realm, Token: a, TokenLimit: 10, RealmLimit: 3})
			require.Equal(t, i < 3, d.Allowed)
			require.Equal(t, limiter.ScopeRealm, d.Scope)
		}
		tat, err := f.client.Do(ctx, f.client.B().Hget().Key(limiter.TokenKey(realm, a)).Field("t").Build()).AsInt64()
		require.NoError(t, err)
		require.Equal(t, f.now+3*6_000_000, tat, "three requests of 6 s each charged to the token")
	})

	t.Run("another realm's token is untouched", func(t *testing.T) {
		token := uuid.New()
		one, other := uuid.New(), uuid.New()
		require.True(t, f.lim.Allow(ctx, limiter.Subject{Realm: one, Token: token, TokenLimit: 1}).Allowed)
		require.False(t, f.lim.Allow(ctx, limiter.Subject{Realm: one, Token: token, TokenLimit: 1}).Allowed)
		require.True(t, f.lim.Allow(ctx, limiter.Subject{Realm: other, Token: token, TokenLimit: 1}).Allowed)
	})
}

// TestEpisode: the first refusal opens an episode and the next ones do not,
// even when the client keeps hammering and earns a request now and then;
// the episode ends when the key is whole again (its full burst back).
func TestEpisode(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.clock()
	ctx := context.Background()
	s := limiter.Subject{Realm: uuid.New(), Token: uuid.New(), TokenLimit: 60} // one a second after the burst
	start := f.now
	var allowed, refused, episodes int
	hammer := func(d time.Duration) {
		for end := f.now + d.Microseconds(); f.now < end; f.now += (100 * time.Millisecond).Microseconds() {
			for range 5 {
				d := f.lim.Allow(ctx, s)
				if d.Allowed {
					allowed++
					continue
				}
				refused++
				if d.FirstRefusal {
					episodes++
				}
			}
		}
	}
	hammer(10 * time.Second) // the burst, then ten emission intervals of hammering
	require.Equal(t, 60+9, allowed, "the burst, then one earned per emission interval")
	require.Equal(t, 500-69, refused)
	require.Equal(t, 1, episodes, "one episode however many emission intervals it spans")

	// At one instant: n requests; how many passed, how many episodes began.
	at := func(n int) (passed, began int) {
		for range n {
			d := f.lim.Allow(ctx, s)
			switch {
			case d.Allowed:
				passed++
			case d.FirstRefusal:
				began++
			}
		}
		return passed, began
	}
	// The last allowance (at 9 s) left the key's tat at 69 s. At 68 s the
	// key is not whole: 59 requests pass, and the refusal after them is
	// still the same episode.
	f.now = start + (68 * time.Second).Microseconds()
	passed, began := at(60)
	require.Equal(t, 59, passed)
	require.Zero(t, began, "allowances while the key is not whole do not end the episode")

	// Once it is whole again, a fresh burst, and the next refusal opens a
	// new episode.
	f.now += (2 * time.Minute).Microseconds()
	passed, began = at(62)
	require.Equal(t, 60, passed)
	require.Equal(t, 1, began, "the key was whole in between: a new episode")
}

// decisions reads appdor_limiter_decisions_total for one realm, scope and result.
func decisions(t *testing.T, reg *prometheus.Registry, realm uuid.UUID, scope, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "appdor_limiter_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if (labels["realm"] == realm.String() || realm == uuid.Nil && labels["realm"] == "") && labels["scope"] == scope && labels["result"] == result {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// BenchmarkAllow is the cost of one decision against the real Redis: a token
// with its own ceiling and its realm, both keys in one script run.
func BenchmarkAllow(b *testing.B) {
	f := setup(b)
	ctx := context.Background()
	b.Run("allowed", func(b *testing.B) {
		s := limiter.Subject{Realm: uuid.New(), Token: uuid.New(), TokenLimit: 1_000_000_000, RealmLimit: 1_000_000_000}
		b.ReportAllocs()
		for b.Loop() {
			if d := f.lim.Allow(ctx, s); !d.Allowed || d.Err != nil {
				b.Fatal(d)
			}
		}
	})
	b.Run("refused", func(b *testing.B) {
		s := limiter.Subject{Realm: uuid.New(), Token: uuid.New(), TokenLimit: 1}
		f.lim.Allow(ctx, s)
		b.ReportAllocs()
		for b.Loop() {
			if d := f.lim.Allow(ctx, s); d.Allowed || d.Err != nil {
				b.Fatal(d)
			}
		}
	})
	b.Run("redis PING, for comparison", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := f.client.Do(ctx, f.client.B().Ping().Build()).Error(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("refused parallel", func(b *testing.B) {
		s := limiter.Subject{Realm: uuid.New(), Token: uuid.New(), TokenLimit: 1}
		f.lim.Allow(ctx, s)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if d := f.lim.Allow(ctx, s); d.Allowed {
					panic(fmt.Sprint(d))
				}
			}
		})
	})
}

// countingHandler counts the log records with a given message.
type countingHandler struct {
	msg string
	n   *atomic.Int64
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

// outageLogging is a limiter on the test Redis with its own registry and
// the decision timeout given (0: the default), whose outage WARNs, at most
// one an interval, are counted.
func outageLogging(t *testing.T, timeout, interval time.Duration) (*limiter.Limiter, *prometheus.Registry, *atomic.Int64) {
	t.Helper()
	f := setup(t)
	logged := &atomic.Int64{}
	reg := prometheus.NewRegistry()
	lim := limiter.New(limiter.Config{
		Client:           f.client,
		Registerer:       reg,
		Timeout:          timeout,
		ErrorLogInterval: interval,
		Log:              slog.New(countingHandler{msg: "limiter: redis unreachable; allowing requests unlimited", n: logged}),
	})
	t.Cleanup(lim.Close)
	return lim, reg, logged
}

// TestFailOpen: when Redis cannot answer in time every request is allowed,
// each is counted as an error, and the log says so once per interval.
func TestFailOpen(t *testing.T) {
	t.Parallel()
	lim, reg, logged := outageLogging(t, time.Nanosecond, time.Hour) // nothing answers that fast
	s := limiter.Subject{Realm: uuid.New(), Token: uuid.New(), TokenLimit: 1}
	for range 50 {
		d := lim.Allow(context.Background(), s)
		require.True(t, d.Allowed)
		require.Error(t, d.Err)
		require.Zero(t, d.Limit, "nothing decided, nothing claimed")
	}
	require.Equal(t, 50.0, decisions(t, reg, s.Realm, "token", "error"))
	require.Equal(t, int64(1), logged.Load())
}

// TestAClientGoneIsNoOutage: a decision whose request ended before Redis
// answered (its client went away) is not an outage: no WARN that Redis is
// unreachable, no error counted, and the next request is decided.
func TestAClientGoneIsNoOutage(t *testing.T) {
	t.Parallel()
	lim, reg, logged := outageLogging(t, 0, time.Nanosecond)
	s := limiter.Subject{Realm: uuid.New(), Token: uuid.New(), TokenLimit: 1000}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for range 20 {
		d := lim.Allow(gone, s)
		require.True(t, d.Allowed)
		require.ErrorIs(t, d.Err, context.Canceled)
	}
	require.Zero(t, logged.Load(), "a client gone is not Redis gone")
	require.Zero(t, decisions(t, reg, s.Realm, "token", "error"))
	d := lim.Allow(context.Background(), s)
	require.NoError(t, d.Err, "the next request is decided")
	require.Equal(t, 1.0, decisions(t, reg, s.Realm, "token", "allowed")+decisions(t, reg, s.Realm, "realm", "allowed"))
}

// TestKeys: the keys a decision builds are the named ones.
func TestKeys(t *testing.T) {
	t.Parallel()
	realm, token := uuid.New(), uuid.New()
	rk, text, tk := limiter.Keys(realm, token)
	require.Equal(t, limiter.RealmKey(realm), rk)
	require.Equal(t, realm.String(), text)
	require.Equal(t, limiter.TokenKey(realm, token), tk)
	require.Equal(t, "appdor:quota:{"+realm.String()+"}:"+token.String(), tk)
	rk, _, tk = limiter.Keys(realm, uuid.Nil)
	require.Equal(t, "appdor:quota:{"+realm.String()+"}", rk)
	require.Empty(t, tk)
}

// TestOutageLoggedOnce: Redis going away is one WARN however many requests
// fail open, its return one INFO, and the limiter decides again by itself,
// on the same client, once Redis answers.
func TestOutageLoggedOnce(t *testing.T) {
	t.Parallel()
	opt, err := rueidis.ParseURL(testenv.RedisURL(t))
	require.NoError(t, err)
	proxy := testenv.NewProxy(t, opt.InitAddress[0])
	opt.InitAddress = []string{proxy.Addr()}
	opt.DisableCache = true
	client, err := rueidis.NewClient(opt)
	require.NoError(t, err)
	defer client.Close()
	var warned, back atomic.Int64
	lim := limiter.New(limiter.Config{
		Client: client,
		Pause:  10 * time.Millisecond,
		Log: slog.New(multiHandler{
			countingHandler{msg: "limiter: redis unreachable; allowing requests unlimited", n: &warned},
			countingHandler{msg: "limiter: redis answers again; deciding requests", n: &back},
		}),
		ErrorLogInterval: time.Millisecond,
	})
	defer lim.Close()
	s := limiter.Subject{Realm: uuid.New(), Token: uuid.New(), TokenLimit: 1000}
	ctx := context.Background()
	require.NoError(t, lim.Allow(ctx, s).Err)

	for outage := 1; outage <= 2; outage++ {
		proxy.Down()
		for range 100 {
			d := lim.Allow(ctx, s)
			require.True(t, d.Allowed, "fail open")
			require.Error(t, d.Err)
		}
		require.Error(t, lim.Ping(ctx))
		require.Equal(t, int64(outage), warned.Load(), "one WARN per outage, not one per request")
		require.Equal(t, int64(outage-1), back.Load())

		proxy.Up()
		require.Eventually(t, func() bool { return lim.Allow(ctx, s).Err == nil }, 10*time.Second, 20*time.Millisecond,
			"the limiter decides again once Redis answers")
		require.NoError(t, lim.Ping(ctx))
		require.Equal(t, int64(outage), back.Load(), "one INFO when Redis is back")
		require.Equal(t, int64(outage), warned.Load())
	}
}

// multiHandler hands each record to every handler.
type multiHandler []slog.Handler

func (m multiHandler) Enabled(context.Context, slog.Level) bool { return true }
func (m multiHandler) Handle(ctx context.Context, r slog.Record) error {
	for _, h := range m {
		_ = h.Handle(ctx, r)
	}
	return nil
}
func (m multiHandler) WithAttrs([]slog.Attr) slog.Handler { return m }
func (m multiHandler) WithGroup(string) slog.Handler      { return m }

// TestARefusedKeyIsAnsweredHereUntilItsRetryTime: after Redis refuses a
// key, the same key's requests before its retry time are refused in this
// process with the answer Redis would give, without a round trip (the key
// deleted from Redis does not let them through); at the retry time, or
// under another ceiling, Redis is asked again.
func TestARefusedKeyIsAnsweredHereUntilItsRetryTime(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.clock()
	ctx := context.Background()
	realm, token := uuid.New(), uuid.New()
	s := limiter.Subject{Realm: realm, Token: token, TokenLimit: 2, RealmLimit: 100} // one each 30 s after the burst
	for range 2 {
		require.True(t, f.lim.Allow(ctx, s).Allowed)
	}
	d := f.lim.Allow(ctx, s)
	require.False(t, d.Allowed)
	require.True(t, d.FirstRefusal)
	require.Equal(t, 30*time.Second, d.RetryAfter)
	require.Equal(t, 60*time.Second, d.Reset)
	calls := only(t, f.reg, "appdor_limiter_redis_seconds").GetHistogram().GetSampleCount()

	require.NoError(t, f.client.Do(ctx, f.client.B().Del().Key(limiter.TokenKey(realm, token)).Build()).Error())
	f.now += (10 * time.Second).Microseconds()
	d = f.lim.Allow(ctx, s)
	require.False(t, d.Allowed, "refused here, though Redis has forgotten the key")
	require.False(t, d.FirstRefusal)
	require.Equal(t, limiter.ScopeToken, d.Scope)
	require.Equal(t, 2, d.Limit)
	require.Equal(t, 20*time.Second, d.RetryAfter)
	require.Equal(t, 50*time.Second, d.Reset)
	require.Equal(t, calls, only(t, f.reg, "appdor_limiter_redis_seconds").GetHistogram().GetSampleCount(), "no Redis call")
	require.Equal(t, 1.0, only(t, f.reg, "appdor_limiter_local_refusals_total").GetCounter().GetValue())
	require.Equal(t, 2.0, decisions(t, f.reg, realm, "token", "refused"))

	// Another ceiling for the token: Redis decides (the key is gone: a fresh burst).
	require.True(t, f.lim.Allow(ctx, limiter.Subject{Realm: realm, Token: token, TokenLimit: 3, RealmLimit: 100}).Allowed)
	// At the retry time, Redis decides again.
	f.now += (20 * time.Second).Microseconds()
	require.True(t, f.lim.Allow(ctx, s).Allowed)
	require.Equal(t, calls+2, only(t, f.reg, "appdor_limiter_redis_seconds").GetHistogram().GetSampleCount())
}

// only is the one series of metric name in reg.
func only(t *testing.T, reg *prometheus.Registry, name string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0]
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}
