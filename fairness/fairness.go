// Package fairness keeps Appdor's second promise: no realm's load becomes
// another realm's latency. It is an admission controller keyed by realm: every
// unit of work (an HTTP request, a batch of a CSV import) takes a slot before
// it touches the database and gives it back when done, and work over the
// realm's share is refused at once, never queued.
//
// # The algorithm
//
// Capacity is counted in slots of concurrent work: Capacity slots for realms
// at work and Reserve slots on top. By default Capacity is two slots per core
// (GOMAXPROCS), never more than the pool size minus the reserve, and Reserve
// is max(6, Capacity/2). CPU is the scarce resource (two heavy reads already
// keep two cores busy); a slot is held only while the handler runs, part CPU
// and part round trips to PostgreSQL.
//
// A realm is active while it has work in flight or made a request within
// ActiveWindow (default 2s). A realm alone may use the whole Capacity, and the
// reserve but its last slot: work-conserving. When two or more are active
// they share E = max(1, Capacity/2), each max(1, E/N) for N active realms.
// What the controller learns of a realm (its recent refusals and time in
// flight, its counters) is kept for Memory (default 5m) after its last
// request.
//
// Realms are told apart by how they behave, not by who they are:
//
//   - hot: refused HotAfter (default 4) times within the last one to two
//     windows and at least once per eight admissions, or heavy: holding
//     HeavyAt (default 3) slots or more on average over that time. A
//     storming realm is hot whether it honors Retry-After (its clients keep
//     being refused) or hogs what it gets (heavy). While realms compete, hot
//     realms together hold at most max(1, E/2) slots (one on two cores), and
//     only while no other realm has work in flight: a hot realm's request
//     waits up to the Hold for such a moment. Sixteen storming realms weigh
//     on the cores no more than one does, and never take the reserve.
//   - new: active for less than FreshFor (default ActiveWindow), because it
//     arrived or came back after a quiet spell, while settled realms (active
//     for longer) are at work. A new realm has not shown yet what it will do
//     now, so new realms together run at most max(1, E/2) requests at once,
//     and a new realm's request waits up to the Hold for its turn before it
//     is refused: an arriving realm gets in within milliseconds when the lane
//     is free, and sixteen storms arriving at once weigh on the realms
//     already at work no more than one request does. When every active realm
//     is new (a restart) nobody is held back.
//   - light: neither. A light realm takes its share, then borrows up to the
//     reserve but one slot, from any free slot but the last (its requests
//     overlap when an answer is slow); an arriving realm with nothing in
//     flight takes a reserve slot at once.
//
// A refusal is cheap: the middleware answers with a pre-encoded 429 body and
// Retry-After (RetryAfter, default 1s). A hot or new realm's refusal is
// answered after a random delay of up to Spread (default 1s), with
// Retry-After of one or two seconds at random. The decision is made at once;
// the delayed answer holds no slot and no database connection. What it buys
// is spread in time: sixty storm workers refused together and told
// "Retry-After: 1" come back together, a wave of sixty requests in the same
// few milliseconds each second, and a light realm's slow requests were the
// ones that met those waves (8.5 storm arrivals beside each slow request on
// average, 0.9 beside the others). A client that ignores Retry-After is
// slowed by the same delay instead of burning the cores on refusals.
//
// Background work ("import", "automation") goes through Acquire, which waits
// (bounded by its context) for a slot within the realm's share and Capacity —
// never the reserve, so background work can never push a request out. Acquire
// inside a request that already holds its realm's slot is reentrant: the work
// runs under the request's slot.
//
// fairness knows nothing of grid or tenancy: a realm is a string to it.
package fairness

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/appdor/appdor"
)

// Classes of work.
const (
	ClassRequest = "request" // an HTTP request: admitted at once or refused
	ClassImport  = "import"  // background work: waits, within its context, for a slot
)

// Reasons for a refusal, as in appdor_fairness_refused_total{reason}.
const (
	ReasonRealmLimit = "realm_limit" // the realm has its whole share in flight
	ReasonCapacity   = "capacity"    // every slot is taken
	ReasonCanceled   = "canceled"    // background work gave up waiting
	ReasonNewRealm   = "new_realm"   // new realms have their slots in flight
)

