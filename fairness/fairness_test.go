package fairness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor"
)

// clock is a fake Clock: time moves only when a test advances it, and the
// wait bounds' timers fire then.
type clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
}

type timer struct {
	at      time.Time
	f       func()
	stopped bool
}

func (k *clock) Now() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.now
}

func (k *clock) AfterFunc(d time.Duration, f func()) func() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	t := &timer{at: k.now.Add(d), f: f}
	k.timers = append(k.timers, t)
	return func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// advance moves the clock and runs the timers that are due.
func (k *clock) advance(d time.Duration) {
	k.mu.Lock()
	k.now = k.now.Add(d)
	var due []*timer
	rest := k.timers[:0]
	for _, t := range k.timers {
		switch {
		case t.stopped:
		case !t.at.After(k.now):
			t.stopped = true
			due = append(due, t)
		default:
			rest = append(rest, t)
		}
	}
	k.timers = rest
	k.mu.Unlock()
	for _, t := range due {
		t.f()
	}
}

func setup(t *testing.T, mutate func(*Config)) (*Controller, *clock, *prometheus.Registry) {
	t.Helper()
	k := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg := Config{Seats: 4, BackgroundSeats: 1, BackloggedSeats: 1, QueueLength: 8, WaitBound: 50 * time.Millisecond, Clock: k}
	if mutate != nil {
		mutate(&cfg)
	}
	reg := prometheus.NewRegistry()
	return New(cfg, reg), k, reg
}

// grant is what one Acquire came back with.
type grant struct {
	flow    string
	release func()
	err     error
}

// ask starts an Acquire in its own goroutine; its grant arrives on out.
func ask(c *Controller, flow string, lvl Level, out chan<- grant) {
	go func() {
		rel, err := c.Acquire(context.Background(), flow, lvl)
		out <- grant{flow, rel, err}
	}()
}

// now acquires a seat that must be granted at once.
func now(t *testing.T, c *Controller, flow string) func() {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rel, err := c.Acquire(ctx, flow, Interactive)
	require.NoError(t, err)
	return rel
}

// awaitQueued waits until flow has n units waiting at lvl.
func awaitQueued(t *testing.T, c *Controller, flow string, lvl Level, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return c.Queued(flow, lvl) == n }, 5*time.Second, time.Millisecond,
		"%s: expected %d waiting", flow, n)
}

func next(t *testing.T, out <-chan grant) grant {
	t.Helper()
	select {
	case g := <-out:
		return g
	case <-time.After(5 * time.Second):
		t.Fatal("no grant")
		return grant{}
	}
}

func none(t *testing.T, out <-chan grant) {
	t.Helper()
	select {
	case g := <-out:
		t.Fatalf("unexpected grant for %s (err %v)", g.flow, g.err)
	case <-time.After(20 * time.Millisecond):
	}
}

func reason(err error) string {
	var e *appdor.Error
	if errors.As(err, &e) {
		if d, ok := e.Details.(map[string]string); ok {
			return d["reason"]
		}
	}
	return ""
}

func TestSized(t *testing.T) {
	t.Parallel()
	cfg := Config{PoolSize: 3}.Sized()
	require.Equal(t, 2, cfg.Seats, "seats and background seats fit the pool")
	require.GreaterOrEqual(t, cfg.BackgroundSeats, 1)
	require.LessOrEqual(t, cfg.BackloggedSeats, cfg.Seats)
	require.Equal(t, DefaultWaitBound, cfg.WaitBound)
	require.Equal(t, DefaultQueueLength, cfg.QueueLength)
}

