// Package fairness keeps Appdor's second promise: no realm's load becomes
// another realm's latency. It is fair queuing after Kubernetes' API Priority
// and Fairness (queueset), with FQ-CoDel's sparse flows (RFC 8290). A flow is
// a realm (or FlowUnauthenticated) at one level, with a FIFO queue. Each rule
// beyond fair queuing's own is measured where it is set.
//
//   - Seats: Seats interactive units run at once (four per core, within the
//     pool); background work (CSV import batches, automations) has
//     BackgroundSeats of its own and waits while its context lasts.
//   - Virtual time: a unit's measured service time advances its flow's
//     virtual time, and the unit that would finish first goes next, so heavy
//     work falls behind light work; a flow that starts waiting starts now.
//   - Classes: sparse units (their flow has fewer than SparseDepth
//     outstanding) go first, deep ones next, backlogged ones last. A flow is
//     backlogged while its outstanding work, its realm's background units
//     included and its own counted at their usual cost (a stall is not a
//     storm), averages SparseDepth or more over loadWindow (it arrives, or
//     comes back after ActiveWindow idle, at that load and shows it is
//     light), or for SparseAfterRefusal after a refusal with its own work
//     queued ahead. A unit is never of a better class than those ahead of it.
//   - While several flows are active, backlogged units together hold
//     BackloggedSeats (half the cores) and rest BackloggedRest times as long
//     as each held one while a flow that is not backlogged is active; a flow
//     never measured may take a probe seat; deep work of a flow holding
//     SparseDepth seats leaves the last free seat to others. A flow alone
//     holds every seat.
//   - Waits are bounded: QueueLength units a flow, WaitBound each, expiring
//     only while another flow is active; a refusal is 429
//     concurrency_limited with Retry-After.
//   - Background: a realm runs one unit at a time. While another realm is
//     active, a realm with more background work waiting, or running a long
//     unit as steps (Rest), rests BackgroundRest times as long as it ran,
//     and may run backgroundSlack ahead of its rests.
//
// Acquire is the one entry point; Middleware is Acquire for HTTP requests.
// fairness knows nothing of grid or tenancy: a flow is a string to it.
package fairness

