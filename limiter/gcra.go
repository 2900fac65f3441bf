package limiter

import "time"

// Window is the period a ceiling counts over: ceilings are requests per minute.
const Window = time.Minute

// rate is one ceiling in the generic cell rate algorithm's terms: a request
// is due every emission interval, and up to burst requests may arrive at once.
// Times are whole microseconds, the unit the Lua script works in.
type rate struct {
	emission int64 // µs between requests at the steady rate: Window / limit
	burst    int64 // requests that may arrive at once: the limit itself
}

// rateOf is the rate of a ceiling of limit requests per Window. A 60/minute
// ceiling lets 60 requests through at once, then one a second.
func rateOf(limit int) rate {
	if limit < 1 {
		limit = 1
	}
	e := Window.Microseconds() / int64(limit)
	if e < 1 {
		e = 1
	}
	return rate{emission: e, burst: int64(limit)}
}

// verdict is what GCRA says about one request against one key.
type verdict struct {
	allowed   bool
	tat       int64 // the key's new theoretical arrival time, when allowed
	retry     int64 // µs until the request would be allowed, when refused
	remaining int64 // requests that could still arrive now, after this one
	reset     int64 // µs until the key is back to a full burst
}

// gcra decides one request arriving at now on a key whose theoretical arrival
// time is tat (0 for a key that does not exist). It is the arithmetic of the
// Lua script, kept in Go so that it can be tested against a fake clock; the
// two must say the same thing, and the tests hold them to it.
//
// A key whose tat lies in the past is as good as absent, which is why the
// script lets it expire then.
func gcra(now, tat int64, r rate) verdict {
	if tat < now {
		tat = now
	}
	next := tat + r.emission
	allowAt := next - r.burst*r.emission
	if now < allowAt {
		return verdict{retry: allowAt - now, reset: tat - now}
	}
	return verdict{allowed: true, tat: next, remaining: (now - allowAt) / r.emission, reset: next - now}
}