// A realm alone uses every seat, and its excess waits in its queue behind
// nobody: the next free seat is its own.
func TestARealmAloneUsesEverySeatAndWaitsBehindNobody(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, nil)
	var rels []func()
	for range 4 {
		rels = append(rels, now(t, c, "lone"))
	}
	require.Equal(t, 4, c.InUse(Interactive))
	out := make(chan grant, 1)
	ask(c, "lone", Interactive, out)
	awaitQueued(t, c, "lone", Interactive, 1)
	rels[0]()
	g := next(t, out)
	require.NoError(t, g.err)
	g.release()
	for _, r := range rels[1:] {
		r()
	}
	require.Equal(t, 0, c.InUse(Interactive))
}

// stormed makes storms as they are in steady state: each was refused with
// work of its own queued ahead (its two units' waits expired) and has units
// queued.
func stormed(t *testing.T, c *Controller, k *clock, storms []string, queued int, out chan<- grant) {
	t.Helper()
	expired := make(chan grant, 2*len(storms))
	for _, s := range storms {
		ask(c, s, Interactive, expired)
		awaitQueued(t, c, s, Interactive, 1)
		ask(c, s, Interactive, expired)
		awaitQueued(t, c, s, Interactive, 2)
	}
	k.advance(c.cfg.WaitBound)
	for range 2 * len(storms) {
		require.Equal(t, ReasonWaitExpired, reason(next(t, expired).err))
	}
	for _, s := range storms {
		for range queued {
			ask(c, s, Interactive, out)
		}
		awaitQueued(t, c, s, Interactive, queued)
	}
}

// A sparse request — its realm has nothing in flight or queued — is served
// at the next free seat, ahead of every backlogged storm: one or sixteen.
func TestASparseRequestGoesBeforeBackloggedStorms(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 16} {
		c, k, _ := setup(t, func(cfg *Config) { cfg.Seats = 2 })
		holders := []func(){now(t, c, "storm00"), now(t, c, "storm00")}
		var storms []string
		for i := range n {
			storms = append(storms, fmt.Sprintf("storm%02d", i+1))
		}
		stormOut := make(chan grant, 64)
		stormed(t, c, k, storms, 2, stormOut)
		victim := make(chan grant, 1)
		ask(c, "victim", Interactive, victim)
		awaitQueued(t, c, "victim", Interactive, 1)
		holders[0]()
		g := next(t, victim)
		require.NoError(t, g.err, "%d storms", n)
		none(t, stormOut)
		g.release()
		holders[1]()
		for range 2 * n { // the storms' queues drain
			g := next(t, stormOut)
			require.NoError(t, g.err)
			g.release()
		}
	}
}

// A storm that idles between refusals does not pass for sparse: refused
// within SparseAfterRefusal, its next request queues behind a sparse one.
// Once that has passed, it is sparse again.
func TestAStormIdlingBetweenRefusalsIsNotSparse(t *testing.T) {
	t.Parallel()
	c, k, _ := setup(t, func(cfg *Config) { cfg.Seats, cfg.QueueLength = 1, 1 })
	hold := now(t, c, "other")
	out := make(chan grant, 8)
	ask(c, "storm", Interactive, out)
	awaitQueued(t, c, "storm", Interactive, 1)
	_, err := c.Acquire(context.Background(), "storm", Interactive)
	require.Equal(t, ReasonQueueFull, reason(err))
	k.advance(60 * time.Millisecond) // its queued unit expires: the storm is idle now
	g := next(t, out)
	require.Equal(t, ReasonWaitExpired, reason(g.err))
	require.Equal(t, 0, c.Queued("storm", Interactive))

	ask(c, "storm", Interactive, out)
	awaitQueued(t, c, "storm", Interactive, 1)
	ask(c, "victim", Interactive, out)
	awaitQueued(t, c, "victim", Interactive, 1)
	hold()
	g = next(t, out)
	require.Equal(t, "victim", g.flow, "the refused storm queued behind the sparse victim")
	g.release()
	g = next(t, out)
	require.Equal(t, "storm", g.flow)
	g.release()

	// Two seconds on, the storm is sparse again.
	require.True(t, c.isBacklogged("storm"))
	k.advance(2 * time.Second)
	require.False(t, c.isBacklogged("storm"))
}

