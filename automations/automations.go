// Package automations runs a table's automations when its rows change: a
// trigger (row.created, row.updated, row.deleted), an optional condition in
// the read API's filter syntax, and actions (a signed webhook, an update of
// the triggering row, a new row in another table of the app).
//
// Nothing lost, nothing twice. A write batch of a table that has a matching
// automation records one event (row ids, versions, changed field ids; never
// cell data) in automation_events, in the write's own transaction: a rollback
// emits nothing, and a crash after the commit loses nothing. A worker claims
// an event with a lease; evaluating it deletes it, applies the row actions and
// records the run and its webhook deliveries in one transaction as the
// event's realm, so a row action happens once. Its webhook deliveries are
// recorded already claimed by the evaluating worker, which makes their first
// attempts as soon as the transaction commits, with no second claim; if the
// worker stops first, a delivery is claimed again when its lease runs out.
// A webhook delivery keeps one id (the Standard Webhooks webhook-id) across
// its retries and a replay.
//
// The queue is Appdor's own, in PostgreSQL, rather than River: OSS River
// fetches one shared FIFO per queue (per-tenant concurrency is River Pro
// only), so a realm with 100,000 queued events sits in front of a quiet
// realm's one, and its job table is not a realm table under row-level
// security. Here every queue row is a realm row under RLS, and the dequeue is
// fair by realm: a claim takes the next realm of a round over the realms with
// due work (found by a loose index scan, one index probe per realm whatever
// its backlog), then that realm's oldest due event (FOR UPDATE SKIP LOCKED).
// Each realm gets one claim a round, so a realm's backlog delays only itself.
// Webhook deliveries are a second queue with the same dequeue. An event whose
// realm has nothing in the workers skips the dequeue: at its write's commit
// it is handed to a worker waiting for work, whose evaluation takes it
// (deletes it) as its first statement; an event of a realm with work in the
// workers, or with no worker waiting, is claimed from the queue.
//
// Workers run on a small pool of their own, so they never take the API's
// connections; each evaluation, and each delivery's reading and recording,
// runs under a background seat of its realm (Gate: the fairness controller).
// A seat stands for a core's worth of work, so a webhook request waits for
// its receiver outside any seat: a receiver that takes 15 s to answer holds
// no seat another realm's work needs. What it holds is a worker, so a realm
// has at most half the workers' deliveries in flight at once; the others stay
// free for the other realms. A realm's backlog is bounded
// (Config.Backlog): past it the realm's writes that would add an event are
// refused, 429 automation_backlog with Retry-After, rather than the queue
// growing without end. An event caused by an automation's own action carries
// its cause's hop + 1; past Config.MaxHops the chain stops, logged
// (automation_hop_limit).
//
// automations reaches realm data only through rls; only the claim and the
// queue gauges read the queue tables across realms, through policies that
// allow the serving role to read and lease queue rows and nothing else.
package automations

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/grid"
	"github.com/appdor/appdor/rls"
)

// EBacklog is the error code of a write refused because its realm has too
// many automation events waiting.
const EBacklog = "automation_backlog"

// Defaults.
const (
	DefaultWorkers         = 4
	DefaultPoolSize        = 4
	DefaultBacklog         = 10_000
	DefaultMaxHops         = 8
	DefaultPollInterval    = 100 * time.Millisecond
	DefaultLease           = 2 * time.Minute
	DefaultDeliveryTimeout = 15 * time.Second
	DefaultSampleInterval  = time.Second
	// BacklogRetryAfter is the Retry-After of an automation_backlog refusal.
	BacklogRetryAfter = 10 * time.Second
	// triggerTTL is how long a table's triggers are remembered by the write
	// path. An event of a table whose automations changed meanwhile on
	// another replica is evaluated against the automations of its time of
	// evaluation, so a stale answer costs an event that matches nothing, or
	// (for a new automation) misses writes for at most this long.
	triggerTTL = 2 * time.Second
	// maxEventAttempts bounds the evaluations of an event that keeps
	// failing (a database error, not an action's refusal, which is recorded
	// in the run); it is then kept as failed.
	maxEventAttempts = 10
)