import (
	"context"
	"log/slog"
	"math"
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
	DefaultQueueLength  = 64
	DefaultWaitBound    = 50 * time.Millisecond
	DefaultActiveWindow = time.Second
	// DefaultSparseAfterRefusal: a storm refused, idle while it waits out
	// Retry-After, would find nothing of its own outstanding when it comes
	// back and pass for sparse; refused with its own work queued ahead, it
	// stays backlogged this long.
	DefaultSparseAfterRefusal = 2 * time.Second
	// DefaultSparseDepth: at 4, sixteen storms of four clients each found
	// three of their own outstanding at every arrival and passed for sparse.
	DefaultSparseDepth = 2
	// loadWindow is the time constant of a flow's average outstanding work.
	// Sixteen storms of four clients served within the wait bound were
	// never refused, so never marked; by their depth at each arrival alone
	// they stayed ahead of backlogged work, held every seat, and the quiet
	// realm reading 200 times a second beside them measured x4.5-6.3 its
	// baseline p99 in two runs of ten. Averaged, four clients' storm crosses
	// two units in 170 ms, while a realm reading 200 times a second reaches
	// two only once its requests average 10 ms.
	loadWindow = 250 * time.Millisecond
	// usualWindow is the time constant of a flow's usual service time
	// (settle): a stall shorter than it does not make a light realm look
	// heavy; a realm whose work turns heavier for longer is counted at its
	// new cost about this much later.
	usualWindow       = time.Second
	DefaultRetryAfter = time.Second
	// minEstimate is the least service time, seconds, a flow is assumed to
	// need; unmeasuredFactor is how much heavier than the heaviest known an
	// unmeasured flow is taken to be. Sixteen storms arriving at once beside a
	// quiet realm were served first while they looked as light as it; the
	// quiet realm's waits then expired.
	minEstimate      = 0.001
	unmeasuredFactor = 4
	// DefaultBackgroundRest is how many times as long as a background unit
	// ran its realm's background work rests while another realm's
	// interactive work is active: a third of one core for a 100,000-row
	// import. Resting as long as it ran, the reader beside it measured
	// ×3.06 and ×2.53 its baseline p99 (the import took 32-39 s); resting
	// twice as long, ×1.42, ×2.10 and ×1.88 (50-56 s). The realm rests,
	// not the seat: when the seat rested, a quiet realm's automations waited
	// out every rest of a storming realm's and fell 114 s behind in a 45 s
	// automation storm.
	//
	// At 2, beside a storming realm's API burst and its own batch patches,
	// the quiet realm's read p99 in the automation storm measured x2.35-2.92
	// its baseline and its automations' x2.29-3.46 (four runs; S's import
	// took 23-25 s); at 6, x1.86-1.96 and x2.06-2.56 (four; 47-52 s), and
	// with BackloggedRest besides, x1.64-1.97 and x1.57-2.06 (four).
	//
	// With the automations' evaluation at two round trips and no WAL wait,
	// three interleaved pairs of that storm at 6 and at 12: the quiet
	// realm's read p99 in the storm 7.6, 7.2, 7.7 ms against 6.2, 6.4,
	// 6.2 ms, its automations' 7, 7, 7 against 6, 6, 6 ms; S's import took
	// 65-72 s against 127-134 s. The quiet realm's latency wins.
	DefaultBackgroundRest = 12
	// DefaultBackloggedRest is how many times as long as a backlogged unit
	// held its seat the backlogged seats rest while a flow that is not
	// backlogged is active: at 1, backlogged work holds them half the time.
	// Backlogged work alone on the cores beside a light realm still took
	// them from it: in the automation storm with BackgroundRest 6 and none
	// of this rest, the quiet realm's automation p99 measured x2.06-2.56 its
	// baseline; with it, x1.57-2.06 (four runs each), while the burst
	// realm read ~3,000 pages in the storm instead of ~5,600.
	DefaultBackloggedRest = 1
	// backgroundSlack is how far a realm's background work may run ahead of
	// its rests (the GCRA's tolerance), so that a light realm's few short
	// units (an automation's evaluation, its webhook's record) do not each
	// wait out the rest of the one before: resting after every unit, a
	// quiet realm's automation p99 was 776 ms against 39 ms at baseline.
	// At 100 ms, one slow evaluation (80 ms on cores a storm keeps busy)
	// owed a rest that held the quiet realm's next automations half a
	// second: their p99 beside the automation storm measured 445 and 521 ms
	// at a p50 of 6-7 ms. A realm at work all along gets no more for it:
	// the tolerance is a burst, once, not a rate. Since then a realm rests
	// only while more of its background work waits (or for a long unit's
	// steps): a light realm's unit runs long when the cores are busy, not
	// because its work is heavy, and one run of the automation storm with
	// another process sampling every process's CPU beside it still held
	// the quiet realm's automations 420-808 ms, by the rests of units with
	// nothing of theirs behind them. Paired runs measured no difference
	// without that load: the quiet realm's automation p99 beside the storm
	// x1.94, x1.79 and x1.91 without the rule, x2.36, x1.12 and x2.07 with
	// it, and the storming realm's import took as long (69-87 s, 69-100 s).
	backgroundSlack = time.Second
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
	// 4×GOMAXPROCS, within the pool. A realm alone needs that many to keep
	// the cores busy while its requests wait on the database: 16 clients of
	// one realm read at 0.90-0.91 of their throughput with the controller
	// off in three runs at two per core, 0.96-1.00 at four (backlogged work
	// beside another realm is held to BackloggedSeats whatever the seats).
	Seats int
	// BackgroundSeats is the background level's seats; 0 is GOMAXPROCS.
	// A realm holds one of them at a time.
	BackgroundSeats int
	// BackgroundRest is how many times as long as a background unit ran its
	// realm's background work rests while another realm is active; 0 is
	// DefaultBackgroundRest.
	BackgroundRest float64
	// BackloggedSeats is how many seats backlogged flows may hold together
	// while several flows are active; 0 is max(1, GOMAXPROCS/2).
	BackloggedSeats int
	// BackloggedRest is how many times as long as a backlogged unit held
	// its seat the backlogged seats rest (shared among BackloggedSeats)
	// while a flow that is not backlogged is active; 0 is
	// DefaultBackloggedRest, and a negative value is no rest.
	BackloggedRest float64
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
	// SparseDepth is how many units of its own in flight or queued make a
	// flow's arriving unit no longer sparse, and how many on average over
	// loadWindow make its flow backlogged; 0 is DefaultSparseDepth.
	SparseDepth int
	// RetryAfter is what a refusal asks the client to wait; 0 is
	// DefaultRetryAfter.
	RetryAfter time.Duration
	// PoolSize is the database pool's size: seats never exceed it.
	PoolSize int
	// Clock is the time source; nil is the real clock. Tests set it.
	Clock Clock
	// Log gets one line per refusal episode of a flow.
	Log *slog.Logger
	// Usage, when set, hears of every unit when it gives its seat back: its
	// flow, its level, how long it waited in a queue for the seat and how
	// long it held it. It is called outside the controller's lock.
	Usage func(flow string, lvl Level, waited, held time.Duration)
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
		cfg.BackgroundSeats = max(1, cores)
	}
	if cfg.Seats <= 0 {
		cfg.Seats = 4 * cores
		// Every seat must find a connection, background ones included.
		if cfg.PoolSize > 0 {
			cfg.Seats = max(1, min(cfg.Seats, cfg.PoolSize-cfg.BackgroundSeats))
		}
	}
	if cfg.BackgroundRest <= 0 {
		cfg.BackgroundRest = DefaultBackgroundRest
	}
	if cfg.BackloggedSeats <= 0 {
		cfg.BackloggedSeats = max(1, cores/2)
	}
	switch {
	case cfg.BackloggedRest == 0:
		cfg.BackloggedRest = DefaultBackloggedRest
	case cfg.BackloggedRest < 0:
		cfg.BackloggedRest = 0
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
	if cfg.SparseDepth <= 0 {
		cfg.SparseDepth = DefaultSparseDepth
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
	backlogged int // seats held by backlogged units within BackloggedSeats
	// restTill is when the backlogged seats' rests end (BackloggedRest):
	// no backlogged unit starts before it while several flows are active.
	// resting says a timer will dispatch l once it has passed: one timer
	// for every rest, however many backlogged units extend it meanwhile.
	restTill time.Time
	resting  bool
	probing  int // the probe seat: held by a flow not measured yet beyond them
	flows    map[string]*flow
	queued   int     // waiters in the flows' queues
	vnow     float64 // virtual time: the start tag of the last dispatch
}

// flow is one realm's state at one level.
type flow struct {
	name       string
	lvl        *level
	inflight   int
	queue      []*waiter
	background int     // interactive: its realm's background units in flight, counted in its load
	vt         float64 // virtual finish time of its last dispatched work, seat-seconds
	estimate   float64 // EWMA of its service time, seconds
	usual      float64 // its service time over about usualWindow, seconds: see settle
	usualAt    time.Time
	load       float64 // its units in flight or queued (and background, see settle), averaged over loadWindow
	loadAt     time.Time
	measured   bool // estimate is measured, not assumed
	loaded     bool // load was SparseDepth or more when it was last classified
	known      bool // it was measured once: it may not take the probe seat
	lastSeen   time.Time
	activeTill time.Time
	refusedAt  time.Time // its last refusal, for the episode's log line
	backedAt   time.Time // its last refusal with work of its own queued ahead
	restTill   time.Time // background: when its rests so far end (a GCRA's theoretical arrival time)
	running    *seat     // background: its unit in flight, if any
	fm         *flowMetrics
}

func (f *flow) idle() bool { return f.inflight == 0 && len(f.queue) == 0 }

// active says whether f has work in flight or queued, or had a request
// within ActiveWindow.
func (f *flow) active(now time.Time) bool { return !f.idle() || now.Before(f.activeTill) }

// settle brings f.load up to now: the count of its units in flight or
// queued, and of its realm's background units in flight, since the last
// settle, weighed in with time constant loadWindow. Without the background
// units, two clients patching 100 rows beside their realm's import averaged
// 1.9 and ran as sparse work, and the quiet realm's read p99 beside them
// measured x2.2-3.2.
//
// Its own units count at their usual cost: as many as they are, times its
// usual service time over its current estimate when that is higher. A
// light realm's units pile up when the cores stall, not because it sends
// more; counted one for one, the quiet realm reading 200 times a second
// turned backlogged at the automation storm's start (5 in flight, 11.7 ms
// each against ~2 ms), then waited behind the storms' backlogged seat and
// its rest, and was refused 1,176 times in one run. A realm measured slow
// from its first unit gets no such allowance. It is called before that
// count changes. c.mu is held.
func (f *flow) settle(now time.Time) {
	dt := now.Sub(f.loadAt)
	if dt <= 0 {
		return
	}
	f.loadAt = now
	keep := math.Exp(-float64(dt) / float64(loadWindow))
	own := float64(f.inflight + len(f.queue))
	if f.measured && f.usual > 0 && f.estimate > f.usual {
		own *= f.usual / f.estimate
	}
	f.load = f.load*keep + (own+float64(f.background))*(1-keep)
	f.fm.load.Set(f.load)
}

// ready says whether f may start a unit now: at the background level, a
// flow runs one unit at a time, and not while its rests end more than
// backgroundSlack from now.
func (f *flow) ready(now time.Time) bool {
	return f.lvl.lvl != Background || f.inflight == 0 && !now.Before(f.restTill.Add(-backgroundSlack))
}

// finish is the virtual time at which f's next unit would finish: the
// dispatcher serves the smallest first (weighted fair queuing's rule).
func (f *flow) finish(l *level) float64 { return max(f.vt, l.vnow) + f.estimate }

// marked says whether f was refused within SparseAfterRefusal with
// backlogged work of its own queued ahead.
func (c *Controller) marked(f *flow, now time.Time) bool {
	return !f.backedAt.IsZero() && now.Sub(f.backedAt) < c.cfg.SparseAfterRefusal
}

// class is what a unit of work is, decided when it arrives.
type class uint8

const (
	sparseWork     class = iota // few of its flow's units outstanding: first
	deepWork                    // more, of a flow not backlogged: next, by virtual time
	backloggedWork              // of a flow backlogged: by virtual time, within BackloggedSeats
)

// classify says what a unit of f arriving now is: backlogged when f is not
// measured, is marked, or has averaged SparseDepth units outstanding;
// otherwise sparse when f has fewer than SparseDepth units in flight or
// queued, deep when it has more. Background work is all sparse (its level
// has no classes). c.mu is held and f is settled.
func (c *Controller) classify(f *flow, now time.Time) class {
	if f.lvl.lvl == Background {
		return sparseWork
	}
	loaded := f.load >= float64(c.cfg.SparseDepth)
	if loaded && !f.loaded {
		c.logBacklogged(f, "load", now)
	}
	f.loaded = loaded
	switch {
	case !f.measured || c.marked(f, now) || loaded:
		return backloggedWork
	case f.inflight+len(f.queue) < c.cfg.SparseDepth:
		return sparseWork
	}
	return deepWork
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
	resumed    time.Time     // start, or the end of its last Rest
	rested     time.Duration // in Rest: not service
	stepped    bool          // background: run as steps (Rest), so long work that rests at release too
	backlogged bool          // taken as backlogged work, within BackloggedSeats
	probe      bool          // taken as the probe seat by a flow not measured yet
	charge     float64       // the estimate charged to its flow's virtual time at start
	waited     time.Duration
	done       bool // under c.mu
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
	cls := c.classify(f, now)
	// At once, when nobody waits and the unit may take a free seat.
	if l.queued == 0 && f.ready(now) && c.may(l, f, cls, now) {
		s := c.start(l, f, now, cls)
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
	w := &waiter{f: f, cls: cls, enqueued: now, ready: make(chan struct{})}
	for _, x := range f.queue {
		if x.cls != sparseWork {
			w.ahead++
		}
		// A flow's queue is FIFO by class: a unit is never of a better
		// class than its own flow's units queued ahead of it. (A storm
		// whose first read was measured turned its next arrivals into
		// deep work that overtook its own backlogged queue and took every
		// seat before any of it was refused.)
		w.cls = max(w.cls, x.cls)
	}
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
			c.unqueue(w, c.cfg.Clock.Now())
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
	cls      class // what it arrived as
	ahead    int   // units of its flow not sparse queued ahead of it when it came
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
	returning := f != nil && f.idle() && !now.Before(f.activeTill)
	if f == nil || returning {
		// Until its first unit is measured, a flow arriving or returning
		// after ActiveWindow idle is taken to cost unmeasuredFactor times the
		// heaviest the level knows: realms that arrive together wait behind
		// the realms at work, not before them.
		est := minEstimate
		for _, g := range l.flows {
			if g.measured && g != f {
				est = max(est, g.estimate)
			}
		}
		est *= unmeasuredFactor
		if f == nil {
			f = &flow{name: name, lvl: l, vt: l.vnow, loadAt: now, fm: c.m.flow(name, l.lvl)}
			l.flows[name] = f
			if b := c.levels[Background].flows[name]; l.lvl == Interactive && b != nil {
				f.background = b.inflight
			}
		}
		f.estimate, f.measured = est, false
		if l.lvl == Interactive {
			// It starts loaded, too: a flow shows that it is light by its
			// load falling, not that it is heavy by its load rising.
			// Sixteen storms starting together, judged by loads that had
			// fallen to nothing while they were idle, ran as sparse and
			// deep work; the light realm beside them, slowed, crossed
			// SparseDepth first and was refused as backlogged while they
			// read on: x8.6-9.4 its baseline p99 in three -only many runs
			// of seven, none in five with this start.
			f.load, f.loadAt, f.loaded = max(f.load, float64(c.cfg.SparseDepth)), now, true
		}
	}
	if l.lvl == Interactive && !now.Before(f.activeTill) && f.idle() {
		c.active++ // sweep recounts; until then an arrival counts once
	}
	f.settle(now)
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

// may says whether a unit of f, of class cls, may take a free seat of l now.
// While several flows are active, backlogged units together hold
// BackloggedSeats, and one more as the probe of a flow never measured; and
// deep work of a flow already holding SparseDepth seats leaves the last free
// seat to the sparse work of others, while another flow is active and not
// backlogged. Without that reserve, a storm's first four reads took every
// seat as a light realm started beside it, and the light realm's first units
// expired behind them: 7, 35, 38, 2 and 0 refusals in five runs; with it, 10
// in one run of ten and 12 and 5 in two of the next ten. c.mu is held.
func (c *Controller) may(l *level, f *flow, cls class, now time.Time) bool {
	switch {
	case l.inUse >= l.seats:
		return false
	case cls == sparseWork || c.active <= 1:
		return true
	case cls == deepWork:
		return l.inUse < l.seats-1 || f.inflight < c.cfg.SparseDepth || !c.othersSparse(l, f, now)
	}
	return l.backlogged < c.cfg.BackloggedSeats && !now.Before(l.restTill) || !f.known && l.probing == 0
}

// othersSparse says whether a flow of l other than f is active now and not
// backlogged: measured, not marked, and its load last seen below
// SparseDepth. c.mu is held.
func (c *Controller) othersSparse(l *level, f *flow, now time.Time) bool {
	for _, g := range l.flows {
		if g != f && g.active(now) && g.measured && !g.loaded && !c.marked(g, now) {
			return true
		}
	}
	return false
}

// start gives a unit of f a seat at l. c.mu is held.
func (c *Controller) start(l *level, f *flow, now time.Time, cls class) *seat {
	// Backlogged work beyond BackloggedSeats while others are active is the
	// probe of a flow never measured (may allowed nothing else).
	backlogged := cls == backloggedWork && (c.active <= 1 || l.backlogged < c.cfg.BackloggedSeats)
	probe := cls == backloggedWork && !backlogged
	l.inUse++
	if backlogged {
		l.backlogged++
	}
	if probe {
		l.probing++
	}
	f.inflight++
	// Charge the estimate now, so that a flow with many units in flight
	// falls behind before they finish; release corrects it.
	f.vt = max(f.vt, l.vnow)
	l.vnow = max(l.vnow, f.vt)
	f.vt += f.estimate
	f.fm.seats.Inc()
	f.fm.dispatched.Inc()
	s := &seat{c: c, f: f, start: now, resumed: now, backlogged: backlogged, probe: probe, charge: f.estimate}
	if l.lvl == Background {
		f.running = s
		c.countBackground(f.name, 1, now)
	}
	return s
}

// countBackground adds d to the background units in flight that the
// interactive flow of realm name counts in its load: a realm's import and
// automations are its load as much as its requests are. c.mu is held.
func (c *Controller) countBackground(name string, d int, now time.Time) {
	if g := c.levels[Interactive].flows[name]; g != nil {
		g.settle(now)
		g.background = max(g.background+d, 0)
	}
}

// Rest is for background work that runs a long unit as short steps (a CSV
// import's transaction, a few dozen rows a statement): between two steps,
// it rests flowName's running background unit BackgroundRest times as long
// as it worked since its start or last Rest, while another realm is active,
// keeping its seat; the rest is not service, and work done while the realm
// was alone is owed no rest. Resting after every 32-row statement of a
// 1,000-row import transaction rather than once after it, a reader beside a
// 100,000-row import measured its p99 at 5.5-6.0 ms instead of 7.7-9.2 ms
// (three paired runs; the import took 24 s instead of 14). It returns ctx's
// error if ctx ends first, and nil at once when the flow runs no background
// unit.
func (c *Controller) Rest(ctx context.Context, flowName string) error {
	if c.cfg.Off {
		return nil
	}
	c.mu.Lock()
	now := c.cfg.Clock.Now()
	var s *seat
	if f := c.levels[Background].flows[flowName]; f != nil {
		s = f.running
	}
	if s != nil {
		s.stepped = true
	}
	if s == nil || !c.othersActive(flowName, now) {
		if s != nil {
			s.resumed = now // alone: nothing owed
		}
		c.mu.Unlock()
		return nil
	}
	began := now
	rest := time.Duration(c.cfg.BackgroundRest * float64(now.Sub(s.resumed)))
	c.mu.Unlock()
	if rest > 0 {
		done := make(chan struct{})
		stop := c.cfg.Clock.AfterFunc(rest, func() { close(done) })
		select {
		case <-done:
		case <-ctx.Done():
			stop()
			return ctx.Err()
		}
	}
	c.mu.Lock()
	now = c.cfg.Clock.Now()
	s.rested += now.Sub(began)
	s.resumed = now
	c.mu.Unlock()
	return nil
}

// dispatch fills l's free seats: the sparse unit of the flow with the lowest
// virtual time first, then the deep one, then the backlogged one, each if it
// may take a seat. c.mu is held.
func (c *Controller) dispatch(l *level, now time.Time) {
	for l.queued > 0 && l.inUse < l.seats {
		var sparse, deep, backed *waiter
		for _, f := range l.flows {
			if len(f.queue) == 0 || !f.ready(now) {
				continue
			}
			s, d, b := heads(f.queue)
			if s != nil && (sparse == nil || f.finish(l) < sparse.f.finish(l)) {
				sparse = s
			}
			if d != nil && c.may(l, f, deepWork, now) && (deep == nil || f.finish(l) < deep.f.finish(l)) {
				deep = d
			}
			if b != nil && c.may(l, f, backloggedWork, now) && (backed == nil || before(f, backed.f, l)) {
				backed = b
			}
		}
		w := sparse
		if w == nil {
			w = deep
		}
		if w == nil {
			w = backed
		}
		if w == nil {
			return
		}
		f := w.f
		f.queue = remove(f.queue, w)
		l.queued--
		w.seat = c.start(l, f, now, w.cls)
		w.seat.waited = now.Sub(w.enqueued)
		w.state = waitDispatched
		f.fm.queue.Dec()
		f.fm.waited.Observe(now.Sub(w.enqueued).Seconds())
		close(w.ready)
	}
}

// heads returns the first unit of each class in a queue.
func heads(q []*waiter) (sparse, deep, backed *waiter) {
	for _, w := range q {
		switch {
		case w.cls == sparseWork && sparse == nil:
			sparse = w
		case w.cls == deepWork && deep == nil:
			deep = w
		case w.cls == backloggedWork && backed == nil:
			backed = w
		}
		if sparse != nil && deep != nil && backed != nil {
			break
		}
	}
	return sparse, deep, backed
}

// before says whether the backlogged work of f goes before that of g: a
// flow not measured yet first, then the one whose next unit finishes first.
// A realm back after ActiveWindow idle is not measured and is taken to be
// heavier than a storm; by virtual time alone a storm's queue went
// before it at every free seat, and a light realm reading one page at a time
// beside a storm was refused 100 times out of 100.
func before(f, g *flow, l *level) bool {
	if f.measured != g.measured {
		return !f.measured
	}
	return f.finish(l) < g.finish(l)
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
		// keep, and no seat held back from it. Wait on; look again after
		// another wait bound.
		w.stop = c.cfg.Clock.AfterFunc(c.cfg.WaitBound, func() { c.expire(w) })
		c.dispatch(w.f.lvl, now)
		return
	}
	c.unqueue(w, now)
	w.state = waitRefused
	w.reason = ReasonWaitExpired
	c.refuse(w.f, ReasonWaitExpired, now, w.cls != sparseWork && w.ahead > 0)
	close(w.ready)
	c.dispatch(w.f.lvl, now)
}

// unqueue takes a queued w out of its queue. c.mu is held.
func (c *Controller) unqueue(w *waiter, now time.Time) {
	f := w.f
	f.settle(now)
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
	wasMarked := c.marked(f, now) // backlogged by an earlier refusal
	if marks {
		c.mark(f, reason, now)
	}
	first := f.refusedAt.IsZero() || now.Sub(f.refusedAt) >= episodeGap
	f.refusedAt = now
	if first && c.cfg.Log != nil {
		l := f.lvl
		c.cfg.Log.Warn("fairness: concurrency_limited",
			slog.String("realm", f.name), slog.String("fairness_level", l.lvl.String()), slog.String("reason", reason),
			slog.Int("inflight", f.inflight), slog.Int("queued", len(f.queue)),
			slog.Float64("load", f.load), slog.Bool("marked", wasMarked),
			slog.Int("seats_in_use", l.inUse), slog.Int("backlogged_seats_in_use", l.backlogged), slog.Int("seats", l.seats),
			slog.Int("active_realms", c.active))
	}
}

// mark makes f backlogged for SparseAfterRefusal from now, for why. c.mu is
// held.
func (c *Controller) mark(f *flow, why string, now time.Time) {
	c.logBacklogged(f, why, now)
	f.backedAt = now
}

// logBacklogged logs at DEBUG that f, sparse until now, turns backlogged
// for why. c.mu is held.
func (c *Controller) logBacklogged(f *flow, why string, now time.Time) {
	if c.marked(f, now) || c.cfg.Log == nil || !c.cfg.Log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	l := f.lvl
	c.cfg.Log.Debug("fairness: backlogged",
		slog.String("realm", f.name), slog.String("reason", why),
		slog.Int("inflight", f.inflight), slog.Int("queued", len(f.queue)), slog.Float64("load", f.load),
		slog.Float64("estimate_ms", f.estimate*1e3),
		slog.Int("seats_in_use", l.inUse), slog.Int("backlogged_seats_in_use", l.backlogged),
		slog.Int("active_realms", c.active))
}

// release gives the seat back, corrects its flow's virtual time by the
// measured service time and hands the seat on.
func (s *seat) release() {
	c := s.c
	if c == nil {
		return // the controller is off
	}
	c.mu.Lock()
	held, ok := s.releaseLocked()
	c.mu.Unlock()
	if ok && c.cfg.Usage != nil {
		c.cfg.Usage(s.f.name, s.f.lvl.lvl, s.waited, held)
	}
}

// releaseLocked is release under c.mu: how long the seat was held, and
// false when it had been released already.
func (s *seat) releaseLocked() (time.Duration, bool) {
	c := s.c
	if s.done {
		return 0, false
	}
	s.done = true
	now := c.cfg.Clock.Now()
	f, l := s.f, s.f.lvl
	held := max(now.Sub(s.start), 0)
	service := (held - s.rested).Seconds()
	f.vt += service - s.charge
	f.settle(now)
	if f.measured {
		f.estimate += (service - f.estimate) / 8
		keep := math.Exp(-float64(now.Sub(f.usualAt)) / float64(usualWindow))
		f.usual = f.usual*keep + service*(1-keep)
	} else {
		f.estimate, f.usual, f.measured, f.known = service, service, true, true
	}
	f.usualAt = now
	f.inflight--
	if s.backlogged {
		l.backlogged--
		if held > 0 && c.cfg.BackloggedRest > 0 && c.othersSparse(l, f, now) {
			// The backlogged seats rest BackloggedRest times as long as
			// this unit held one, shared among them, after their rests
			// so far; the cores are the lighter flows' meanwhile.
			rest := time.Duration(c.cfg.BackloggedRest * float64(held) / float64(c.cfg.BackloggedSeats))
			l.restTill = later(l.restTill, now).Add(rest)
			if !l.resting {
				l.resting = true
				c.dispatchAfter(l, l.restTill.Sub(now), func(now time.Time) time.Duration {
					if wait := l.restTill.Sub(now); wait > 0 {
						return wait // extended meanwhile
					}
					l.resting = false
					return 0
				})
			}
		}
	}
	if s.probe {
		l.probing--
	}
	f.lastSeen = now
	f.fm.seats.Dec()
	l.inUse--
	if f.running == s {
		f.running = nil
	}
	if l.lvl == Background {
		c.countBackground(f.name, -1, now)
	}
	if worked := now.Sub(s.resumed); l.lvl == Background && worked > 0 && (len(f.queue) > 0 || s.stepped) &&
		c.othersActive(f.name, now) {
		// A realm with more background work waiting, or whose unit ran
		// as steps, rests BackgroundRest times as long as its unit ran
		// since its start or last Rest, after its rests so far; the seat
		// is free for other realms meanwhile. A realm with nothing
		// waiting owes no rest: its unit ran long because the cores were
		// busy, not because its work is heavy (backgroundSlack).
		rest := time.Duration(c.cfg.BackgroundRest * float64(worked))
		f.restTill = later(f.restTill, now).Add(rest)
		if wait := f.restTill.Add(-backgroundSlack).Sub(now); wait > 0 {
			c.dispatchAfter(l, wait, nil)
		}
	}
	c.dispatch(l, now)
	return held, true
}

// dispatchAfter dispatches l when wait has passed, for work that rests
// until then. When again is set, it is asked first, under c.mu, how much
// longer to wait (0: dispatch now).
func (c *Controller) dispatchAfter(l *level, wait time.Duration, again func(now time.Time) time.Duration) {
	c.cfg.Clock.AfterFunc(wait, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		now := c.cfg.Clock.Now()
		if again != nil {
			if more := again(now); more > 0 {
				c.dispatchAfter(l, more, again)
				return
			}
		}
		c.dispatch(l, now)
	})
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// othersActive says whether an interactive flow other than name is active
// now. c.mu is held.
func (c *Controller) othersActive(name string, now time.Time) bool {
	for n, f := range c.levels[Interactive].flows {
		if n != name && f.active(now) {
			return true
		}
	}
	return false
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