func (c *Controller) isBacklogged(flow string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.backlogged(c.levels[Interactive].flows[flow], c.cfg.Clock.Now())
}

// An expired wait refuses: wait_expired, 429 concurrency_limited with
// Retry-After, counted and the flow's queue emptied.
func TestAnExpiredWaitRefuses(t *testing.T) {
	t.Parallel()
	c, k, reg := setup(t, func(cfg *Config) { cfg.Seats = 1 })
	now(t, c, "b")() // another realm is active
	hold := now(t, c, "a")
	out := make(chan grant, 1)
	ask(c, "a", Interactive, out)
	awaitQueued(t, c, "a", Interactive, 1)
	k.advance(49 * time.Millisecond)
	none(t, out)
	k.advance(time.Millisecond)
	g := next(t, out)
	var e *appdor.Error
	require.ErrorAs(t, g.err, &e)
	require.Equal(t, appdor.EConcurrencyLimited, e.Code)
	require.Equal(t, time.Second, e.RetryAfter)
	require.Equal(t, ReasonWaitExpired, reason(g.err))
	require.Equal(t, 0, c.Queued("a", Interactive))
	require.Equal(t, 1.0, counter(t, reg, "appdor_fairness_refused_total", "a", "interactive", ReasonWaitExpired))
	hold()
}

// A realm alone waits behind its own work past the wait bound: the bound
// keeps other realms' latency, and there are none. Once another realm is
// active, the wait expires.
func TestARealmAloneIsNotRefusedForWaiting(t *testing.T) {
	t.Parallel()
	c, k, reg := setup(t, func(cfg *Config) { cfg.Seats = 1 })
	hold := now(t, c, "lone")
	out := make(chan grant, 2)
	ask(c, "lone", Interactive, out)
	ask(c, "lone", Interactive, out)
	awaitQueued(t, c, "lone", Interactive, 2)
	k.advance(c.cfg.WaitBound)
	k.advance(3 * c.cfg.WaitBound)
	none(t, out)
	hold()
	g := next(t, out)
	require.NoError(t, g.err)
	require.Equal(t, 1, c.Queued("lone", Interactive))
	require.Equal(t, 0.0, counter(t, reg, "appdor_fairness_refused_total", "lone", "interactive", ReasonWaitExpired))

	// Another realm arrives (and goes): the lone realm's remaining wait is
	// refused when its bound next comes round.
	ctx, cancel := context.WithCancel(context.Background())
	other := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "other", Interactive)
		other <- err
	}()
	awaitQueued(t, c, "other", Interactive, 1)
	cancel()
	require.Equal(t, ReasonCanceled, reason(<-other))
	k.advance(c.cfg.WaitBound)
	require.Equal(t, ReasonWaitExpired, reason(next(t, out).err))
	require.Equal(t, 0, c.Queued("lone", Interactive))
	g.release()
	require.Equal(t, 0, c.InUse(Interactive))
}

// A full queue refuses at once.
func TestAFullQueueRefusesAtOnce(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, func(cfg *Config) { cfg.Seats, cfg.QueueLength = 1, 2 })
	hold := now(t, c, "a")
	out := make(chan grant, 2)
	ask(c, "a", Interactive, out)
	ask(c, "a", Interactive, out)
	awaitQueued(t, c, "a", Interactive, 2)
	_, err := c.Acquire(context.Background(), "a", Interactive)
	require.Equal(t, ReasonQueueFull, reason(err))
	hold()
	for range 2 {
		g := next(t, out)
		require.NoError(t, g.err)
		g.release()
	}
}

