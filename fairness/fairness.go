// Package fairness keeps Appdor's second promise: no realm's load becomes
// another realm's latency. It is fair queuing, in the spirit of Kubernetes
// API Priority and Fairness (queueset) with FQ-CoDel's sparse flows (RFC 8290).
//
// Work runs in seats: Seats concurrently running units of interactive work
// (default two per core, within the pool) and BackgroundSeats of their own
// for background work (CSV import batches, automations), which waits as long
// as its context lasts in seats no request ever waits for. A flow is a realm
// (or FlowUnauthenticated) at one level, with a FIFO queue.
//
//   - Sparse flows first (FQ-CoDel's new flows, RFC 8290): when a seat frees,
//     work of sparse flows goes before work of backlogged flows. A flow is
//     backlogged for SparseAfterRefusal after work of it was refused while
//     work of its own waited ahead of it (its queue could not be served within
//     the wait bound), so a storm that idles between refusals stays
//     backlogged; a burst's one late request does not make a flow backlogged.
//   - Within each, weighted fair queuing: the flow whose next unit would
//     finish first in virtual time goes next. A unit's measured service time
//     advances its flow's virtual time, so heavy work falls behind light work;
//     a flow that starts waiting starts at the current virtual time; a flow
//     not measured yet is taken to cost four times the heaviest measured one,
//     so realms arriving together queue behind the realms at work.
//   - While several flows are active (a request within ActiveWindow),
//     backlogged flows together hold at most BackloggedSeats seats (half the
//     cores) and a sparse flow runs one unit at a time; a flow alone holds
//     every seat (work-conserving). Measured on two cores: a light read beside
//     two storm reads is 2.8× its baseline, beside one 1.5–1.8×; equal shares
//     alone left a quiet realm ×23.6 beside sixteen storms.
//   - Waits are bounded: an interactive queue holds QueueLength units and a
//     unit waits at most WaitBound; a full queue or an expired wait is a
//     refusal, 429 concurrency_limited with Retry-After. The wait bound keeps
//     other realms' latency, so it expires only while another flow is
//     active: a realm alone on the server waits behind its own work for as
//     long as its queue takes (on a loaded 2-core machine sixteen clients of
//     one realm outwaited 50 ms and were refused with nobody else there).
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
	// minEstimate is the least service time, seconds, a flow is assumed to
	// need; unmeasuredFactor is how much heavier than the heaviest known an
	// unmeasured flow is taken to be. Sixteen storms arriving at once beside a
	// quiet realm were served first while they looked as light as it; the
	// quiet realm's waits then expired.
	minEstimate      = 0.001
	unmeasuredFactor = 4
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
	// BackloggedSeats is how many seats backlogged flows may hold together
	// while several flows are active; 0 is max(1, GOMAXPROCS/2).
	BackloggedSeats int
	// QueueLength is each flow's interactive queue; 0 is DefaultQueueLength.
	QueueLength int
	// WaitBound is the longest an interactive unit waits for a seat; 0 is
	// DefaultWaitBound.
	WaitBound time.Duration
	// ActiveWindow is how long a flow counts as active after its last
	// request; 0 is DefaultActiveWindow.
	ActiveWindow time.Duration
	// SparseAfterRefusal is how long a flow stays backlogged after work of
	// it was refused with its own work queued ahead; 0 is
	// DefaultSparseAfterRefusal.
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
	backlogged int // seats held by backlogged flows
	flows      map[string]*flow
	queued     int     // waiters in the flows' queues
	vnow       float64 // virtual time: the start tag of the last dispatch
}

// flow is one realm's state at one level.
type flow struct {
	name       string
	lvl        *level
	inflight   int
	queue      []*waiter
	vt         float64 // virtual finish time of its last dispatched work, seat-seconds
	estimate   float64 // EWMA of its service time, seconds
	measured   bool    // estimate is measured, not assumed
	lastSeen   time.Time
	activeTill time.Time
	refusedAt  time.Time // its last refusal, for the episode's log line
	backedAt   time.Time // its last refusal with work of its own queued ahead
	fm         *flowMetrics
}

func (f *flow) idle() bool { return f.inflight == 0 && len(f.queue) == 0 }

// finish is the virtual time at which f's next unit would finish: the
// dispatcher serves the smallest first (weighted fair queuing's rule).
func (f *flow) finish(l *level) float64 { return max(f.vt, l.vnow) + f.estimate }

// backlogged says whether f was refused with work of its own queued ahead
// within SparseAfterRefusal.
func (c *Controller) backlogged(f *flow, now time.Time) bool {
	return f.lvl.lvl == Interactive && !f.backedAt.IsZero() && now.Sub(f.backedAt) < c.cfg.SparseAfterRefusal
}

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
		c.levels[l] = &level{lvl: l, seats: seats, flows: map[string]*flow{}}
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
	c          *Controller
	f          *flow
	start      time.Time
	backlogged bool    // taken as work of a backlogged flow
	charge     float64 // the estimate charged to its flow's virtual time at start
	done       bool    // under c.mu
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
	// At once, when nobody waits and the flow may take a free seat.
	if l.queued == 0 && c.may(l, f, now) {
		s := c.start(l, f, now)
		f.fm.waited.Observe(0)
		c.mu.Unlock()
		return s, ""
	}
	if lvl == Interactive && len(f.queue) >= c.cfg.QueueLength {
		c.refuse(f, ReasonQueueFull, now, true)
		c.dispatch(l, now) // backlogged now, its queue may take a backlogged seat
		c.mu.Unlock()
		return nil, ReasonQueueFull
	}
	if len(f.queue) == 0 {
		// A flow that starts waiting starts at the current virtual time.
		f.vt = max(f.vt, l.vnow)
	}
	w := &waiter{f: f, ahead: len(f.queue), enqueued: now, ready: make(chan struct{})}
	f.queue = append(f.queue, w)
	l.queued++
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