// Defaults.
const (
	DefaultActiveWindow = 2 * time.Second
	DefaultRetryAfter   = time.Second
	DefaultHold         = 20 * time.Millisecond
	DefaultSpread       = time.Second
	DefaultHotAfter     = 4
	DefaultHeavyAt      = 3.0
	DefaultMemory       = 5 * time.Minute
)

// Config sizes the controller. The zero value is on, sized automatically.
type Config struct {
	// Off disables the controller: every request is admitted. For the storm
	// harness's negative control only.
	Off bool
	// Capacity is the number of slots for realms at work; 0 picks
	// min(2×GOMAXPROCS, PoolSize-Reserve).
	Capacity int
	// Reserve is the number of extra slots only realms that are not hot may
	// take; 0 picks max(3, Capacity/2).
	Reserve int
	// PoolSize is the database pool's size, used to size Capacity.
	PoolSize int
	// ActiveWindow is how long a realm counts as active after its last
	// request; 0 is DefaultActiveWindow.
	ActiveWindow time.Duration
	// RetryAfter is what a refusal asks the client to wait; 0 is
	// DefaultRetryAfter.
	RetryAfter time.Duration
	// Hold delays the refusal of a hot realm; 0 is DefaultHold, negative
	// disables the hold.
	Hold time.Duration
	// Spread is how long at most the answer to a hot realm's refusal is
	// delayed, at random, after its hold; 0 is DefaultSpread, negative
	// answers at once.
	Spread time.Duration
	// HotAfter is how many refusals within one to two ActiveWindows make a
	// realm hot; 0 is DefaultHotAfter.
	HotAfter int
	// HeavyAt is the average number of slots in flight, over one to two
	// ActiveWindows, from which a realm counts as hot even when it is not
	// refused; 0 is DefaultHeavyAt.
	HeavyAt float64
	// FreshFor is how long a realm that arrives or comes back after a quiet
	// spell counts as new (--fairness-new-realm); 0 is ActiveWindow,
	// negative turns the probation off.
	FreshFor time.Duration
	// Memory is how long a realm's history is kept after its last request;
	// 0 is DefaultMemory. It is never shorter than two ActiveWindows.
	Memory time.Duration
	// Now is the clock; nil is time.Now. Tests set it.
	Now func() time.Time
	// Log, when set, gets one line when a realm turns hot (the start of a
	// refusal episode), not one per refusal.
	Log *slog.Logger
}

