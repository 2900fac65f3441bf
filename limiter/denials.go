package limiter

import (
	"sync"
	"sync/atomic"
	"time"
)

// denials remembers, in this process, the keys Redis refused and until
// when. A refusal changes nothing in Redis (a key's tat moves only when a
// request is allowed), so every request on a refused key before its retry
// time would be refused again with the same answer; it is, here, with no
// round trip. A token hammering over its ceiling costs Redis one call per
// retry interval instead of one per request (the storm harness's agent: 600
// requests a second against a ceiling of 60 a minute). An entry is keyed by
// the key and its ceiling, so a changed ceiling asks Redis again, and its
// time is the time of Redis's answer plus the retry it gave, so that the
// Retry-After of a refusal answered here is never shorter than Redis's
// (later by the round trip at most). A remembered refusal holds while
// Redis is unreachable, and after Redis lost its state, until its time.
type denials struct {
	mu sync.Mutex
	m  map[denialKey]denial
	n  atomic.Int32 // len(m), read without mu: with no refusal remembered, a request takes no lock
}

// denialKey is a key under one ceiling: its script arguments.
type denialKey struct{ key, emission, burst string }

// denial is a refused key's state, in µs on the limiter's clock: until when
// it refuses, and its tat (for the Reset of a refusal).
type denial struct{ until, tat int64 }

// maxDenials bounds the entries: past it, expired ones are dropped, and a
// refusal with no room is simply not remembered (Redis answers it).
const maxDenials = 10_000

func newDenials() *denials { return &denials{m: map[denialKey]denial{}} }

// check returns the refusal of the request on keys (their script arguments
// in args, two each) that a remembered denial makes at now: of the keys
// refused, the one that refuses longest, as the script would choose.
func (s *denials) check(keys, args []string, scopes []Scope, limits []int, now int64) (Decision, bool) {
	if s.n.Load() == 0 {
		return Decision{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() { s.n.Store(int32(len(s.m))) }()
	best, found := -1, denial{}
	for i, key := range keys {
		k := denialKey{key, args[2*i], args[2*i+1]}
		d, ok := s.m[k]
		if !ok {
			continue
		}
		if d.until <= now {
			delete(s.m, k)
			continue
		}
		if best < 0 || d.until > found.until {
			best, found = i, d
		}
	}
	if best < 0 {
		return Decision{}, false
	}
	return Decision{
		Scope:      scopes[best],
		Limit:      limits[best],
		RetryAfter: time.Duration(found.until-now) * time.Microsecond,
		Reset:      time.Duration(max(found.tat-now, 0)) * time.Microsecond,
	}, true
}

// add remembers that key, under its script arguments emission and burst,
// refuses until until, with its tat at tat.
func (s *denials) add(key, emission, burst string, until, tat, now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() { s.n.Store(int32(len(s.m))) }()
	if len(s.m) >= maxDenials {
		for k, d := range s.m {
			if d.until <= now {
				delete(s.m, k)
			}
		}
		if len(s.m) >= maxDenials {
			return
		}
	}
	s.m[denialKey{key, emission, burst}] = denial{until: until, tat: tat}
}
