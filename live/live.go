// Package live tells the clients watching a table what changed in it, across
// every replica, within about a second.
//
//   - Events: after a write commits, grid (and automations) tell the Hub; it
//     publishes a thin event — realm, table, kind, row ids and versions, never
//     cell data — on one Redis pub/sub channel, from a goroutine of its own
//     (a write never waits on Redis; a full queue turns into a resync of the
//     tables it held). Every replica subscribes and hands each event to its
//     own streams of that table and realm.
//   - Streams: GET /tables/{table}/events, server-sent events. A stream is
//     checked once against RLS, then holds no fairness seat and no database
//     connection. It coalesces what arrives into one message per
//     Config.Coalesce (at most ten a second), turns more than BulkRows rows
//     into a resync, and is dropped if a write to it blocks for WriteTimeout:
//     nothing buffers without bound. A reconnecting client's Last-Event-ID is
//     replayed from the replica's recent events, or answered by a resync.
//   - Caps: open streams per replica, per realm and per user (or token);
//     beyond one, 429 concurrency_limited (reason live_streams), with a metric
//     and a log line of that name.
package live

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	"github.com/appdor/appdor/grid"
)

// Channel is the Redis pub/sub channel every replica publishes and
// subscribes on.
const Channel = "appdor:live"

// Defaults.
const (
	DefaultMaxStreams         = 10_000
	DefaultMaxStreamsPerRealm = 500
	DefaultMaxStreamsPerUser  = 20
	DefaultHeartbeat          = 15 * time.Second
	DefaultIdleTimeout        = 5 * time.Minute
	DefaultCoalesce           = 100 * time.Millisecond
	DefaultBulkRows           = 500
	DefaultWriteTimeout       = 10 * time.Second
	// DefaultResumeWindow is how far back a Last-Event-ID is replayed.
	DefaultResumeWindow = 2 * time.Minute
	// recentEvents bounds the replica's memory of events for resuming.
	recentEvents = 8192
	// publishQueue bounds the events waiting for Redis.
	publishQueue = 4096
)

// Config sizes the Hub; zero values are the defaults.
type Config struct {
	MaxStreams         int // per replica
	MaxStreamsPerRealm int
	MaxStreamsPerUser  int // per user, or per token for API clients
	Heartbeat          time.Duration
	IdleTimeout        time.Duration // a stream with nothing to send this long ends; the client reconnects
	Coalesce           time.Duration // the least time between two messages of a stream
	BulkRows           int           // more rows than this waiting for a stream become a resync
	WriteTimeout       time.Duration // a write to a stream blocked this long drops it
	Writers            int           // stream writes running at once; 0 is half the cores, at least one
	ResumeWindow       time.Duration
	Log                *slog.Logger
}

func (cfg Config) sized() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.MaxStreams, DefaultMaxStreams)
	def(&cfg.MaxStreamsPerRealm, DefaultMaxStreamsPerRealm)
	def(&cfg.MaxStreamsPerUser, DefaultMaxStreamsPerUser)
	def(&cfg.BulkRows, DefaultBulkRows)
	def(&cfg.Writers, max(1, runtime.GOMAXPROCS(0)/2))
	defd(&cfg.Heartbeat, DefaultHeartbeat)
	defd(&cfg.IdleTimeout, DefaultIdleTimeout)
	defd(&cfg.Coalesce, DefaultCoalesce)
	defd(&cfg.WriteTimeout, DefaultWriteTimeout)
	defd(&cfg.ResumeWindow, DefaultResumeWindow)
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// Event is what a replica publishes of one committed change of a table.
type Event struct {
	ID       string      `json:"id"`
	Realm    uuid.UUID   `json:"realm"`
	Table    uuid.UUID   `json:"table"`
	Kind     string      `json:"kind"` // a grid event: row.created, row.updated, row.deleted, fields.changed; or resync
	Rows     []uuid.UUID `json:"rows,omitempty"`
	Versions []int64     `json:"versions,omitempty"`
	At       int64       `json:"at"` // when it was published, Unix microseconds
}

