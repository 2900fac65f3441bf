package fairness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor"
)

// clock is a hand-driven clock: no test here sleeps or reads the time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (k *clock) now() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.t
}

func (k *clock) advance(d time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.t = k.t.Add(d)
}

// setup returns a controller with capacity 2 and reserve 2 (this machine's
// defaults) on a hand-driven clock, and its registry.
func setup(t *testing.T, mutate func(*Config)) (*Controller, *clock, *prometheus.Registry) {
	t.Helper()
	k := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg := Config{Capacity: 2, Reserve: 2, Now: k.now}
	if mutate != nil {
		mutate(&cfg)
	}
	reg := prometheus.NewRegistry()
	return New(cfg, reg), k, reg
}

// admitN admits n requests of realm, failing when one is refused.
func admitN(t *testing.T, c *Controller, realm string, n int) []func() {
	t.Helper()
	var rels []func()
	for i := range n {
		rel, ref := c.Admit(realm, ClassRequest)
		require.Nil(t, ref, "%s request %d refused", realm, i)
		rels = append(rels, rel)
	}
	return rels
}

func refused(t *testing.T, c *Controller, realm string) *Refusal {
	t.Helper()
	rel, ref := c.Admit(realm, ClassRequest)
	if rel != nil {
		rel()
	}
	require.NotNil(t, ref, "%s was admitted, want refused", realm)
	return ref
}

// value reads a counter or gauge.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

func releaseAll(rels []func()) {
	for _, r := range rels {
		r()
	}
}

func TestSized(t *testing.T) {
	t.Parallel()
	cfg := Config{Capacity: 0, PoolSize: 4}.Sized()
	require.Equal(t, 3, cfg.Reserve)
	require.Equal(t, 1, cfg.Capacity, "capacity and reserve fit the pool")
	cfg = Config{Capacity: 32}.Sized()
	require.Equal(t, 16, cfg.Reserve)
	require.Equal(t, DefaultActiveWindow, cfg.ActiveWindow)
	require.Equal(t, DefaultHold, cfg.Hold)
	require.Equal(t, time.Duration(0), Config{Capacity: 2, Hold: -1}.Sized().Hold)
}

// heat makes realm hot: refused HotAfter times while it holds what it has.
func heat(t *testing.T, c *Controller, realm string) {
	t.Helper()
	for range DefaultHotAfter {
		refused(t, c, realm)
	}
}

func TestAloneUsesTheWholeCapacity(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, func(cfg *Config) { cfg.Capacity = 6 })
	// The capacity, then the reserve but its last slot.
	rels := admitN(t, c, "a", 7)
	require.Equal(t, ReasonRealmLimit, refused(t, c, "a").Reason)
	// The last slot is there for an arriving realm.
	b := admitN(t, c, "b", 1)
	require.Equal(t, ReasonCapacity, refused(t, c, "c").Reason)
	releaseAll(rels)
	releaseAll(b)
	require.Equal(t, 0, c.Total())
}

func TestSharesFollowActiveRealms(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, func(cfg *Config) { cfg.Capacity = 12; cfg.Reserve = 1 })
	rels := map[string][]func(){}
	for _, r := range []string{"a", "b", "c"} {
		rels[r] = admitN(t, c, r, 2)
	}
	require.Equal(t, 2, c.Share())
	// Past their shares, realms that keep asking are held to them.
	for _, r := range []string{"a", "b", "c"} {
		heat(t, c, r)
	}
	rels["a"][0]()
	rels["a"][1]()
	require.Equal(t, ReasonRealmLimit, refused(t, c, "b").Reason, "b is hot: no borrowing a's share")
	rels["a"] = admitN(t, c, "a", 2)
	for _, r := range rels {
		releaseAll(r)
	}
	require.Equal(t, 0, c.Total())
}

func TestArrivingRealmFindsTheReserve(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, func(cfg *Config) { cfg.Capacity = 4 })
	storm := admitN(t, c, "storm", 5) // alone and not hot: the capacity and a reserve slot
	require.Equal(t, ReasonRealmLimit, refused(t, c, "storm").Reason)

	victim := admitN(t, c, "victim", 1) // at once, from the last slot
	require.Equal(t, 6, c.Total())
	require.Equal(t, 1, c.Share(), "the shares were recomputed on arrival: half the capacity, split")

	// The storm keeps asking: hot now, it gets nothing more until it is back
	// under its share, even when slots free up.
	heat(t, c, "storm")
	releaseAll(storm[:4])
	require.Equal(t, ReasonRealmLimit, refused(t, c, "storm").Reason)
	storm[4]()
	storm = admitN(t, c, "storm", 1)
	require.Equal(t, ReasonRealmLimit, refused(t, c, "storm").Reason)

	// The victim's requests may overlap: past its share, into the reserve,
	// up to Reserve-1 past it.
	victim = append(victim, admitN(t, c, "victim", 1)...)
	require.Equal(t, 3, c.Total())
	require.Equal(t, ReasonRealmLimit, refused(t, c, "victim").Reason)
	releaseAll(admitN(t, c, "arriving", 1))
	releaseAll(victim)
	releaseAll(storm)
}