// A waiter whose caller goes away leaves the queue.
func TestAWaiterThatGoesAwayLeavesTheQueue(t *testing.T) {
	t.Parallel()
	c, _, reg := setup(t, func(cfg *Config) { cfg.Seats = 1 })
	hold := now(t, c, "a")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "a", Interactive)
		done <- err
	}()
	awaitQueued(t, c, "a", Interactive, 1)
	cancel()
	require.Equal(t, ReasonCanceled, reason(<-done))
	require.Equal(t, 0, c.Queued("a", Interactive))
	require.Equal(t, 1.0, counter(t, reg, "appdor_fairness_refused_total", "a", "interactive", ReasonCanceled))
	hold()
	require.Equal(t, 0, c.InUse(Interactive))
}

// Measured service time advances a flow's virtual time: a backlogged flow of
// heavy units gets a seat less often than a backlogged flow of light ones.
func TestHeavyWorkFallsBehindLightWork(t *testing.T) {
	t.Parallel()
	c, k, _ := setup(t, func(cfg *Config) { cfg.Seats, cfg.WaitBound, cfg.QueueLength = 1, time.Hour, 64 })
	hold := now(t, c, "x")
	out := make(chan grant, 64)
	for range 30 {
		ask(c, "heavy", Interactive, out)
		ask(c, "light", Interactive, out)
	}
	awaitQueued(t, c, "heavy", Interactive, 30)
	awaitQueued(t, c, "light", Interactive, 30)
	hold()
	served := map[string]int{}
	for range 33 {
		g := next(t, out)
		served[g.flow]++
		if g.flow == "heavy" {
			k.advance(10 * time.Millisecond)
		} else {
			k.advance(time.Millisecond)
		}
		g.release()
	}
	require.Greater(t, served["light"], 3*served["heavy"], "served: %v", served)
	require.GreaterOrEqual(t, served["heavy"], 2, "heavy work still progresses: %v", served)
}

// While several realms are active, backlogged realms together hold at most
// BackloggedSeats seats, even with seats free; sparse realms take the free
// ones, one at a time each.
func TestBackloggedRealmsTogetherHoldTheirSeats(t *testing.T) {
	t.Parallel()
	c, k, _ := setup(t, func(cfg *Config) { cfg.Seats, cfg.BackloggedSeats = 4, 1 })
	var fill []func()
	for range 4 {
		fill = append(fill, now(t, c, "filler")) // alone: every seat
	}
	stormed(t, c, k, []string{"storm"}, 0, nil)
	for _, r := range fill {
		r()
	}
	out := make(chan grant, 8)
	for range 3 {
		ask(c, "storm", Interactive, out)
	}
	g := next(t, out)
	require.NoError(t, g.err)
	awaitQueued(t, c, "storm", Interactive, 2)
	require.Equal(t, 1, c.InUse(Interactive), "the backlogged storm holds one seat, three are free")

	v := now(t, c, "victim") // a sparse realm: one at a time
	require.Equal(t, 2, c.InUse(Interactive))
	victim := make(chan grant, 1)
	ask(c, "victim", Interactive, victim) // its second waits for its first
	awaitQueued(t, c, "victim", Interactive, 1)
	b := now(t, c, "b") // another sparse realm takes a free seat at once
	require.Equal(t, 3, c.InUse(Interactive))
	v()
	vg := next(t, victim)
	require.NoError(t, vg.err)
	g.release()
	g2 := next(t, out)
	require.NoError(t, g2.err, "the freed seat is the storm's backlogged seat")
	for _, r := range []func(){b, vg.release, g2.release} {
		r()
	}
	g3 := next(t, out)
	require.NoError(t, g3.err)
	g3.release()
}