// DefaultRetrySchedule is the wait before each retry of a webhook delivery
// (Svix's schedule): eight attempts over about a day and a half, each wait
// jittered by ±20%.
var DefaultRetrySchedule = []time.Duration{
	5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour,
}

// Config sizes the automations. The zero value takes the defaults.
type Config struct {
	// Workers is the number of worker goroutines in this process; 0 is
	// DefaultWorkers, negative runs none (events are still recorded, and
	// another process's workers run them).
	Workers int
	// PoolSize is the workers' own database pool; 0 is DefaultPoolSize.
	PoolSize int
	// Backlog is how many pending events a realm may have before its writes
	// that would add one are refused (automation_backlog); 0 is
	// DefaultBacklog.
	Backlog int
	// MaxHops is how long a chain of automations triggering automations may
	// grow; 0 is DefaultMaxHops.
	MaxHops int
	// PollInterval is how often an idle worker looks for work; 0 is
	// DefaultPollInterval. A write in this process wakes the workers at once.
	PollInterval time.Duration
	// Lease is how long a claimed event is a worker's before another may
	// take it (a crashed worker's event is retried then); 0 is DefaultLease.
	Lease time.Duration
	// DeliveryTimeout bounds one webhook request; 0 is DefaultDeliveryTimeout.
	DeliveryTimeout time.Duration
	// RetrySchedule is the wait before each retry of a delivery; nil is
	// DefaultRetrySchedule. Its length + 1 is the number of attempts.
	RetrySchedule []time.Duration
	// SampleInterval is how often the queue gauges and the backlog counts are
	// read; 0 is DefaultSampleInterval.
	SampleInterval time.Duration
	// AllowPrivate lets webhooks reach loopback, private, link-local and
	// other non-public addresses. Off, those are refused when dialled.
	AllowPrivate bool
	// AllowCIDRs are ranges webhooks may reach even though they are not
	// public (e.g. 10.1.2.0/24 for one internal receiver).
	AllowCIDRs []netip.Prefix
}

