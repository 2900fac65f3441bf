// Package fairness keeps Appdor's second promise: no realm's load becomes
// another realm's latency. It is fair queuing, in the spirit of Kubernetes
// API Priority and Fairness (queueset) with FQ-CoDel's sparse flows (RFC 8290).
//
// Work runs in seats: Seats concurrently running units of interactive work
// (default two per core, within the pool) and BackgroundSeats of their own
// for background work (CSV import batches, automations). A flow is a realm
// (or FlowUnauthenticated); each flow has a FIFO queue per level.
//
//   - Sparse first: a request whose flow has nothing queued and at most one
//     unit in flight takes any free seat, or waits ahead of every backlogged
//     flow — unless, within SparseAfterRefusal, the flow had work refused
//     with work of its own queued ahead of it: a storm that idles between
//     refusals is not sparse. (Counting one unit in flight keeps a light
//     realm's overlapping request out of the storms' seats: counted as
//     backlogged, a victim's requests queued eight deep with three seats free.)
//   - Backlogged flows by virtual time: when a seat frees, the backlogged flow
//     with the lowest virtual time goes next. Each unit's measured service
//     time advances its flow's clock, so heavy work falls behind light work;
//     a flow that becomes backlogged starts at the current virtual time.
//   - While several flows are active (a request within ActiveWindow), work
//     from the queues holds at most BackloggedSeats seats together (half the
//     cores); a flow alone holds every seat (work-conserving). Measured on two
//     cores: a light read beside two storm reads is 2.8× its baseline, beside
//     one 1.5–1.8×; equal shares alone left a quiet realm ×23.6 beside
//     sixteen storms, sparse-first brought it to ×1.3–1.7.
//   - Waits are bounded: an interactive queue holds QueueLength units and a
//     unit waits at most WaitBound; a full queue or an expired wait is a
//     refusal, 429 concurrency_limited with Retry-After. Background work waits
//     as long as its context lasts, in seats no request ever waits for.
//
// Acquire is the one entry point; Middleware is Acquire for HTTP requests,
// answering a refusal with a pre-encoded 429. fairness knows nothing of grid
// or tenancy: a flow is a string to it.
package fairness

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/appdor/appdor"
)

// Level is a priority level: its own seats and its own queues.
type Level uint8

// Levels.
const (
	Interactive Level = iota // API and UI requests: bounded waits, refused beyond them
	Background               // CSV import batches, automations: wait within their context
	numLevels
)

func (l Level) String() string {
	if l == Background {
		return "background"
	}
	return "interactive"
}

// FlowUnauthenticated is the flow of credential lookups that run before a
// request has a realm.
const FlowUnauthenticated = "unauthenticated"

// Reasons for a refusal, as in appdor_fairness_refused_total{reason}.
const (
	ReasonQueueFull   = "queue_full"   // the flow's queue was full
	ReasonWaitExpired = "wait_expired" // no seat within WaitBound
	ReasonCanceled    = "canceled"     // the caller went away while queued
)

// Defaults.
const (
	DefaultQueueLength        = 64
	DefaultWaitBound          = 50 * time.Millisecond
	DefaultActiveWindow       = time.Second
	DefaultSparseAfterRefusal = 2 * time.Second
	DefaultRetryAfter         = time.Second
	// forgetAfter is how long an idle flow's state is kept.
	forgetAfter = time.Minute
	// episodeGap: a refusal this long after a flow's last one starts a new
	// refusal episode, and gets a log line.
	episodeGap = 10 * time.Second
)

