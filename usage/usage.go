// Package usage keeps each realm's recent usage by minute — requests, their
// latency, refusals by reason, seats in use, queue waits — and each token's
// requests and refusals, the same numbers whichever replica served them.
//
// Each replica adds up what it serves in memory (a map lookup and a few
// additions under a mutex per request, nothing on the network) and every
// FlushInterval writes the sums to Redis with one pipelined batch of HINCRBY,
// where every replica's sums meet: a minute is a hash per realm, kept for
// Retention. Latency is kept as counts per fixed bucket, which add up across
// replicas exactly, so the p95 read back is the fleet's, not an average of
// the replicas' own.
package usage

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
)

const (
	// DefaultFlushInterval is how often a replica writes its sums.
	DefaultFlushInterval = 5 * time.Second
	// Retention is how long a minute is kept: the gauges show the last hour.
	Retention = 2 * time.Hour
	// Window is how much the gauges show.
	Window = time.Hour
)

// Bounds are the latency buckets' upper bounds, in milliseconds; the last
// bucket is everything slower.
var Bounds = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000}

// Refusal reasons counted apart; any other refusal code counts as itself.
const (
	RateLimited        = "rate_limited"
	ConcurrencyLimited = "concurrency_limited"
)

// counts is one realm's minute on this replica, since the last flush.
type counts struct {
	requests   int64
	buckets    [14]int64 // len(Bounds)+1
	refused    map[string]int64
	seatMicros int64 // seat time held: its sum over a minute / 60 s is the seats in use on average
	waits      int64 // units that waited in a queue for their seat
	waitMicros int64
	tokens     map[uuid.UUID]*tokenCounts
}

type tokenCounts struct {
	requests, refused int64
	last              int64 // unix ms
}

type key struct {
	realm  uuid.UUID
	minute int64 // unix minutes
}

// Recorder adds up this replica's usage and flushes it to Redis.
type Recorder struct {
	rdb      rueidis.Client
	log      *slog.Logger
	interval time.Duration
	now      func() time.Time

	mu  sync.Mutex
	cur map[key]*counts

	stop chan struct{}
	done chan struct{}
	// Episode, when set, hears of each realm that had concurrency_limited
	// refusals in a flush after none in the flush before: the start of a
	// refusal episode, for the audit log.
	Episode     func(realm uuid.UUID, reason string, refused int64)
	lastRefused map[uuid.UUID]bool
}