// Background work runs in seats of its own: it never takes a seat an
// interactive request waits for, and waits (within its context) instead of
// being refused.
func TestBackgroundWorkNeverTakesAnInteractiveSeat(t *testing.T) {
	t.Parallel()
	c, k, _ := setup(t, func(cfg *Config) { cfg.Seats, cfg.BackgroundSeats, cfg.WaitBound = 1, 1, time.Hour })
	req := now(t, c, "a")
	waiting := make(chan grant, 1)
	ask(c, "a", Interactive, waiting)
	awaitQueued(t, c, "a", Interactive, 1)

	bg, err := c.Acquire(context.Background(), "a", Background)
	require.NoError(t, err, "background work has its own seat")
	bgOut := make(chan grant, 2)
	ask(c, "a", Background, bgOut)
	ask(c, "b", Background, bgOut)
	awaitQueued(t, c, "a", Background, 1)
	awaitQueued(t, c, "b", Background, 1)
	k.advance(time.Minute) // background work has no wait bound
	none(t, bgOut)

	req()
	g := next(t, waiting)
	require.NoError(t, g.err, "the freed interactive seat went to the waiting request")
	require.Equal(t, 1, c.InUse(Interactive))
	require.Equal(t, 1, c.InUse(Background))
	bg()
	first := next(t, bgOut)
	require.NoError(t, first.err)
	require.Equal(t, "b", first.flow, "between realms, background work is fair too")
	first.release()
	second := next(t, bgOut)
	require.NoError(t, second.err)
	second.release()
	g.release()

	// Background work whose context ends gives up waiting.
	hold, _ := c.Acquire(context.Background(), "a", Background)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Acquire(ctx, "a", Background)
	require.Equal(t, ReasonCanceled, reason(err))
	hold()
}

func TestReleaseIsIdempotent(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, nil)
	rel := now(t, c, "a")
	rel()
	rel()
	require.Equal(t, 0, c.InUse(Interactive))
}

func TestOffAdmitsEverything(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, func(cfg *Config) { cfg.Off, cfg.Seats = true, 1 })
	for range 100 {
		now(t, c, "a")
	}
	require.Equal(t, 0, c.InUse(Interactive))
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	c, _, reg := setup(t, func(cfg *Config) { cfg.Seats = 1 })
	rel := now(t, c, "a")
	require.Equal(t, 1.0, gauge(t, reg, "appdor_fairness_seats_in_use", "a", "interactive"))
	out := make(chan grant, 1)
	ask(c, "b", Interactive, out)
	awaitQueued(t, c, "b", Interactive, 1)
	require.Equal(t, 1.0, gauge(t, reg, "appdor_fairness_queue_length", "b", "interactive"))
	rel()
	g := next(t, out)
	require.NoError(t, g.err)
	require.Equal(t, 0.0, gauge(t, reg, "appdor_fairness_queue_length", "b", "interactive"))
	require.Equal(t, 1.0, counter(t, reg, "appdor_fairness_dispatched_total", "a", "interactive"))
	require.Equal(t, 1.0, counter(t, reg, "appdor_fairness_dispatched_total", "b", "interactive"))
	g.release()
	require.Equal(t, 0.0, gauge(t, reg, "appdor_fairness_seats_in_use", "b", "interactive"))
	require.Equal(t, 2, c.Active())
}

// Under real concurrency, seats are never over-committed and every unit is
// granted or refused.
func TestConcurrentNeverOverCommits(t *testing.T) {
	t.Parallel()
	c := New(Config{Seats: 3, BackgroundSeats: 1, QueueLength: 4, WaitBound: 5 * time.Millisecond}, nil)
	var inflight, peak, granted, refusedN atomic.Int64
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			flow := []string{"a", "b", "c", "d"}[w%4]
			for range 200 {
				rel, err := c.Acquire(context.Background(), flow, Interactive)
				if err != nil {
					refusedN.Add(1)
					continue
				}
				granted.Add(1)
				n := inflight.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(50 * time.Microsecond)
				inflight.Add(-1)
				rel()
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, peak.Load(), int64(3))
	require.Equal(t, int64(32*200), granted.Load()+refusedN.Load())
	require.Equal(t, 0, c.InUse(Interactive))
}