// Sized returns cfg with every automatic value filled in.
func (cfg Config) Sized() Config {
	if cfg.Capacity <= 0 {
		cfg.Capacity = 2 * runtime.GOMAXPROCS(0)
		if cfg.Reserve <= 0 {
			cfg.Reserve = max(6, cfg.Capacity/2)
		}
		// Every admitted slot must find a connection: capacity and reserve
		// together fit the pool, half and half when it is small.
		if cfg.PoolSize > 0 && cfg.Capacity+cfg.Reserve > cfg.PoolSize {
			cfg.Reserve = min(cfg.Reserve, max(1, cfg.PoolSize/2))
			cfg.Capacity = max(1, min(cfg.Capacity, cfg.PoolSize-cfg.Reserve))
		}
	}
	if cfg.Reserve <= 0 {
		cfg.Reserve = max(6, cfg.Capacity/2)
	}
	if cfg.ActiveWindow <= 0 {
		cfg.ActiveWindow = DefaultActiveWindow
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.Hold == 0 {
		cfg.Hold = DefaultHold
	}
	if cfg.Hold < 0 {
		cfg.Hold = 0
	}
	if cfg.Spread == 0 {
		cfg.Spread = DefaultSpread
	}
	if cfg.Spread < 0 {
		cfg.Spread = 0
	}
	if cfg.HotAfter <= 0 {
		cfg.HotAfter = DefaultHotAfter
	}
	if cfg.FreshFor == 0 {
		cfg.FreshFor = cfg.ActiveWindow
	}
	if cfg.HeavyAt <= 0 {
		cfg.HeavyAt = DefaultHeavyAt
	}
	if cfg.Memory <= 0 {
		cfg.Memory = DefaultMemory
	}
	cfg.Memory = max(cfg.Memory, 2*cfg.ActiveWindow)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg
}

// realm is one realm's state. It lives for Memory after the realm's last
// request.
type realm struct {
	name     string
	inflight int
	active   bool // counted in Controller.active
	waiting  int  // work in the queue
	lastSeen time.Time
	// Refusals and admissions in the current and the previous window.
	refusedCur, refusedPrev   int
	admittedCur, admittedPrev int
	// busyCur and busyPrev integrate the realm's slots in flight over time
	// (slot-nanoseconds) in the current and the previous window; busySince
	// is when inflight last changed.
	busyCur, busyPrev float64
	activeSince       time.Time // when it last became active
	busySince         time.Time
	windowStart       time.Time
	hot               bool // logged as hot in this episode
	probationLogged   bool // logged as refused on probation
	gauge             prometheus.Gauge
	admitted          map[string]prometheus.Counter
}

// Controller admits work per realm. It is safe for concurrent use.
type Controller struct {
	cfg Config
	m   *metrics

	mu     sync.Mutex
	realms map[string]*realm
	active int // realms marked active, as of the last sweep
	// settled counts the active realms past their first FreshFor, as of the
	// last sweep: while there are any, new realms are held back.
	settled int
	// nextSettle is when the next active new realm stops being new, so the
	// sweep counts it as settled then (zero: no new realm is active).
	nextSettle time.Time
	total      int // slots in flight, all realms
	// hotInflight counts the slots in flight taken by realms that were hot
	// when they took them.
	hotInflight int
	// newInflight counts the slots in flight taken by new realms while
	// settled realms were active: together they hold at most newCap.
	newInflight int
	lastSweep   time.Time
	// queue holds the work waiting for a slot, oldest first. A release
	// hands its slot straight to the first waiter that may take it, so a
	// release wakes one goroutine, not every waiter.
	queue []*waiter

	holds atomic.Int64 // refusals being held right now

	onWait func() // test hook: background work has started waiting
}

// New returns a controller sized by cfg (see Config.Sized). Its metrics are
// registered on reg when reg is not nil.
func New(cfg Config, reg prometheus.Registerer) *Controller {
	cfg = cfg.Sized()
	c := &Controller{
		cfg:    cfg,
		realms: make(map[string]*realm),
	}
	c.m = newMetrics(c, reg)
	c.lastSweep = cfg.Now()
	return c
}

// Config returns the controller's configuration, with automatic values filled in.
func (c *Controller) Config() Config { return c.cfg }

// Refusal is why work was not admitted.
type Refusal struct {
	Reason string
	// Hold is how long to wait before answering, for a hot realm.
	Hold time.Duration
}

// share is each active realm's share. c.mu is held.
func (c *Controller) share() int {
	e := c.effective()
	if c.active <= 1 {
		return e
	}
	return max(1, e/c.active)
}

// effective is the capacity realms share now: all of it for a realm alone,
// half of it (one slot per core by default) when realms compete. c.mu is held.
func (c *Controller) effective() int {
	if c.active <= 1 {
		return c.cfg.Capacity
	}
	return max(1, c.cfg.Capacity/2)
}

// sweep, at most four times a window and when a new realm settles, stops
// counting realms that have gone quiet as active, counts the settled ones
// again, and forgets realms idle for Memory. c.mu is held.
func (c *Controller) sweep(now time.Time) {
	settling := !c.nextSettle.IsZero() && !now.Before(c.nextSettle)
	if now.Sub(c.lastSweep) < c.cfg.ActiveWindow/4 && !settling {
		return
	}
	c.lastSweep = now
	c.settled = 0
	c.nextSettle = time.Time{}
	for name, r := range c.realms {
		idle := now.Sub(r.lastSeen)
		if r.inflight > 0 || r.waiting > 0 || idle < c.cfg.ActiveWindow {
			c.tally(r, now)
			continue
		}
		if r.active {
			r.active = false
			c.active--
		}
		if idle >= c.cfg.Memory {
			delete(c.realms, name)
			c.m.forget(name)
		}
	}
}

// lookup returns realm's state, counting it as active from now. c.mu is held.
func (c *Controller) lookup(name string, now time.Time) *realm {
	r := c.realms[name]
	if r == nil {
		r = &realm{name: name, admitted: make(map[string]prometheus.Counter, 1)}
		r.gauge = c.m.inflight.WithLabelValues(name)
		c.realms[name] = r
	}
	if !r.active {
		r.activeSince, r.probationLogged = now, false
		r.active = true
		c.active++
		c.tally(r, now)
	}
	return r
}

// tally counts r, active, as settled, or notes when it will stop being new.
// c.mu is held.
func (c *Controller) tally(r *realm, now time.Time) {
	if !c.isNew(r, now) {
		c.settled++
		return
	}
	at := r.activeSince.Add(c.cfg.FreshFor)
	if c.nextSettle.IsZero() || at.Before(c.nextSettle) {
		c.nextSettle = at
	}
}

// Admit tries to admit one unit of work of class for realm, at once. On
// success it returns release, which must be called exactly once when the work
// is done (calling it again does nothing).
func (c *Controller) Admit(realmName, class string) (release func(), refusal *Refusal) {
	if c.cfg.Off {
		c.m.admitted.WithLabelValues(realmName, class).Inc()
		return func() {}, nil
	}
	now := c.cfg.Now()
	c.mu.Lock()
	r, release, reason, held := c.try(realmName, class, now)
	if reason != "" {
		r.refusedCur++ // check has rotated r's windows to now
		hot := c.hot(r, now)
		var turned, probation bool
		if reason == ReasonNewRealm {
			probation = !r.probationLogged
			r.probationLogged = true
		} else {
			turned = hot && !r.hot
			r.hot = hot
		}
		var inflight, share, total, refusedN, newInflight int
		var heavy bool
		if turned || probation {
			inflight, share, total, newInflight = r.inflight, c.share(), c.total, c.newInflight
			heavy, refusedN = c.heavy(r, now), r.refusedCur+r.refusedPrev
		}
		c.mu.Unlock()
		if turned && c.cfg.Log != nil {
			c.cfg.Log.Warn("fairness: realm is over its share and keeps asking; refusing with a hold",
				slog.String("realm", realmName), slog.String("reason", reason),
				slog.Int("inflight", inflight), slog.Int("share", share), slog.Int("total", total),
				slog.Bool("heavy", heavy), slog.Int("refused", refusedN))
		}
		if probation && c.cfg.Log != nil {
			c.cfg.Log.Info("fairness: new realm asks for more than new realms may run at once; its requests wait their turn",
				slog.String("realm", realmName), slog.String("reason", reason),
				slog.Int("new_inflight", newInflight), slog.Int("total", total))
		}
		ref := &Refusal{Reason: reason}
		if held || hot {
			ref.Hold = c.cfg.Hold
		} else {
			c.m.refused.WithLabelValues(realmName, class, reason).Inc()
		}
		return nil, ref
	}
	c.mu.Unlock()
	return release, nil
}

// try takes a slot for realm's work of class if check allows it now, and
// returns the realm's state with the slot's release, or why it may not and
// whether that refusal is one to hold. c.mu is held.
func (c *Controller) try(realmName, class string, now time.Time) (r *realm, release func(), reason string, held bool) {
	c.sweep(now)
	r = c.lookup(realmName, now)
	r.lastSeen = now
	request := class == ClassRequest
	reason, held, t := c.check(r, now, request)
	if reason == "" {
		release = c.admitFor(r, class, request, now, t)
	}
	return r, release, reason, held
}

// CountRefusal counts a held refusal that found no slot within its hold:
// Admit leaves those to the caller, which may still admit the request.
func (c *Controller) CountRefusal(realmName, class string, ref *Refusal) {
	c.m.refused.WithLabelValues(realmName, class, ref.Reason).Inc()
}

// AdmitWithin waits up to d (or until ctx ends) for a slot that Admit
// refused, trying again each time a slot is released. It counts no further
// refusal: the one that sent the request here was counted.
func (c *Controller) AdmitWithin(ctx context.Context, realmName, class string, d time.Duration) (release func(), ok bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	return c.waitForSlot(ctx, realmName, class, timer.C)
}

// waiter is work waiting in the queue for a slot.
type waiter struct {
	r       *realm
	class   string
	request bool
	ready   chan func() // gets the release of the slot handed to it
}

// waitForSlot admits work of class in realm as soon as check allows it, in
// turn with other waiting work, until ctx ends or timeout fires (nil:
// never). A request may take the reserve and counts as an admission of its
// realm; background work may not and does not.
func (c *Controller) waitForSlot(ctx context.Context, realmName, class string, timeout <-chan time.Time) (func(), bool) {
	now := c.cfg.Now()
	c.mu.Lock()
	r, release, reason, _ := c.try(realmName, class, now)
	if reason == "" {
		c.mu.Unlock()
		return release, true
	}
	request := class == ClassRequest
	w := &waiter{r: r, class: class, request: request, ready: make(chan func(), 1)}
	c.queue = append(c.queue, w)
	r.waiting++
	c.mu.Unlock()
	if c.onWait != nil && !request {
		c.onWait()
	}
	select {
	case release := <-w.ready:
		return release, true
	case <-timeout:
	case <-ctx.Done():
	}
	c.mu.Lock()
	for i, q := range c.queue {
		if q == w {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			r.waiting--
			c.mu.Unlock()
			return nil, false
		}
	}
	c.mu.Unlock()
	// A slot was handed over as the wait ended: take it.
	return <-w.ready, true
}

// admitFor takes a slot for r, which check has just allowed at now (and
// whose windows it has rotated to now), and returns its release. c.mu is
// held.
func (c *Controller) admitFor(r *realm, class string, request bool, now time.Time, t taken) func() {
	if request {
		r.admittedCur++
	}
	c.admitLocked(r, class, t, now)
	return c.releaser(r, t)
}

// handOff gives the slots a release freed to the waiters that may take
// them, oldest first. c.mu is held.
func (c *Controller) handOff(now time.Time) {
	for i := 0; i < len(c.queue); {
		w := c.queue[i]
		reason, _, t := c.check(w.r, now, w.request)
		if reason != "" {
			i++
			continue
		}
		c.queue = append(c.queue[:i], c.queue[i+1:]...)
		w.r.waiting--
		w.r.lastSeen = now
		w.ready <- c.admitFor(w.r, w.class, w.request, now, t)
	}
}

// rotate starts a new counting window for r when the current one is over.
// c.mu is held.
func (c *Controller) rotate(r *realm, now time.Time) {
	c.accrue(r, now)
	el := now.Sub(r.windowStart)
	if el < c.cfg.ActiveWindow {
		return
	}
	r.refusedPrev, r.admittedPrev, r.busyPrev = r.refusedCur, r.admittedCur, r.busyCur
	if el >= 2*c.cfg.ActiveWindow {
		r.refusedPrev, r.admittedPrev, r.busyPrev = 0, 0, 0
	}
	r.refusedCur, r.admittedCur, r.busyCur = 0, 0, 0
	r.windowStart = now
}

// accrue adds r's slots in flight since the last change to its busy time.
// c.mu is held.
func (c *Controller) accrue(r *realm, now time.Time) {
	if !r.busySince.IsZero() && now.After(r.busySince) {
		r.busyCur += float64(r.inflight) * float64(now.Sub(r.busySince))
	}
	r.busySince = now
}

// heavy says whether r has held, on average over this window and the last,
// HeavyAt slots or more: it keeps a core busy by itself. A realm that gets
// what it asks for is never refused, so refusals alone cannot tell a realm
// hogging the reserve from a light one; its time in flight can. c.mu is held.
func (c *Controller) heavy(r *realm, now time.Time) bool {
	span := float64(now.Sub(r.windowStart)) + float64(c.cfg.ActiveWindow)
	return (r.busyCur+r.busyPrev)/span >= c.cfg.HeavyAt
}

// hot says whether r keeps asking for more than it gets — at least HotAfter
// refusals in this window and the last, and at least one for every
// hotRatio admissions (a storm is refused about as often as it is admitted;
// a busy light realm caught by a moment of slowness is refused a handful of
// times among hundreds of admissions, and must not be thrown in with the
// storms for it) — or is heavy. c.mu is held.
func (c *Controller) hot(r *realm, now time.Time) bool {
	c.rotate(r, now)
	refused := r.refusedCur + r.refusedPrev
	if refused >= c.cfg.HotAfter && refused*hotRatio >= r.admittedCur+r.admittedPrev {
		return true
	}
	return c.heavy(r, now)
}

// hotRatio: a realm refused less than once per hotRatio admissions is not
// hot by its refusals.
const hotRatio = 8

// isNew says whether r was first seen less than FreshFor ago: it has no
// history yet to show whether it is light. c.mu is held.
func (c *Controller) isNew(r *realm, now time.Time) bool {
	return c.cfg.FreshFor > 0 && now.Sub(r.activeSince) < c.cfg.FreshFor
}

// onProbation says whether r is held back as new: it is new and realms with a
// history are at work beside it. c.mu is held.
func (c *Controller) onProbation(r *realm, now time.Time) bool {
	return c.active > 1 && c.settled > 0 && c.isNew(r, now)
}

// borrowMax is how many slots a light realm may hold beyond its share: all
// of the reserve but one. c.mu is held.
func (c *Controller) borrowMax() int { return max(1, c.cfg.Reserve-1) }

// newCap is how many slots new realms on probation may hold together: as
// many as hot realms, one on two cores. c.mu is held.
func (c *Controller) newCap() int { return c.hotCap() }

// hotCap is how many slots hot realms may hold together while realms
// compete: half the shared capacity (one slot on two cores), so that sixteen
// storming realms weigh on the cores no more than one does. c.mu is held.
func (c *Controller) hotCap() int { return max(1, c.effective()/2) }

// hotMay says whether a hot realm may take a slot while realms compete: only
// within hotCap, and only while no light realm has work in flight, so that
// light work never shares the cores with more than the one statement it found
// running. A hot realm's request waits up to the Hold for such a moment
// (AdmitWithin) rather than being refused at once. c.mu is held.
func (c *Controller) hotMay() bool {
	return c.hotInflight < c.hotCap() && c.total == c.hotInflight
}

// check says why r may not take a slot now, or "" when it may; whether the
// refusal is one to hold (a hot or new realm's); and how a slot taken now
// counts. It brings r's counting windows to now (hot rotates them), so the
// caller may count the admission or refusal at once. c.mu is held.
func (c *Controller) check(r *realm, now time.Time, mayReserve bool) (reason string, hold bool, t taken) {
	share := c.share()
	hot := c.hot(r, now)
	if !hot {
		r.hot = false // an episode is over
	}
	probation := c.onProbation(r, now)
	t = taken{hot: hot, fresh: probation}
	if c.active <= 1 && r.inflight < share {
		return "", false, t // a realm alone may use the whole capacity
	}
	all := c.cfg.Capacity + c.cfg.Reserve
	if probation {
		// New realms take turns in their own few slots, within the
		// capacity and the reserve but its last slot.
		if c.newInflight < c.newCap() && c.total < all-1 {
			return "", false, t
		}
		return ReasonNewRealm, true, t
	}
	if r.inflight < share && c.total < c.effective() && (!hot || c.hotMay()) {
		return "", false, t
	}
	if mayReserve && !hot {
		if r.inflight == 0 && c.total < all {
			return "", false, t // an arriving realm
		}
		// Overlap: a light realm whose requests overlap (an answer was
		// slow) may borrow the reserve but one slot beyond its share,
		// from any slot but the last: a realm that turns into a storm
		// leaves room for the others before it is refused and turns hot.
		if c.total < all-1 && (c.active <= 1 || r.inflight < share+c.borrowMax()) {
			return "", false, t
		}
	}
	if r.inflight >= share {
		return ReasonRealmLimit, hot, t
	}
	return ReasonCapacity, hot, t
}

// admitLocked takes a slot for r. c.mu is held.
func (c *Controller) admitLocked(r *realm, class string, t taken, now time.Time) {
	c.accrue(r, now)
	r.inflight++
	c.total++
	if t.hot {
		c.hotInflight++
	}
	if t.fresh {
		c.newInflight++
	}
	r.gauge.Inc()
	ctr := r.admitted[class]
	if ctr == nil {
		ctr = c.m.admitted.WithLabelValues(r.name, class)
		r.admitted[class] = ctr
	}
	ctr.Inc()
}

// taken says how a slot counted when it was taken, so its release undoes the
// same counts.
type taken struct{ hot, fresh bool }

func (c *Controller) releaser(r *realm, t taken) func() {
	var done atomic.Bool
	return func() {
		if !done.CompareAndSwap(false, true) {
			return
		}
		c.mu.Lock()
		now := c.cfg.Now()
		c.accrue(r, now)
		r.inflight--
		c.total--
		if t.hot {
			c.hotInflight--
		}
		if t.fresh {
			c.newInflight--
		}
		r.lastSeen = now
		r.gauge.Dec()
		if len(c.queue) > 0 {
			c.handOff(now)
		}
		c.mu.Unlock()
	}
}

// heldKey marks a context whose request holds a slot.
type heldKey struct{}

type held struct {
	realm    string
	released atomic.Bool
}

// Acquire takes a slot for work of class in realm. A request (ClassRequest)
// is admitted at once or refused with a coded concurrency_limited error.
// Background work waits, while ctx lasts, for a slot within its realm's share
// and the Capacity; it never takes the reserve. Inside a request that holds a
// slot of the same realm (ctx from the middleware) Acquire is reentrant and
// the work runs under the request's slot.
//
// Acquire's signature is the grid's Gate interface.
func (c *Controller) Acquire(ctx context.Context, realmName, class string) (func(), error) {
	if h, ok := ctx.Value(heldKey{}).(*held); ok && h.realm == realmName && !h.released.Load() {
		c.m.admitted.WithLabelValues(realmName, class).Inc()
		return func() {}, nil
	}
	if class == ClassRequest || c.cfg.Off {
		release, ref := c.Admit(realmName, class)
		if ref != nil && ref.Hold > 0 {
			if rel, ok := c.AdmitWithin(ctx, realmName, class, ref.Hold); ok {
				return rel, nil
			}
			c.CountRefusal(realmName, class, ref)
		}
		if ref != nil {
			return nil, c.refusalError(ref)
		}
		return release, nil
	}
	if release, ok := c.waitForSlot(ctx, realmName, class, nil); ok {
		return release, nil
	}
	c.m.refused.WithLabelValues(realmName, class, ReasonCanceled).Inc()
	return nil, &appdor.Error{Code: appdor.EConcurrencyLimited,
		Message: "this realm's background work found no free slot in time", RetryAfter: c.cfg.RetryAfter}
}

func (c *Controller) refusalError(ref *Refusal) *appdor.Error {
	return &appdor.Error{
		Code:       appdor.EConcurrencyLimited,
		Message:    refusalMessage,
		Details:    map[string]string{"reason": ref.Reason},
		RetryAfter: c.cfg.RetryAfter,
	}
}

const refusalMessage = "this realm has as much work in flight as it may have now; retry after Retry-After"

// withHeld returns ctx marked as holding realm's slot.
func withHeld(ctx context.Context, h *held) context.Context {
	return context.WithValue(ctx, heldKey{}, h)
}

// Inflight is realm's work in flight now.
func (c *Controller) Inflight(realmName string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.realms[realmName]; r != nil {
		return r.inflight
	}
	return 0
}

// Total is the work in flight now, all realms.
func (c *Controller) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// Share is each active realm's share now.
func (c *Controller) Share() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweep(c.cfg.Now())
	return c.share()
}

// Active is the number of active realms now.
func (c *Controller) Active() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweep(c.cfg.Now())
	return c.active
}
