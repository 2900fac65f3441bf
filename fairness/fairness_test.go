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
	// Most tests look at shares and the reserve; probation for fresh realms
	// is off unless a test turns it on.
	cfg := Config{Capacity: 2, Reserve: 2, Now: k.now, FreshFor: -1}
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
	require.Equal(t, 2, cfg.Reserve)
	require.Equal(t, 2, cfg.Capacity, "capacity and reserve fit the pool")
	cfg = Config{Capacity: 0, PoolSize: 16}.Sized()
	require.LessOrEqual(t, cfg.Capacity+cfg.Reserve, 16)
	cfg = Config{Capacity: 32}.Sized()
	require.Equal(t, 16, cfg.Reserve)
	require.Equal(t, DefaultActiveWindow, cfg.FreshFor)
	require.Equal(t, DefaultMemory, cfg.Memory)
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

func TestABusyRealmRefusedNowAndThenIsNotHot(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, func(cfg *Config) { cfg.Capacity = 4; cfg.Reserve = 6 })
	for range 100 {
		releaseAll(admitN(t, c, "busy", 1))
	}
	// A moment of slowness: its requests pile up and a few are refused.
	var room []func()
	for i := 0; c.Total() < 9; i++ {
		more, _ := fill(c, fmt.Sprintf("other%d", i))
		room = append(room, more...)
	}
	piled := admitN(t, c, "busy", 1) // the last slot
	for range 2 * DefaultHotAfter {
		require.Zero(t, refused(t, c, "busy").Hold, "refused 8 times in 108 requests: not hot")
	}
	releaseAll(room)
	releaseAll(piled)
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

// fill admits requests of realm until one is refused, and returns the
// releases and the refusal.
func fill(c *Controller, realm string) ([]func(), *Refusal) {
	var rels []func()
	for range 1000 {
		rel, ref := c.Admit(realm, ClassRequest)
		if ref != nil {
			return rels, ref
		}
		rels = append(rels, rel)
	}
	panic("never refused")
}

func TestSharesAndALightRealmBorrowing(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, func(cfg *Config) { cfg.Capacity = 12; cfg.Reserve = 2 })
	rels := map[string][]func(){}
	for _, r := range []string{"a", "b", "c"} {
		rels[r] = admitN(t, c, r, 2)
	}
	require.Equal(t, 3, c.Active())
	require.Equal(t, 2, c.Share(), "E = 6 split three ways")

	// A light realm past its share borrows the reserve but one, no more.
	more, ref := fill(c, "a")
	require.Len(t, more, 1)
	require.Equal(t, ReasonRealmLimit, ref.Reason)
	rels["a"] = append(rels["a"], more...)
	for _, r := range rels {
		releaseAll(r)
	}
	require.Equal(t, 0, c.Total())
}

func TestHotRealmsTogetherHoldOneShare(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, func(cfg *Config) { cfg.Capacity = 4; cfg.Reserve = 6 })
	filler, _ := fill(c, "filler") // all but the last slot
	last := admitN(t, c, "quiet", 1)
	var storms []func()
	for i := range 16 {
		heat(t, c, fmt.Sprintf("storm%02d", i)) // refused while the room is full: hot
	}
	releaseAll(filler)
	releaseAll(last)
	// Sixteen hot realms ask again and again: together they get one slot
	// (E = 2, hot realms hold at most half of it), never the reserve.
	for range 5 {
		for i := range 16 {
			if rel, ref := c.Admit(fmt.Sprintf("storm%02d", i), ClassRequest); ref == nil {
				storms = append(storms, rel)
			} else {
				require.Positive(t, ref.Hold, "a hot realm's refusal is held")
			}
		}
	}
	require.Len(t, storms, 1)
	require.Equal(t, 1, c.Total())

	// The quiet realm overlaps, request after request: its share and the
	// reserve but one, beside the one hot slot.
	q, ref := fill(c, "quiet")
	require.Equal(t, 1+1+5, c.Total())
	require.Zero(t, ref.Hold, "the quiet realm is not hot")
	releaseAll(q)
	releaseAll(storms)
}