// Sized returns cfg with its zeros replaced by the defaults.
func (cfg Config) Sized() Config {
	if cfg.Workers == 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.PoolSize <= 0 {
		cfg.PoolSize = DefaultPoolSize
	}
	if cfg.Backlog <= 0 {
		cfg.Backlog = DefaultBacklog
	}
	if cfg.MaxHops <= 0 {
		cfg.MaxHops = DefaultMaxHops
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.DeliveryTimeout <= 0 {
		cfg.DeliveryTimeout = DefaultDeliveryTimeout
	}
	if cfg.RetrySchedule == nil {
		cfg.RetrySchedule = DefaultRetrySchedule
	}
	if cfg.SampleInterval <= 0 {
		cfg.SampleInterval = DefaultSampleInterval
	}
	return cfg
}

// realmSlots is how many claims, events and deliveries together, the
// workers may hold for one realm at once: half the workers, at least one.
func realmSlots(workers int) int { return max(1, workers/2) }

// Gate runs a unit of a realm's background work under the fairness
// controller's background level; release gives the seat back, and calling
// it again does nothing (an evaluation gives its seat back before sending
// its webhooks, and again, deferred, on every other path).
type Gate interface {
	Acquire(ctx context.Context, realm string) (release func(), err error)
}

// Service is the automations of one Appdor process: the API handlers, the
// write hook (grid.Events) and, once started, the workers.
type Service struct {
	// Live, when set, hears of the rows automations' actions wrote, once
	// their transaction has committed.
	Live grid.Live

	cfg     Config
	log     *slog.Logger
	db      *rls.DB // the API's: handlers
	metrics *metrics

	triggers triggerCache
	backlog  backlog
	wake     chan struct{}
	// handed passes a committed event straight to an idle worker (see
	// handoff); unbuffered, so only a worker waiting for work takes one.
	handed chan handed
	// slots bounds each realm's claims, events and deliveries together,
	// handed events included.
	slots *slots

	// Set by Start.
	wdb        *rls.DB // the workers' own pool, realm-scoped
	wpool      *pgxpool.Pool
	gate       Gate
	events     *queue
	deliveries *queue
	sender     *sender
	cancel     context.CancelFunc
	wg         sync.WaitGroup
}

// New returns the automations over db (the API's pool), with its metrics on
// reg. It starts nothing: Start runs the workers.
func New(cfg Config, db *rls.DB, log *slog.Logger, reg prometheus.Registerer) *Service {
	s := &Service{
		cfg:    cfg.Sized(),
		log:    log,
		db:     db,
		wake:   make(chan struct{}, 1),
		handed: make(chan handed),
	}
	s.slots = newSlots(realmSlots(s.cfg.Workers))
	s.metrics = newMetrics(reg)
	s.triggers.m = map[tableKey]triggerEntry{}
	s.backlog.sampled, s.backlog.added, s.backlog.logged = map[uuid.UUID]int{}, map[uuid.UUID][]uint64{}, map[uuid.UUID]time.Time{}
	return s
}

// Config is the sized configuration.
func (s *Service) Config() Config { return s.cfg }

// Start runs the queue sampler and the workers on pool (the workers' own)
// until Close. gate may be nil (no fairness controller).
func (s *Service) Start(pool *pgxpool.Pool, statementTimeout time.Duration, gate Gate) {
	s.wpool = pool
	// A worker waits for its own pool longer than a request would: it has
	// no client waiting, and its work is bounded by the pool's size.
	s.wdb = rls.New(pool, statementTimeout, 10*time.Second)
	s.gate = gate
	s.events = newQueue(pool, eventRealmsSQL, claimEventSQL, releaseEventSQL, s.cfg.PollInterval)
	s.deliveries = newQueue(pool, deliveryRealmsSQL, claimDeliverySQL, releaseDeliverySQL, s.cfg.PollInterval)
	// One realm's claims, events and deliveries together, hold at most half
	// the workers, so a worker is always free to claim another realm's
	// work: while a storming realm's claims wait for its background seat, a
	// quiet realm's event is claimed and runs beside them. (With a bound for
	// each queue, a storm's events held two workers of four and its
	// deliveries the other two, and a quiet realm's events were not claimed
	// until the storm's had all run.)
	s.events.slots, s.deliveries.slots = s.slots, s.slots
	s.sender = newSender(s.cfg)
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.sample(ctx)
	}()
	for i := 0; i < s.cfg.Workers; i++ {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.work(ctx)
		}()
	}
	s.log.Info("automations: started", slog.Int("automation_workers", max(s.cfg.Workers, 0)),
		slog.Int("automation_pool_size", int(pool.Config().MaxConns)), slog.Int("automation_backlog", s.cfg.Backlog),
		slog.Bool("webhook_allow_private", s.cfg.AllowPrivate), slog.Int("webhook_allow_cidrs", len(s.cfg.AllowCIDRs)))
}

// Close stops the workers and waits for them: an evaluation or a delivery
// in progress is abandoned (the evaluation rolls back), and its item is
// given back to the queue, due at once.
func (s *Service) Close() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.wg.Wait()
	s.cancel = nil
}

// poke wakes one idle worker.
func (s *Service) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// RowsChanged implements grid.Events: it records one event for the write
// batch when the table has an enabled automation whose trigger matches, and
// refuses the write when the realm's backlog is full.
func (s *Service) RowsChanged(ctx context.Context, tx pgx.Tx, realm, table uuid.UUID, change grid.Change) error {
	match, err := s.triggers.matches(ctx, tx, realm, table, change)
	if err != nil || !match {
		return err
	}
	if n, full := s.backlog.full(realm, s.cfg.Backlog); full {
		s.metrics.backlogRefused.Inc()
		if s.backlog.shouldLog(realm) {
			s.log.Warn("automation_backlog: a realm's writes are refused while its automation events wait",
				slog.String("realm", realm.String()), slog.Int("pending", n), slog.Int("automation_backlog", s.cfg.Backlog))
		}
		return &appdor.Error{Code: EBacklog, RetryAfter: BacklogRetryAfter,
			Message: "this realm has too many automation events waiting to run; nothing was written; retry later",
			Details: map[string]int{"pending": n, "bound": s.cfg.Backlog}}
	}
	return s.enqueue(ctx, tx, realm, table, change, 0)
}