// kindResync asks a table's clients to reload it: too much changed, or an
// event may have been lost on the way.
const kindResync = "resync"

// received is an event as this replica received it.
type received struct {
	ev Event
	at time.Time
}

// Hub publishes the changes of this replica's writes and delivers every
// replica's to this replica's streams.
type Hub struct {
	cfg     Config
	redis   rueidis.Client
	m       *metrics
	replica string
	seq     atomic.Uint64

	queue    chan Event
	mu       sync.Mutex
	overflow map[[2]uuid.UUID]bool // tables whose events the full queue dropped: a resync is owed
	topics   map[topicKey]*topic
	byRealm  map[uuid.UUID]int
	byUser   map[uuid.UUID]int
	total    int
	recent   []received      // a ring of the last recentEvents events
	next     int             // where the ring writes next
	closed   chan struct{}   // closed by EndStreams: every stream ends, and no new one opens
	slots    chan *writeSlot // Config.Writers turns to write to a stream
	hold     time.Duration   // the longest a write keeps its slot: slotHold
	end      sync.Once
	stop     context.CancelFunc
	wg       sync.WaitGroup
}

// New returns a Hub on client; Start runs it.
func New(client rueidis.Client, cfg Config, reg prometheus.Registerer) *Hub {
	var b [4]byte
	_, _ = rand.Read(b[:])
	h := &Hub{
		cfg: cfg.sized(), redis: client, replica: hex.EncodeToString(b[:]),
		queue: make(chan Event, publishQueue), overflow: map[[2]uuid.UUID]bool{},
		topics: map[topicKey]*topic{}, byRealm: map[uuid.UUID]int{}, byUser: map[uuid.UUID]int{},
		closed: make(chan struct{}),
	}
	h.slots, h.hold = make(chan *writeSlot, h.cfg.Writers), slotHold
	for range h.cfg.Writers {
		h.slots <- &writeSlot{}
	}
	h.m = newMetrics(h, reg)
	return h
}

// Start publishes and subscribes until ctx ends or Close.
func (h *Hub) Start(ctx context.Context) {
	ctx, h.stop = context.WithCancel(ctx)
	h.wg.Add(2)
	go func() { defer h.wg.Done(); h.publishLoop(ctx) }()
	go func() { defer h.wg.Done(); h.subscribeLoop(ctx) }()
}

// EndStreams ends every stream and refuses new ones (503): their clients
// reconnect, to another replica or to this one once it is back. The
// replica still publishes what its writes change.
func (h *Hub) EndStreams() { h.end.Do(func() { close(h.closed) }) }

// Close ends every stream, publishes what is still queued (for a second at
// most) and stops.
func (h *Hub) Close() {
	h.EndStreams()
	if h.stop == nil {
		return
	}
	h.drain()
	h.stop()
	h.wg.Wait()
}

// drain publishes what is queued, for a second at most.
func (h *Hub) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for {
		select {
		case ev := <-h.queue:
			h.send(ctx, ev)
		default:
			return
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// TableChanged implements grid.Live: it queues the change for publishing
// and returns at once.
func (h *Hub) TableChanged(realm, table uuid.UUID, change grid.Change) {
	ev := Event{Realm: realm, Table: table, Kind: change.Event}
	if len(change.Rows) > h.cfg.BulkRows {
		ev.Kind = kindResync
	} else {
		ev.Rows = make([]uuid.UUID, len(change.Rows))
		ev.Versions = make([]int64, len(change.Rows))
		for i, r := range change.Rows {
			ev.Rows[i], ev.Versions[i] = r.ID, r.Version
		}
	}
	h.publish(ev)
}

func (h *Hub) publish(ev Event) {
	ev.ID = h.replica + "-" + strconv.FormatUint(h.seq.Add(1), 36)
	ev.At = time.Now().UnixMicro()
	select {
	case h.queue <- ev:
	default:
		h.m.publishDropped.Inc()
		h.mu.Lock()
		h.overflow[[2]uuid.UUID{ev.Realm, ev.Table}] = true
		h.mu.Unlock()
	}
}

// publishLoop sends queued events to Redis, and a resync for each table
// whose events the full queue dropped.
func (h *Hub) publishLoop(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-h.queue:
			h.send(ctx, ev)
		case <-tick.C:
			h.mu.Lock()
			owed := h.overflow
			h.overflow = map[[2]uuid.UUID]bool{}
			h.mu.Unlock()
			for k := range owed {
				h.send(ctx, Event{ID: h.replica + "-" + strconv.FormatUint(h.seq.Add(1), 36),
					Realm: k[0], Table: k[1], Kind: kindResync, At: time.Now().UnixMicro()})
			}
		}
	}
}