// New returns a Recorder writing to rdb every interval (DefaultFlushInterval
// when 0). Start it with Run.
func New(rdb rueidis.Client, interval time.Duration, log *slog.Logger) *Recorder {
	if interval <= 0 {
		interval = DefaultFlushInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Recorder{rdb: rdb, log: log, interval: interval, now: time.Now, cur: map[key]*counts{},
		lastRefused: map[uuid.UUID]bool{}}
}

func (r *Recorder) at(realm uuid.UUID, t time.Time) *counts {
	k := key{realm, t.Unix() / 60}
	c := r.cur[k]
	if c == nil {
		c = &counts{}
		r.cur[k] = c
	}
	return c
}

// Request records one API request of realm (through token, or uuid.Nil for
// a session) that took d; refused is its refusal's code, "" when served.
func (r *Recorder) Request(realm, token uuid.UUID, d time.Duration, refused string) {
	if r == nil {
		return
	}
	now := r.now()
	ms := float64(d) / float64(time.Millisecond)
	b := len(Bounds)
	for i, ub := range Bounds {
		if ms <= ub {
			b = i
			break
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.at(realm, now)
	c.requests++
	c.buckets[b]++
	if refused != "" {
		if c.refused == nil {
			c.refused = map[string]int64{}
		}
		c.refused[refused]++
	}
	if token != uuid.Nil {
		if c.tokens == nil {
			c.tokens = map[uuid.UUID]*tokenCounts{}
		}
		tc := c.tokens[token]
		if tc == nil {
			tc = &tokenCounts{}
			c.tokens[token] = tc
		}
		tc.requests++
		if refused != "" {
			tc.refused++
		}
		tc.last = now.UnixMilli()
	}
}

// Seat records a unit of realm's work that held a seat for held after
// waiting waited for it in a queue (0: it found a seat at once).
func (r *Recorder) Seat(realm string, waited, held time.Duration) {
	if r == nil {
		return
	}
	id, err := uuid.Parse(realm)
	if err != nil {
		return
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.at(id, now)
	c.seatMicros += held.Microseconds()
	if waited > 0 {
		c.waits++
		c.waitMicros += waited.Microseconds()
	}
}

// Run flushes every interval until Close.
func (r *Recorder) Run() {
	r.stop, r.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(r.done)
		t := time.NewTicker(r.interval)
		defer t.Stop()
		for {
			select {
			case <-r.stop:
				r.Flush(context.Background())
				return
			case <-t.C:
				r.Flush(context.Background())
			}
		}
	}()
}

// Close stops Run after a last flush.
func (r *Recorder) Close() {
	if r == nil || r.stop == nil {
		return
	}
	close(r.stop)
	<-r.done
	r.stop = nil
}

func realmKey(realm uuid.UUID, minute int64) string {
	return "appdor:usage:{" + realm.String() + "}:" + strconv.FormatInt(minute, 10)
}

func activeKey(minute int64) string { return "appdor:usage:realms:" + strconv.FormatInt(minute, 10) }

func lastUsedKey(realm uuid.UUID) string {
	return "appdor:usage:{" + realm.String() + "}:token_last_used"
}

// Flush writes what was added up since the last flush, in one pipeline.
// What Redis does not take is logged and dropped: usage is a gauge, not a
// ledger, and the request path never waits for it.
func (r *Recorder) Flush(ctx context.Context) {
	r.mu.Lock()
	cur := r.cur
	r.cur = map[key]*counts{}
	r.mu.Unlock()
	if len(cur) == 0 {
		r.episodes(cur)
		return
	}
	cmds := make(rueidis.Commands, 0, len(cur)*8)
	active := map[int64][]string{}
	for k, c := range cur {
		rk := realmKey(k.realm, k.minute)
		fields := []string{}
		add := func(f string, n int64) {
			if n != 0 {
				cmds = append(cmds, r.rdb.B().Hincrby().Key(rk).Field(f).Increment(n).Build())
				fields = append(fields, f)
			}
		}
		add("req", c.requests)
		for i, n := range c.buckets {
			add("b"+strconv.Itoa(i), n)
		}
		for reason, n := range c.refused {
			add("ref:"+reason, n)
		}
		add("seat_us", c.seatMicros)
		add("wait_n", c.waits)
		add("wait_us", c.waitMicros)
		for id, tc := range c.tokens {
			add("treq:"+id.String(), tc.requests)
			add("tref:"+id.String(), tc.refused)
			cmds = append(cmds, r.rdb.B().Hset().Key(lastUsedKey(k.realm)).FieldValue().
				FieldValue(id.String(), strconv.FormatInt(tc.last, 10)).Build())
			cmds = append(cmds, r.rdb.B().Expire().Key(lastUsedKey(k.realm)).Seconds(int64(90*24*time.Hour/time.Second)).Build())
		}
		if len(fields) > 0 {
			cmds = append(cmds, r.rdb.B().Expire().Key(rk).Seconds(int64(Retention/time.Second)).Build())
			active[k.minute] = append(active[k.minute], k.realm.String())
		}
	}
	for minute, realms := range active {
		cmds = append(cmds, r.rdb.B().Sadd().Key(activeKey(minute)).Member(realms...).Build())
		cmds = append(cmds, r.rdb.B().Expire().Key(activeKey(minute)).Seconds(int64(Retention/time.Second)).Build())
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, res := range r.rdb.DoMulti(ctx, cmds...) {
		if err := res.Error(); err != nil {
			r.log.Warn("usage: writing the usage sums to Redis; these are dropped", slog.String("error", err.Error()))
			break
		}
	}
	r.episodes(cur)
}

// episodes tells Episode of realms refused for concurrency in this flush
// and not in the one before.
func (r *Recorder) episodes(cur map[key]*counts) {
	now := map[uuid.UUID]int64{}
	for k, c := range cur {
		now[k.realm] += c.refused[ConcurrencyLimited]
	}
	next := map[uuid.UUID]bool{}
	for realm, n := range now {
		if n == 0 {
			continue
		}
		next[realm] = true
		if !r.lastRefused[realm] && r.Episode != nil {
			r.Episode(realm, ConcurrencyLimited, n)
		}
	}
	r.lastRefused = next
}