// enqueue inserts one event in tx.
func (s *Service) enqueue(ctx context.Context, tx pgx.Tx, realm, table uuid.UUID, change grid.Change, hop int) error {
	ids := make([]uuid.UUID, len(change.Rows))
	versions := make([]int64, len(change.Rows))
	for i, r := range change.Rows {
		ids[i], versions[i] = r.ID, r.Version
	}
	fields := change.Fields
	if fields == nil {
		fields = []string{}
	}
	var xid, id int64
	if err := tx.QueryRow(ctx,
		`INSERT INTO automation_events (realm_id, table_id, event, row_ids, versions, fields, hop)
		 VALUES ($1, $2, $3, $4, $5, $6, $7)
		 RETURNING pg_current_xact_id()::text::bigint, id`, realm, table, change.Event, ids, versions, fields, hop).Scan(&xid, &id); err != nil {
		return err
	}
	s.backlog.add(realm, uint64(xid))
	grid.AfterCommit(ctx, func() { s.handoff(handed{realm, table, id, ids}) })
	return nil
}

// handed is an event handed to a worker at its write's commit.
type handed struct {
	realm, table uuid.UUID
	id           int64
	rows         []uuid.UUID
}

// handoff gives a just-committed event to a worker waiting for work, when
// its realm has nothing in the workers (no claim, no evaluation, no
// delivery): the worker evaluates it at once, skipping the round of realms
// and the claim, which took a quiet realm's event 1.2 ms at the median and
// 4.9 ms at p99 beside the automation storm (0.7 and 1.8 ms without it).
// Otherwise, or when no worker waits, the event waits in the queue and a
// worker is woken to claim it there: a realm with work in the workers
// already is served by the fair dequeue, one claim a round, as before.
func (s *Service) handoff(h handed) {
	if s.slots.takeIdle(h.realm) {
		select {
		case s.handed <- h:
			return
		default:
			s.slots.give(h.realm)
		}
	}
	s.poke()
}

// Trigger is what starts an automation.
type Trigger struct {
	Event string `json:"event"`
	// Fields, for row.updated, limits the trigger to writes that set one of
	// these fields.
	Fields []string `json:"fields,omitempty"`
}

// matches says whether a write batch fires t.
func (t Trigger) matches(c grid.Change) bool {
	if t.Event != c.Event {
		return false
	}
	if t.Event != grid.EventRowUpdated || len(t.Fields) == 0 {
		return true
	}
	for _, f := range t.Fields {
		for _, g := range c.Fields {
			if f == g {
				return true
			}
		}
	}
	return false
}

type tableKey struct{ realm, table uuid.UUID }

type triggerEntry struct {
	triggers []Trigger
	at       time.Time
}

// triggerCache remembers, briefly, the triggers of each table's enabled
// automations, so that a write to a table without automations costs no
// query.
type triggerCache struct {
	mu sync.Mutex
	m  map[tableKey]triggerEntry
}

const maxCachedTables = 10_000

func (c *triggerCache) matches(ctx context.Context, tx pgx.Tx, realm, table uuid.UUID, change grid.Change) (bool, error) {
	k := tableKey{realm, table}
	c.mu.Lock()
	e, ok := c.m[k]
	c.mu.Unlock()
	if !ok || time.Since(e.at) > triggerTTL {
		rows, err := tx.Query(ctx, `SELECT trigger FROM automations WHERE realm_id = $1 AND table_id = $2 AND enabled`, realm, table)
		if err != nil {
			return false, err
		}
		ts, err := pgx.CollectRows(rows, pgx.RowTo[Trigger])
		if err != nil {
			return false, err
		}
		e = triggerEntry{triggers: ts, at: time.Now()}
		c.mu.Lock()
		if len(c.m) >= maxCachedTables {
			clear(c.m)
		}
		c.m[k] = e
		c.mu.Unlock()
	}
	for _, t := range e.triggers {
		if t.matches(change) {
			return true, nil
		}
	}
	return false, nil
}