func (h *Hub) send(ctx context.Context, ev Event) {
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := h.redis.Do(pctx, h.redis.B().Publish().Channel(Channel).Message(rueidis.BinaryString(b)).Build()).Error(); err != nil {
		if ctx.Err() == nil {
			h.m.publishFailed.Inc()
			h.cfg.Log.Warn("live: publishing an event failed; its table's watchers resync", slog.String("error", err.Error()))
			h.mu.Lock()
			h.overflow[[2]uuid.UUID{ev.Realm, ev.Table}] = true
			h.mu.Unlock()
		}
		return
	}
	h.m.published.Inc()
}

// subscribeLoop receives every replica's events until ctx ends,
// resubscribing after a lost connection; every stream resyncs then, since
// events may have passed meanwhile.
func (h *Hub) subscribeLoop(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		// On a connection of its own: a Receive on the client's shared
		// connection runs its handler on that connection's reader, and
		// every command's reply behind a message waits for it. An import's
		// events (a thousand row ids each) decoded there held the limiter's
		// answers to other realms' requests for up to 14 ms.
		err := h.redis.Dedicated(func(c rueidis.DedicatedClient) error {
			return c.Receive(ctx, c.B().Subscribe().Channel(Channel).Build(), func(msg rueidis.PubSubMessage) {
				var ev Event
				if json.Unmarshal([]byte(msg.Message), &ev) != nil {
					return
				}
				h.deliver(ev)
			})
		})
		if ctx.Err() != nil {
			return
		}
		h.cfg.Log.Warn("live: the subscription to Redis ended; resubscribing, and every stream resyncs",
			slog.String("error", errString(err)))
		h.resyncAll("gap")
		if time.Since(start) > 10*time.Second {
			backoff = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
		h.resyncAll("gap")
	}
}

func errString(err error) string {
	if err == nil {
		return "closed"
	}
	return err.Error()
}

// deliver remembers ev and hands it to the streams of its table and realm.
func (h *Hub) deliver(ev Event) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.recent) < recentEvents {
		h.recent = append(h.recent, received{ev, now})
	} else {
		h.recent[h.next] = received{ev, now}
	}
	h.next = (h.next + 1) % recentEvents
	// Keyed by realm and table: a table id is one realm's, but never trust
	// that alone.
	if t := h.topics[topicKey{ev.Realm, ev.Table}]; t != nil {
		t.batch.add(ev)
		h.schedule(t)
	}
}

// resyncAll asks every stream of this replica to resync.
func (h *Hub) resyncAll(reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range h.topics {
		t.batch.owe(reason)
		h.schedule(t)
	}
}

// since returns the recent events of table after the one called id,
// oldest first, or false when id is not among those of the resume window.
// h.mu is held.
func (h *Hub) since(realm, table uuid.UUID, id string) ([]Event, bool) {
	n := len(h.recent)
	start := 0
	if n == recentEvents {
		start = h.next // the oldest
	}
	cut := time.Now().Add(-h.cfg.ResumeWindow)
	var out []Event
	found := false
	for i := range n {
		r := h.recent[(start+i)%n]
		if !found {
			found = r.ev.ID == id && r.at.After(cut)
			continue
		}
		if r.ev.Table == table && r.ev.Realm == realm {
			out = append(out, r.ev)
		}
	}
	return out, found
}