// Config sizes the controller. The zero value is on, sized automatically.
type Config struct {
	// Off disables the controller: everything is admitted at once. For the
	// storm harness's negative control only.
	Off bool
	// Seats is the number of concurrently running interactive units; 0 is
	// 2×GOMAXPROCS, within the pool.
	Seats int
	// BackgroundSeats is the background level's seats; 0 is
	// max(1, GOMAXPROCS/2).
	BackgroundSeats int
	// BackloggedSeats is how many seats work taken from the queues may hold
	// together while several flows are active; 0 is max(1, GOMAXPROCS/2).
	BackloggedSeats int
	// QueueLength is each flow's interactive queue; 0 is DefaultQueueLength.
	QueueLength int
	// WaitBound is the longest an interactive unit waits for a seat; 0 is
	// DefaultWaitBound.
	WaitBound time.Duration
	// ActiveWindow is how long a flow counts as active after its last
	// request; 0 is DefaultActiveWindow.
	ActiveWindow time.Duration
	// SparseAfterRefusal is how long after a refusal a flow's requests are
	// not sparse; 0 is DefaultSparseAfterRefusal.
	SparseAfterRefusal time.Duration
	// RetryAfter is what a refusal asks the client to wait; 0 is
	// DefaultRetryAfter.
	RetryAfter time.Duration
	// PoolSize is the database pool's size: seats never exceed it.
	PoolSize int
	// Clock is the time source; nil is the real clock. Tests set it.
	Clock Clock
	// Log gets one line per refusal episode of a flow.
	Log *slog.Logger
}