func TestBorrowingEndsWhenARealmGoesQuiet(t *testing.T) {
	t.Parallel()
	c, k, _ := setup(t, func(cfg *Config) { cfg.Capacity = 8; cfg.Reserve = 1 })
	releaseAll(admitN(t, c, "victim", 1))
	a := admitN(t, c, "a", 2) // its share; a reserve of one is for arrivals only
	require.Equal(t, ReasonRealmLimit, refused(t, c, "a").Reason)
	heat(t, c, "a")
	require.Equal(t, ReasonRealmLimit, refused(t, c, "a").Reason, "hot, held to its share while the victim counts")

	k.advance(DefaultActiveWindow - time.Millisecond)
	require.Equal(t, ReasonRealmLimit, refused(t, c, "a").Reason)

	// The victim's window ends (realms are swept four times a window): "a"
	// has the whole capacity back.
	k.advance(DefaultActiveWindow / 4)
	a = append(a, admitN(t, c, "a", 6)...)
	require.Equal(t, 1, c.Active())
	require.Equal(t, 8, c.Share())
	require.Equal(t, ReasonRealmLimit, refused(t, c, "a").Reason)

	// The victim comes back: it finds room at once.
	v := admitN(t, c, "victim", 1)
	require.Equal(t, 2, c.Share())
	releaseAll(a)
	releaseAll(v)
}

func TestARealmWithWorkInFlightStaysActive(t *testing.T) {
	t.Parallel()
	c, k, _ := setup(t, func(cfg *Config) { cfg.Capacity = 8; cfg.Reserve = 1 })
	slow := admitN(t, c, "slow", 1)
	k.advance(10 * DefaultActiveWindow)
	releaseAll(admitN(t, c, "a", 1))
	require.Equal(t, 2, c.Active())
	require.Equal(t, 2, c.Share())
	releaseAll(slow)
}

// TestSixteenStormsAndAQuietRealm: the storming realms share the capacity;
// once they keep asking they are hot and never take the reserve, which stays
// for the quiet realm.
func TestSixteenStormsAndAQuietRealm(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, func(cfg *Config) { cfg.Capacity = 4 })
	inflight := map[string][]func(){}
	storm := func() {
		for range DefaultHotAfter + 1 {
			for i := range 16 {
				name := fmt.Sprintf("storm%02d", i)
				if rel, ref := c.Admit(name, ClassRequest); ref == nil {
					inflight[name] = append(inflight[name], rel)
				}
				require.LessOrEqual(t, c.Total(), 6)
			}
		}
	}
	storm()
	// The storms' first requests finish; they come back, hot now.
	for name, rels := range inflight {
		releaseAll(rels)
		delete(inflight, name)
	}
	storm()
	require.Equal(t, 2, c.Total(), "hot storms hold the capacity, not the reserve")
	for name := range inflight {
		require.Equal(t, 1, c.Inflight(name), "share is 1 with 17 realms")
	}

	for range 100 { // the quiet realm, request after request
		releaseAll(admitN(t, c, "quiet", 1))
		storm()
	}
	require.Equal(t, 2, c.Total())
	for _, rels := range inflight {
		releaseAll(rels)
	}
	require.Equal(t, 0, c.Total())
}

func TestAnUnluckyRealmIsNotHot(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, nil)
	a := admitN(t, c, "a", 3)
	b := admitN(t, c, "b", 1) // the last slot
	ref := refused(t, c, "c")
	require.Equal(t, ReasonCapacity, ref.Reason)
	require.Zero(t, ref.Hold, "a realm refused once is answered at once")
	b[0]()
	releaseAll(admitN(t, c, "c", 1)) // still eligible for the reserve
	releaseAll(a)
}

func TestHammeringRealmIsHeld(t *testing.T) {
	t.Parallel()
	c, k, _ := setup(t, func(cfg *Config) { cfg.Hold = 7 * time.Millisecond })
	a := admitN(t, c, "a", 3)
	for i := range DefaultHotAfter - 1 {
		require.Zero(t, refused(t, c, "a").Hold, "refusal %d", i)
	}
	require.Equal(t, 7*time.Millisecond, refused(t, c, "a").Hold)
	// Still hot in the next window, cool after two quiet ones.
	k.advance(DefaultActiveWindow)
	require.Equal(t, 7*time.Millisecond, refused(t, c, "a").Hold)
	k.advance(2 * DefaultActiveWindow)
	require.Zero(t, refused(t, c, "a").Hold)
	releaseAll(a)
}

func TestReleaseIsIdempotent(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, nil)
	rel := admitN(t, c, "a", 1)[0]
	rel()
	rel()
	require.Equal(t, 0, c.Total())
	require.Equal(t, 0, c.Inflight("a"))
}

func TestOffAdmitsEverything(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, func(cfg *Config) { cfg.Off = true })
	rels := admitN(t, c, "a", 100)
	releaseAll(rels)
}

func TestAcquireRequestIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, nil)
	a := admitN(t, c, "a", 3)
	_, err := c.Acquire(context.Background(), "a", ClassRequest)
	var ae *appdor.Error
	require.True(t, errors.As(err, &ae))
	require.Equal(t, appdor.EConcurrencyLimited, ae.Code)
	require.Equal(t, time.Second, ae.RetryAfter)
	releaseAll(a)
}