// forget drops a table's remembered triggers, after its automations change.
func (c *triggerCache) forget(realm, table uuid.UUID) {
	c.mu.Lock()
	delete(c.m, tableKey{realm, table})
	c.mu.Unlock()
}

// backlog estimates each realm's pending events: the last sample of the
// queue plus the events added since that the sample did not see. Which ones
// it saw is exact, not a guess from the clock: every event remembers the
// transaction that added it, the sample reads the queue and its snapshot in
// one statement, and an event whose transaction the snapshot shows finished
// was either counted (committed) or never there (rolled back). Only events of
// transactions still open at the sample, or begun after it, are carried. The
// estimate errs high only for an event rolled back, until the next sample.
type backlog struct {
	mu      sync.Mutex
	sampled map[uuid.UUID]int
	added   map[uuid.UUID][]uint64 // the adding transactions' ids, one per event
	logged  map[uuid.UUID]time.Time
}

// backlogLogEvery is how often a realm's refusals get a log line.
const backlogLogEvery = 10 * time.Second

func (b *backlog) full(realm uuid.UUID, bound int) (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.sampled[realm] + len(b.added[realm])
	return n, n >= bound
}

// add counts an event added by the transaction xid.
func (b *backlog) add(realm uuid.UUID, xid uint64) {
	b.mu.Lock()
	b.added[realm] = append(b.added[realm], xid)
	b.mu.Unlock()
}

// reset replaces the estimate with a sample taken in snap: the sample's
// counts, plus the added events whose transactions snap does not show
// finished.
func (b *backlog) reset(counts map[uuid.UUID]int, snap snapshot) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sampled = counts
	for r, xids := range b.added {
		kept := xids[:0]
		for _, x := range xids {
			if !snap.finished(x) {
				kept = append(kept, x)
			}
		}
		if len(kept) == 0 {
			delete(b.added, r)
		} else {
			b.added[r] = kept
		}
	}
	for r, at := range b.logged {
		if time.Since(at) > backlogLogEvery {
			delete(b.logged, r)
		}
	}
}

// snapshot is a PostgreSQL snapshot (pg_current_snapshot): transactions
// below xmin had finished when it was taken; those from xmax on had not
// begun; between them, those in xip were running.
type snapshot struct {
	xmin, xmax uint64
	xip        map[uint64]bool
}

// parseSnapshot reads pg_snapshot's text form, "xmin:xmax:xip,xip,…".
func parseSnapshot(s string) (snapshot, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return snapshot{}, fmt.Errorf("snapshot %q: want xmin:xmax:xip", s)
	}
	var snap snapshot
	var err error
	if snap.xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return snapshot{}, fmt.Errorf("snapshot %q: %w", s, err)
	}
	if snap.xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return snapshot{}, fmt.Errorf("snapshot %q: %w", s, err)
	}
	snap.xip = map[uint64]bool{}
	if parts[2] != "" {
		for _, x := range strings.Split(parts[2], ",") {
			xid, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return snapshot{}, fmt.Errorf("snapshot %q: %w", s, err)
			}
			snap.xip[xid] = true
		}
	}
	return snap, nil
}

// finished reports whether the transaction xid had committed or rolled back
// when snap was taken (pg_visible_in_snapshot).
func (snap snapshot) finished(xid uint64) bool {
	return xid < snap.xmin || (xid < snap.xmax && !snap.xip[xid])
}

// shouldLog reports whether a refusal of realm gets a log line now, and if
// so records that it did: one line per realm per backlogLogEvery.
func (b *backlog) shouldLog(realm uuid.UUID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if at, ok := b.logged[realm]; ok && time.Since(at) < backlogLogEvery {
		return false
	}
	b.logged[realm] = time.Now()
	return true
}