func find(t *testing.T, reg *prometheus.Registry, name string, labels ...string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]bool{}
			for _, lp := range m.GetLabel() {
				have[lp.GetValue()] = true
			}
			for _, l := range labels {
				if !have[l] {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	m := find(t, reg, name, labels...)
	if m == nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

func gauge(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	m := find(t, reg, name, labels...)
	if m == nil {
		return 0
	}
	return m.GetGauge().GetValue()
}

// A light realm whose one overlapping request waited too long is not taken
// for a storm: with nothing of its own queued ahead of that request, its
// next request is sparse again, while a storm refused with work queued ahead
// is not.
func TestALightRealmsExpiredOverlapKeepsItSparse(t *testing.T) {
	t.Parallel()
	c, k, _ := setup(t, func(cfg *Config) { cfg.Seats = 3 })
	s1, s2 := now(t, c, "storm"), now(t, c, "storm")
	v := now(t, c, "victim")
	out := make(chan grant, 8)
	ask(c, "victim", Interactive, out) // overlaps: waits, no seat free
	awaitQueued(t, c, "victim", Interactive, 1)
	ask(c, "storm", Interactive, out)
	awaitQueued(t, c, "storm", Interactive, 1)
	ask(c, "storm", Interactive, out)
	awaitQueued(t, c, "storm", Interactive, 2)
	k.advance(c.cfg.WaitBound)
	for range 3 {
		require.Equal(t, ReasonWaitExpired, reason(next(t, out).err))
	}
	v()

	other := now(t, c, "other")       // the seats are full again
	ask(c, "storm", Interactive, out) // refused with work ahead: not sparse
	awaitQueued(t, c, "storm", Interactive, 1)
	ask(c, "victim", Interactive, out)
	awaitQueued(t, c, "victim", Interactive, 1)
	other()
	g := next(t, out)
	require.Equal(t, "victim", g.flow, "the victim is still sparse")
	g.release()
	s1()
	g = next(t, out)
	require.Equal(t, "storm", g.flow)
	g.release()
	s2()
}

// Realms that arrive together, not measured yet, queue behind a realm at
// work whose units are known to be light: they are taken to be heavy until
// their first unit is measured.
func TestArrivingRealmsQueueBehindAMeasuredLightRealm(t *testing.T) {
	t.Parallel()
	c, k, _ := setup(t, func(cfg *Config) { cfg.Seats, cfg.WaitBound = 1, time.Hour })
	light := now(t, c, "light")
	k.advance(3 * time.Millisecond)
	light()
	hold := now(t, c, "x")
	out := make(chan grant, 8)
	for i := range 4 {
		ask(c, fmt.Sprintf("new%d", i), Interactive, out)
		awaitQueued(t, c, fmt.Sprintf("new%d", i), Interactive, 1)
	}
	ask(c, "light", Interactive, out)
	awaitQueued(t, c, "light", Interactive, 1)
	hold()
	g := next(t, out)
	require.Equal(t, "light", g.flow)
	g.release()
	for range 4 {
		g := next(t, out)
		require.NoError(t, g.err)
		g.release()
	}
}

// A realm found backlogged gets one DEBUG line, not one per refusal; its
// refusal episode one WARN line.
func TestBackloggedIsLoggedOncePerEpisode(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, _, _ := setup(t, func(cfg *Config) { cfg.Seats, cfg.QueueLength, cfg.Log = 1, 1, log })
	hold := now(t, c, "other")
	out := make(chan grant, 8)
	ask(c, "storm", Interactive, out)
	awaitQueued(t, c, "storm", Interactive, 1)
	for range 3 {
		_, err := c.Acquire(context.Background(), "storm", Interactive)
		require.Equal(t, ReasonQueueFull, reason(err))
	}
	require.Equal(t, 1, strings.Count(buf.String(), `"msg":"fairness: backlogged"`), buf.String())
	require.Equal(t, 1, strings.Count(buf.String(), `"msg":"fairness: concurrency_limited"`), buf.String())
	require.Contains(t, buf.String(), `"realm":"storm"`)
	hold()
	next(t, out).release()
}