func TestHeldSlotsMakeARealmHeavyWithoutRefusals(t *testing.T) {
	t.Parallel()
	c, k, _ := setup(t, func(cfg *Config) { cfg.Capacity = 4; cfg.Reserve = 6 })
	releaseAll(admitN(t, c, "light", 1))
	hog := admitN(t, c, "hog", 3)  // its share, then borrowed slots: never refused
	k.advance(DefaultActiveWindow) // holding three slots for a whole window
	releaseAll(admitN(t, c, "light", 1))
	ref := refused(t, c, "hog")
	require.Positive(t, ref.Hold, "heavy counts as hot: no more borrowing")
	releaseAll(hog)
}

func TestANewCrowdLeavesRoomForTheRealmsAtWork(t *testing.T) {
	t.Parallel()
	c, k, _ := setup(t, func(cfg *Config) { cfg.Capacity = 4; cfg.Reserve = 6; cfg.FreshFor = DefaultActiveWindow })
	releaseAll(admitN(t, c, "quiet", 1))
	k.advance(DefaultActiveWindow - time.Millisecond)
	releaseAll(admitN(t, c, "quiet", 1))
	k.advance(2 * time.Millisecond) // the quiet realm is settled, and still active
	var crowd []func()
	for i := range 16 {
		for range 4 {
			rel, ref := c.Admit(fmt.Sprintf("new%02d", i), ClassRequest)
			if ref == nil {
				crowd = append(crowd, rel)
				continue
			}
			require.Equal(t, ReasonNewRealm, ref.Reason)
			require.Positive(t, ref.Hold, "a new realm's request waits for its turn")
		}
	}
	// Sixteen arriving realms run one request at a time between them (E =
	// 2, new realms hold at most half of it); the quiet realm overlaps as
	// far as it needs.
	require.Len(t, crowd, 1)
	q := admitN(t, c, "quiet", 6) // its share and the reserve but one
	releaseAll(q)

	// A waiting new realm gets in as soon as the new realms' slot is free.
	got := make(chan func())
	go func() {
		rel, ok := c.AdmitWithin(context.Background(), "new07", ClassRequest, time.Hour)
		require.True(t, ok)
		got <- rel
	}()
	releaseAll(crowd)
	(<-got)()

	// Once settled, the crowd is judged by what it does, like anyone.
	k.advance(DefaultActiveWindow)
	releaseAll(admitN(t, c, "new03", 2))
}

func TestEveryRealmNewIsNoProbation(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, func(cfg *Config) { cfg.Capacity = 4; cfg.Reserve = 6; cfg.FreshFor = DefaultActiveWindow })
	// A restart: every realm is new, nobody has a history to protect.
	a := admitN(t, c, "a", 3)
	b := admitN(t, c, "b", 3)
	releaseAll(a)
	releaseAll(b)
}

func TestARealmThatComesBackIsOnProbation(t *testing.T) {
	t.Parallel()
	c, k, _ := setup(t, func(cfg *Config) { cfg.Capacity = 4; cfg.Reserve = 6; cfg.FreshFor = DefaultActiveWindow })
	releaseAll(admitN(t, c, "sporadic", 1))
	releaseAll(admitN(t, c, "busy", 1))
	for range 6 {
		k.advance(DefaultActiveWindow / 2)
		releaseAll(admitN(t, c, "busy", 1))
	}
	// The sporadic realm was quiet for three windows: no longer active, but
	// remembered.
	require.Equal(t, 1, c.Active())
	busy := admitN(t, c, "busy", 1)
	// It comes back on probation: one request at a time while new, the
	// next one waiting for its turn...
	back := admitN(t, c, "sporadic", 1)
	ref := refused(t, c, "sporadic")
	require.Equal(t, ReasonNewRealm, ref.Reason)
	require.Positive(t, ref.Hold)
	releaseAll(back)
	// ...and settled after a window at work, it overlaps like any light
	// realm.
	k.advance(DefaultActiveWindow / 2)
	releaseAll(admitN(t, c, "sporadic", 1))
	k.advance(DefaultActiveWindow / 2)
	releaseAll(admitN(t, c, "sporadic", 3))
	releaseAll(busy)

	// After Memory of silence it is forgotten.
	for range int(2 * DefaultMemory / DefaultActiveWindow) {
		k.advance(DefaultActiveWindow / 2)
		releaseAll(admitN(t, c, "busy", 1))
	}
	c.mu.Lock()
	_, remembered := c.realms["sporadic"]
	c.mu.Unlock()
	require.False(t, remembered)
}