// waiter is a unit of work waiting in its flow's queue.
type waiter struct {
	f        *flow
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
		// Until its first unit is measured, a flow is taken to cost
		// unmeasuredFactor times the heaviest the level knows: realms that
		// arrive together wait behind the realms at work, not before them.
		est := minEstimate
		for _, g := range l.flows {
			if g.measured {
				est = max(est, g.estimate)
			}
		}
		est *= unmeasuredFactor
		f = &flow{name: name, lvl: l, estimate: est, vt: l.vnow, fm: c.m.flow(name, l.lvl)}
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

// may says whether f may take a free seat of l now: a sparse flow
// sparseInflight units, backlogged flows together BackloggedSeats, while
// several flows are active; anyone, when alone or at the background level.
// c.mu is held.
func (c *Controller) may(l *level, f *flow, now time.Time) bool {
	if l.inUse >= l.seats {
		return false
	}
	if l.lvl == Background || c.active <= 1 {
		return true
	}
	if c.backlogged(f, now) {
		return l.backlogged < c.cfg.BackloggedSeats
	}
	return f.inflight < sparseInflight
}

// sparseInflight is how many units a sparse flow runs at once while several
// flows are active: its next waits for its own, so a flow that asks for more
// than it gets waits in its queue, where its waits show it backlogged. With
// two, three storms that never waited long enough to be refused held every
// seat.
const sparseInflight = 1

// start gives f a seat at l. c.mu is held.
func (c *Controller) start(l *level, f *flow, now time.Time) *seat {
	backlogged := c.backlogged(f, now)
	l.inUse++
	if backlogged {
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
	return &seat{c: c, f: f, start: now, backlogged: backlogged, charge: f.estimate}
}

// dispatch fills l's free seats: the sparse flow with the lowest virtual time
// first, then the backlogged one, each within what it may hold. c.mu is held.
func (c *Controller) dispatch(l *level, now time.Time) {
	for l.queued > 0 && l.inUse < l.seats {
		var sparse, backed *flow
		for _, f := range l.flows {
			if len(f.queue) == 0 || !c.may(l, f, now) {
				continue
			}
			if c.backlogged(f, now) {
				if backed == nil || f.finish(l) < backed.finish(l) {
					backed = f
				}
			} else if sparse == nil || f.finish(l) < sparse.finish(l) {
				sparse = f
			}
		}
		next := sparse
		if next == nil {
			next = backed
		}
		if next == nil {
			return
		}
		w := next.queue[0]
		next.queue[0] = nil
		next.queue = next.queue[1:]
		l.queued--
		w.seat = c.start(l, next, now)
		w.state = waitDispatched
		next.fm.queue.Dec()
		next.fm.waited.Observe(now.Sub(w.enqueued).Seconds())
		close(w.ready)
	}
}

// expire refuses w if it still waits when its wait bound fires and another
// flow is active.
func (c *Controller) expire(w *waiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.state != waitQueued {
		return
	}
	now := c.cfg.Clock.Now()
	c.sweep(now)
	if c.active <= 1 {
		// Its flow is the only active one: no other realm's latency to
		// keep. Wait on; look again after another wait bound.
		w.stop = c.cfg.Clock.AfterFunc(c.cfg.WaitBound, func() { c.expire(w) })
		return
	}
	c.unqueue(w)
	w.state = waitRefused
	w.reason = ReasonWaitExpired
	c.refuse(w.f, ReasonWaitExpired, now, w.ahead > 0)
	close(w.ready)
	c.dispatch(w.f.lvl, now)
}

// unqueue takes a queued w out of its queue. c.mu is held.
func (c *Controller) unqueue(w *waiter) {
	f := w.f
	f.fm.queue.Dec()
	f.queue = remove(f.queue, w)
	f.lvl.queued--
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
// A refusal of work that had work of its own flow queued ahead of it makes
// the flow backlogged for SparseAfterRefusal, however idle it looks between
// its clients' retries; one late request with nothing of its own ahead does
// not. c.mu is held.
func (c *Controller) refuse(f *flow, reason string, now time.Time, marks bool) {
	f.fm.refused(reason).Inc()
	if marks {
		if !c.backlogged(f, now) && c.cfg.Log != nil && c.cfg.Log.Enabled(context.Background(), slog.LevelDebug) {
			l := f.lvl
			c.cfg.Log.Debug("fairness: backlogged",
				slog.String("realm", f.name), slog.String("reason", reason),
				slog.Int("inflight", f.inflight), slog.Int("queued", len(f.queue)),
				slog.Int("seats_in_use", l.inUse), slog.Int("backlogged_seats_in_use", l.backlogged),
				slog.Int("active_realms", c.active))
		}
		f.backedAt = now
	}
	first := f.refusedAt.IsZero() || now.Sub(f.refusedAt) >= episodeGap
	f.refusedAt = now
	if first && c.cfg.Log != nil {
		l := f.lvl
		c.cfg.Log.Warn("fairness: concurrency_limited",
			slog.String("realm", f.name), slog.String("fairness_level", l.lvl.String()), slog.String("reason", reason),
			slog.Int("inflight", f.inflight), slog.Int("queued", len(f.queue)),
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
	if f.measured {
		f.estimate += (service - f.estimate) / 8
	} else {
		f.estimate, f.measured = service, true
	}
	f.inflight--
	l.inUse--
	if s.backlogged {
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
		return len(f.queue)
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