func TestImportWaitsForASlot(t *testing.T) {
	t.Parallel()
	c, _, reg := setup(t, nil)
	a := admitN(t, c, "a", 2)
	waiting := make(chan struct{}, 1)
	c.onWait = func() { waiting <- struct{}{} }
	got := make(chan func())
	go func() {
		rel, err := c.Acquire(context.Background(), "a", ClassImport)
		if err != nil {
			close(got)
			return
		}
		got <- rel
	}()
	<-waiting // the import waits: the realm has its whole share in flight
	a[0]()
	rel, ok := <-got
	require.True(t, ok)
	require.Equal(t, 2, c.Inflight("a"))
	rel()
	a[1]()
	require.Equal(t, 0, c.Total())
	require.Equal(t, 1.0, value(c.m.admitted.WithLabelValues("a", ClassImport)))
	_ = reg
}

func TestImportNeverTakesTheReserve(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, nil)
	a := admitN(t, c, "a", 2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Acquire(ctx, "b", ClassImport)
	require.Equal(t, appdor.EConcurrencyLimited, appdor.ErrorCode(err))
	require.Equal(t, 1.0, value(c.m.refused.WithLabelValues("b", ClassImport, ReasonCanceled)))
	releaseAll(admitN(t, c, "b", 1)) // a request does
	releaseAll(a)
}

func TestImportInsideARequestRunsUnderItsSlot(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, nil)
	a := admitN(t, c, "a", 2)
	h := &held{realm: "a"}
	ctx := withHeld(context.Background(), h)
	rel, err := c.Acquire(ctx, "a", ClassImport)
	require.NoError(t, err)
	rel()
	require.Equal(t, 2, c.Inflight("a"))

	// Another realm's marker, or a released one, is no pass.
	ctx2, cancel := context.WithCancel(withHeld(context.Background(), &held{realm: "b"}))
	cancel()
	_, err = c.Acquire(ctx2, "a", ClassImport)
	require.Error(t, err)
	h.released.Store(true)
	ctx3, cancel3 := context.WithCancel(ctx)
	cancel3()
	_, err = c.Acquire(ctx3, "a", ClassImport)
	require.Error(t, err)
	releaseAll(a)
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	c, _, reg := setup(t, nil)
	a := admitN(t, c, "a", 3)
	refused(t, c, "a")
	require.Equal(t, 3.0, value(c.m.inflight.WithLabelValues("a")))
	require.Equal(t, 3.0, value(c.m.admitted.WithLabelValues("a", ClassRequest)))
	require.Equal(t, 1.0, value(c.m.refused.WithLabelValues("a", ClassRequest, ReasonRealmLimit)))
	releaseAll(a)
	require.Equal(t, 0.0, value(c.m.inflight.WithLabelValues("a")))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	limits := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "appdor_fairness_limit" {
			for _, m := range mf.GetMetric() {
				limits[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	require.Equal(t, map[string]float64{"capacity": 2, "reserve": 2, "realm_share": 2}, limits)
}

// TestConcurrentNeverOverCommits hammers the controller from many goroutines
// (for the race detector) and checks the bounds hold at every admission.
func TestConcurrentNeverOverCommits(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, func(cfg *Config) { cfg.Capacity = 4; cfg.Reserve = 1 })
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("r%d", g%8)
			for range 500 {
				rel, ref := c.Admit(name, ClassRequest)
				if ref != nil {
					continue
				}
				if c.Total() > 5 {
					t.Errorf("total %d over capacity+reserve", c.Total())
				}
				rel()
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 0, c.Total())
}

// TestALightRealmOverlapsIntoTheReserve: a realm that is not hot may go
// Reserve-1 past its share, but never into the last slot.
func TestALightRealmOverlapsIntoTheReserve(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, func(cfg *Config) { cfg.Capacity = 8; cfg.Reserve = 3 })
	storm := admitN(t, c, "storm", 2)
	victim := admitN(t, c, "victim", 4) // its share of 2, and 2 more
	require.Equal(t, ReasonRealmLimit, refused(t, c, "victim").Reason)
	require.Equal(t, 6, c.Total())
	releaseAll(admitN(t, c, "arriving", 1))
	releaseAll(victim)
	releaseAll(storm)
}

// TestRefusalsAmongManyAdmissionsAreNotHot: a light realm refused now and
// then keeps the reserve; hot needs a refusal for every 32 admissions.
func TestRefusalsAmongManyAdmissionsAreNotHot(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, nil)
	for range 200 {
		releaseAll(admitN(t, c, "light", 1))
	}
	full := admitN(t, c, "other", 2)
	full = append(full, admitN(t, c, "light", 1)...)
	require.Equal(t, 3, c.Total())
	for range DefaultHotAfter {
		require.Zero(t, refused(t, c, "light").Hold)
	}
	full[2]()
	releaseAll(admitN(t, c, "light", 1)) // still an arriving realm's reserve
	releaseAll(full[:2])
}
