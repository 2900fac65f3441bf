package usage

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
)

// Minute is one minute of a realm's usage, summed over every replica.
type Minute struct {
	At       time.Time `json:"at"`
	Requests int64     `json:"requests"`
	// P95Ms is the 95th percentile of the minute's request latency in
	// milliseconds, within its bucket (see Bounds); null without requests.
	P95Ms   *float64         `json:"p95_ms"`
	Refused map[string]int64 `json:"refused"`
	// Seats is how many seats the realm's work held on average.
	Seats float64 `json:"seats"`
	// QueueWaits is how many units waited in a queue for their seat, and
	// MeanWaitMs how long on average; null when none waited.
	QueueWaits int64    `json:"queue_waits"`
	MeanWaitMs *float64 `json:"mean_wait_ms"`
}

// TokenUse is a token's last hour.
type TokenUse struct {
	Requests int64      `json:"requests_last_hour"`
	Refused  int64      `json:"refused_last_hour"`
	LastUsed *time.Time `json:"last_used_at"`
}

// Report is a realm's last hour, oldest minute first, every minute present.
type Report struct {
	Realm   uuid.UUID              `json:"realm_id"`
	Minutes []Minute               `json:"minutes"`
	Tokens  map[uuid.UUID]TokenUse `json:"-"`
}

// Totals sums a report's minutes: requests and refusals of the hour.
func (r Report) Totals() (requests, refused int64) {
	for _, m := range r.Minutes {
		requests += m.Requests
		for _, n := range m.Refused {
			refused += n
		}
	}
	return requests, refused
}

// Read is realm's last hour as of now, in one pipelined round trip.
func Read(ctx context.Context, rdb rueidis.Client, realm uuid.UUID, now time.Time) (Report, error) {
	last := now.Unix() / 60
	n := int64(Window / time.Minute)
	cmds := make(rueidis.Commands, 0, n+1)
	for m := last - n + 1; m <= last; m++ {
		cmds = append(cmds, rdb.B().Hgetall().Key(realmKey(realm, m)).Build())
	}
	cmds = append(cmds, rdb.B().Hgetall().Key(lastUsedKey(realm)).Build())
	res := rdb.DoMulti(ctx, cmds...)
	rep := Report{Realm: realm, Minutes: make([]Minute, 0, n), Tokens: map[uuid.UUID]TokenUse{}}
	for i := int64(0); i < n; i++ {
		h, err := res[i].AsStrMap()
		if err != nil && !rueidis.IsRedisNil(err) {
			return Report{}, err
		}
		rep.Minutes = append(rep.Minutes, minuteOf(time.Unix((last-n+1+i)*60, 0).UTC(), h, rep.Tokens))
	}
	lastUsed, err := res[n].AsStrMap()
	if err != nil && !rueidis.IsRedisNil(err) {
		return Report{}, err
	}
	for id, v := range lastUsed {
		tok, err1 := uuid.Parse(id)
		ms, err2 := strconv.ParseInt(v, 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		u := rep.Tokens[tok]
		t := time.UnixMilli(ms).UTC()
		u.LastUsed = &t
		rep.Tokens[tok] = u
	}
	return rep, nil
}

func minuteOf(at time.Time, h map[string]string, tokens map[uuid.UUID]TokenUse) Minute {
	m := Minute{At: at, Refused: map[string]int64{}}
	var buckets [14]int64
	var seatMicros, waitMicros int64
	for f, v := range h {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		switch {
		case f == "req":
			m.Requests = n
		case f == "seat_us":
			seatMicros = n
		case f == "wait_n":
			m.QueueWaits = n
		case f == "wait_us":
			waitMicros = n
		case strings.HasPrefix(f, "ref:"):
			m.Refused[f[4:]] = n
		case strings.HasPrefix(f, "b"):
			if i, err := strconv.Atoi(f[1:]); err == nil && i >= 0 && i < len(buckets) {
				buckets[i] = n
			}
		case strings.HasPrefix(f, "treq:"), strings.HasPrefix(f, "tref:"):
			id, err := uuid.Parse(f[5:])
			if err != nil {
				continue
			}
			u := tokens[id]
			if strings.HasPrefix(f, "treq:") {
				u.Requests += n
			} else {
				u.Refused += n
			}
			tokens[id] = u
		}
	}
	m.P95Ms = Percentile(buckets[:], 0.95)
	m.Seats = float64(seatMicros) / float64(time.Minute/time.Microsecond)
	if m.QueueWaits > 0 {
		w := float64(waitMicros) / float64(m.QueueWaits) / 1000
		m.MeanWaitMs = &w
	}
	return m
}

// Percentile is the q-quantile of bucket counts over Bounds, interpolated
// linearly within its bucket; nil for no counts. A quantile in the last,
// unbounded bucket is its lower bound.
func Percentile(buckets []int64, q float64) *float64 {
	var total int64
	for _, n := range buckets {
		total += n
	}
	if total == 0 {
		return nil
	}
	rank := q * float64(total)
	var cum float64
	for i, n := range buckets {
		if n == 0 {
			continue
		}
		if cum+float64(n) >= rank {
			lo := 0.0
			if i > 0 {
				lo = Bounds[i-1]
			}
			if i >= len(Bounds) {
				v := lo
				return &v
			}
			v := lo + (Bounds[i]-lo)*(rank-cum)/float64(n)
			return &v
		}
		cum += float64(n)
	}
	v := Bounds[len(Bounds)-1]
	return &v
}

// Active lists the realms with any usage in the last hour, in one pipelined
// round trip.
func Active(ctx context.Context, rdb rueidis.Client, now time.Time) ([]uuid.UUID, error) {
	last := now.Unix() / 60
	n := int64(Window / time.Minute)
	cmds := make(rueidis.Commands, 0, n)
	for m := last - n + 1; m <= last; m++ {
		cmds = append(cmds, rdb.B().Smembers().Key(activeKey(m)).Build())
	}
	seen := map[uuid.UUID]bool{}
	for _, res := range rdb.DoMulti(ctx, cmds...) {
		ids, err := res.AsStrSlice()
		if err != nil && !rueidis.IsRedisNil(err) {
			return nil, err
		}
		for _, s := range ids {
			if id, err := uuid.Parse(s); err == nil {
				seen[id] = true
			}
		}
	}
	out := make([]uuid.UUID, 0, len(seen))
	for id := range seen {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}