// Clock is what the controller needs of time.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine after d; stop cancels it.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// Sized returns cfg with every automatic value filled in.
func (cfg Config) Sized() Config {
	cores := runtime.GOMAXPROCS(0)
	if cfg.BackgroundSeats <= 0 {
		cfg.BackgroundSeats = max(1, cores/2)
	}
	if cfg.Seats <= 0 {
		cfg.Seats = 2 * cores
		// Every seat must find a connection, background ones included.
		if cfg.PoolSize > 0 {
			cfg.Seats = max(1, min(cfg.Seats, cfg.PoolSize-cfg.BackgroundSeats))
		}
	}
	if cfg.BackloggedSeats <= 0 {
		cfg.BackloggedSeats = max(1, cores/2)
	}
	cfg.BackloggedSeats = min(cfg.BackloggedSeats, cfg.Seats)
	if cfg.QueueLength <= 0 {
		cfg.QueueLength = DefaultQueueLength
	}
	if cfg.WaitBound <= 0 {
		cfg.WaitBound = DefaultWaitBound
	}
	if cfg.ActiveWindow <= 0 {
		cfg.ActiveWindow = DefaultActiveWindow
	}
	if cfg.SparseAfterRefusal <= 0 {
		cfg.SparseAfterRefusal = DefaultSparseAfterRefusal
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	return cfg
}

// Controller dispatches work to seats, fairly between flows. It is safe for
// concurrent use.
type Controller struct {
	cfg    Config
	m      *metrics
	mu     sync.Mutex
	levels [numLevels]*level
	// active counts interactive flows with a request within ActiveWindow or
	// work in flight or queued; recounted by sweep, raised on arrival.
	active    int
	lastSweep time.Time
}

// level is one priority level's seats and queues.
type level struct {
	lvl        Level
	seats      int
	inUse      int
	backlogged int // seats held by work taken from the flows' queues
	sparse     []*waiter
	flows      map[string]*flow
	queued     int     // waiters in the flows' queues
	vnow       float64 // virtual time: the start tag of the last dispatch
	avgService float64 // EWMA of service time, seconds: a new flow's estimate
}

// flow is one realm's state at one level.
type flow struct {
	name       string
	lvl        *level
	inflight   int
	queue      []*waiter
	sparseWait int     // its waiters in the level's sparse queue
	vt         float64 // virtual finish time of its last dispatched work, seat-seconds
	estimate   float64 // EWMA of its service time, seconds
	lastSeen   time.Time
	activeTill time.Time
	refusedAt  time.Time // its last refusal, for the episode's log line
	backedAt   time.Time // its last refusal with work of its own ahead: not sparse for a while
	loggedAt   time.Time
	fm         *flowMetrics
}

func (f *flow) idle() bool { return f.inflight == 0 && len(f.queue) == 0 && f.sparseWait == 0 }

// New returns a controller sized by cfg (see Config.Sized). Its metrics are
// registered on reg when reg is not nil.
func New(cfg Config, reg prometheus.Registerer) *Controller {
	cfg = cfg.Sized()
	c := &Controller{cfg: cfg}
	for l := range numLevels {
		seats := cfg.Seats
		if l == Background {
			seats = cfg.BackgroundSeats
		}
		c.levels[l] = &level{lvl: l, seats: seats, flows: map[string]*flow{}, avgService: 0.001}
	}
	c.m = newMetrics(c, reg)
	return c
}

// Config returns the controller's configuration, with automatic values filled in.
func (c *Controller) Config() Config { return c.cfg }

const refusalMessage = "this realm has as much work waiting as it may have now; retry after Retry-After"

// refusal is the coded error of a refused unit.
func (c *Controller) refusal(reason string) *appdor.Error {
	return &appdor.Error{
		Code:       appdor.EConcurrencyLimited,
		Message:    refusalMessage,
		Details:    map[string]string{"reason": reason},
		RetryAfter: c.cfg.RetryAfter,
	}
}

// Acquire takes a seat for one unit of flow's work at level lvl, waiting in
// the flow's queue if none is free: an interactive unit up to WaitBound,
// background work while ctx lasts. On success it returns release, to be
// called exactly once when the work is done (later calls do nothing). A
// refusal is an *appdor.Error with code concurrency_limited, its reason in
// Details and a Retry-After.
func (c *Controller) Acquire(ctx context.Context, flowName string, lvl Level) (release func(), err error) {
	s, reason := c.acquire(ctx, flowName, lvl)
	if s == nil {
		return nil, c.refusal(reason)
	}
	return s.release, nil
}

// seat is one unit's hold on a seat.
type seat struct {
	c      *Controller
	f      *flow
	start  time.Time
	sparse bool
	charge float64 // the estimate charged to its flow's virtual time at start
	done   bool    // under c.mu
}

// acquire is Acquire without the error: the seat, or the refusal's reason.
func (c *Controller) acquire(ctx context.Context, flowName string, lvl Level) (*seat, string) {
	if c.cfg.Off {
		return &seat{}, ""
	}
	c.mu.Lock()
	now := c.cfg.Clock.Now()
	c.sweep(now)
	l := c.levels[lvl]
	f := c.lookup(l, flowName, now)
	sparse := lvl == Interactive && len(f.queue) == 0 && f.sparseWait == 0 && f.inflight <= 1 &&
		(f.backedAt.IsZero() || now.Sub(f.backedAt) >= c.cfg.SparseAfterRefusal)
	// At once, when nobody waits ahead and a seat is free to take.
	if l.inUse < l.seats && len(l.sparse) == 0 && (sparse || (l.queued == 0 && l.backlogged < c.backlogCap(l))) {
		s := c.start(l, f, sparse, now)
		f.fm.waited.Observe(0)
		c.mu.Unlock()
		return s, ""
	}
	if lvl == Interactive && len(f.queue)+f.sparseWait >= c.cfg.QueueLength {
		c.refuse(f, ReasonQueueFull, now, true)
		c.mu.Unlock()
		return nil, ReasonQueueFull
	}
	w := &waiter{f: f, sparse: sparse, ahead: len(f.queue) + f.sparseWait, enqueued: now, ready: make(chan struct{})}
	if sparse {
		l.sparse = append(l.sparse, w)
		f.sparseWait++
	} else {
		if len(f.queue) == 0 {
			// A flow that becomes backlogged starts at the current virtual time.
			f.vt = max(f.vt, l.vnow)
		}
		f.queue = append(f.queue, w)
		l.queued++
	}
	f.fm.queue.Inc()
	c.dispatch(l, now)
	if w.state == waitQueued && lvl == Interactive {
		w.stop = c.cfg.Clock.AfterFunc(c.cfg.WaitBound, func() { c.expire(w) })
	}
	c.mu.Unlock()

	select {
	case <-w.ready:
	case <-ctx.Done():
		c.mu.Lock()
		state := w.state
		if state == waitQueued {
			c.unqueue(w)
			w.state = waitRefused
			w.reason = ReasonCanceled
			f.fm.refused(ReasonCanceled).Inc()
		}
		c.mu.Unlock()
		if state == waitDispatched {
			if w.stop != nil {
				w.stop()
			}
			w.seat.release() // it was ours, but the caller is gone
			return nil, ReasonCanceled
		}
	}
	if w.stop != nil {
		w.stop()
	}
	if w.state != waitDispatched {
		return nil, w.reason
	}
	return w.seat, ""
}

// Waiter states; changed under c.mu, read by the waiter after ready closes.
const (
	waitQueued = iota
	waitDispatched
	waitRefused
)

// waiter is a unit of work waiting in a queue.
type waiter struct {
	f        *flow
	sparse   bool
	ahead    int // units of its flow queued ahead of it when it came
	enqueued time.Time
	ready    chan struct{}
	state    int
	reason   string
	seat     *seat
	stop     func() bool
}

// lookup returns flowName's state at l, counting it as active from now. c.mu
// is held.
func (c *Controller) lookup(l *level, name string, now time.Time) *flow {
	f := l.flows[name]
	if f == nil {
		f = &flow{name: name, lvl: l, estimate: l.avgService, vt: l.vnow, fm: c.m.flow(name, l.lvl)}
		l.flows[name] = f
	}
	if l.lvl == Interactive && !now.Before(f.activeTill) && f.idle() {
		c.active++ // sweep recounts; until then an arrival counts once
	}
	f.lastSeen = now
	f.activeTill = now.Add(c.cfg.ActiveWindow)
	return f
}

// sweep, at most four times an ActiveWindow, recounts the active flows and
// forgets flows idle for a minute. c.mu is held.
func (c *Controller) sweep(now time.Time) {
	if now.Sub(c.lastSweep) < c.cfg.ActiveWindow/4 {
		return
	}
	c.lastSweep = now
	c.active = 0
	for _, l := range c.levels {
		for name, f := range l.flows {
			if !f.idle() {
				if l.lvl == Interactive {
					c.active++
				}
				continue
			}
			if now.Before(f.activeTill) {
				if l.lvl == Interactive {
					c.active++
				}
				continue
			}
			if now.Sub(f.lastSeen) >= forgetAfter && now.Sub(f.refusedAt) >= forgetAfter {
				delete(l.flows, name)
				f.fm.forget()
			}
		}
	}
}

// backlogCap is how many seats work from the queues may hold at l now: all
// of them for a flow alone, BackloggedSeats while several are active.
// c.mu is held.
func (c *Controller) backlogCap(l *level) int {
	if l.lvl == Background || c.active <= 1 {
		return l.seats
	}
	return c.cfg.BackloggedSeats
}

// start gives f a seat at l. c.mu is held.
func (c *Controller) start(l *level, f *flow, sparse bool, now time.Time) *seat {
	l.inUse++
	if !sparse {
		l.backlogged++
	}
	f.inflight++
	// Charge the estimate now, so that a flow with many units in flight
	// falls behind before they finish; release corrects it.
	f.vt = max(f.vt, l.vnow)
	l.vnow = max(l.vnow, f.vt)
	f.vt += f.estimate
	f.fm.seats.Inc()
	f.fm.dispatched.Inc()
	return &seat{c: c, f: f, start: now, sparse: sparse, charge: f.estimate}
}

// dispatch fills l's free seats: sparse waiters first, in arrival order, then
// the backlogged flow with the lowest virtual time. c.mu is held.
func (c *Controller) dispatch(l *level, now time.Time) {
	for l.inUse < l.seats {
		if len(l.sparse) > 0 {
			w := l.sparse[0]
			l.sparse[0] = nil
			l.sparse = l.sparse[1:]
			w.f.sparseWait--
			c.hand(l, w, now)
			continue
		}
		if l.queued == 0 || l.backlogged >= c.backlogCap(l) {
			return
		}
		var next *flow
		for _, f := range l.flows {
			if len(f.queue) > 0 && (next == nil || f.vt < next.vt) {
				next = f
			}
		}
		w := next.queue[0]
		next.queue[0] = nil
		next.queue = next.queue[1:]
		l.queued--
		c.hand(l, w, now)
	}
}

// hand gives waiter w a seat and wakes it. c.mu is held.
func (c *Controller) hand(l *level, w *waiter, now time.Time) {
	w.seat = c.start(l, w.f, w.sparse, now)
	w.state = waitDispatched
	w.f.fm.queue.Dec()
	w.f.fm.waited.Observe(now.Sub(w.enqueued).Seconds())
	close(w.ready)
}

// expire refuses w if it still waits when its wait bound fires.
func (c *Controller) expire(w *waiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.state != waitQueued {
		return
	}
	c.unqueue(w)
	w.state = waitRefused
	w.reason = ReasonWaitExpired
	c.refuse(w.f, ReasonWaitExpired, c.cfg.Clock.Now(), w.ahead > 0)
	close(w.ready)
}

// unqueue takes a queued w out of its queue. c.mu is held.
func (c *Controller) unqueue(w *waiter) {
	f, l := w.f, w.f.lvl
	f.fm.queue.Dec()
	if w.sparse {
		l.sparse = remove(l.sparse, w)
		f.sparseWait--
		return
	}
	f.queue = remove(f.queue, w)
	l.queued--
}

func remove(q []*waiter, w *waiter) []*waiter {
	for i, x := range q {
		if x == w {
			copy(q[i:], q[i+1:])
			q[len(q)-1] = nil
			return q[:len(q)-1]
		}
	}
	return q
}

// refuse counts a refusal of f's work, and logs the first of an episode.
// A refusal of work that had work of its own flow queued ahead of it marks
// the flow as backlogged: its requests are not sparse for SparseAfterRefusal,
// however idle it looks between its clients' retries. A light realm's lone
// overlapping request that waited too long does not mark it. c.mu is held.
func (c *Controller) refuse(f *flow, reason string, now time.Time, marks bool) {
	f.fm.refused(reason).Inc()
	if marks {
		f.backedAt = now
	}
	first := f.refusedAt.IsZero() || now.Sub(f.refusedAt) >= episodeGap
	f.refusedAt = now
	if first && c.cfg.Log != nil {
		l := f.lvl
		c.cfg.Log.Warn("fairness: concurrency_limited",
			slog.String("realm", f.name), slog.String("fairness_level", l.lvl.String()), slog.String("reason", reason),
			slog.Int("inflight", f.inflight), slog.Int("queued", len(f.queue)+f.sparseWait),
			slog.Int("seats_in_use", l.inUse), slog.Int("seats", l.seats), slog.Int("active_realms", c.active))
	}
}

// release gives the seat back, corrects its flow's virtual time by the
// measured service time and hands the seat on.
func (s *seat) release() {
	c := s.c
	if c == nil {
		return // the controller is off
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.done {
		return
	}
	s.done = true
	now := c.cfg.Clock.Now()
	f, l := s.f, s.f.lvl
	service := max(now.Sub(s.start).Seconds(), 0)
	f.vt += service - s.charge
	f.estimate += (service - f.estimate) / 8
	l.avgService += (service - l.avgService) / 64
	f.inflight--
	l.inUse--
	if !s.sparse {
		l.backlogged--
	}
	f.lastSeen = now
	f.fm.seats.Dec()
	c.dispatch(l, now)
}

// InUse is the seats in use at lvl now.
func (c *Controller) InUse(lvl Level) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.levels[lvl].inUse
}

// Queued is how many of flow's units wait for a seat at lvl now.
func (c *Controller) Queued(flowName string, lvl Level) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.levels[lvl].flows[flowName]; f != nil {
		return len(f.queue) + f.sparseWait
	}
	return 0
}

// Active is the number of interactive flows active now.
func (c *Controller) Active() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweep(c.cfg.Clock.Now())
	return c.active
}
