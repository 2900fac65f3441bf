package appdor

import (
	"sync/atomic"
	"time"
)

// EveryInterval lets one event through per Interval and counts the others, so
// that a line logged under a flood says how many events it stands for and a
// flood cannot flood the log too. It is safe for concurrent use; the zero
// value with an Interval set is ready.
type EveryInterval struct {
	Interval time.Duration
	last     atomic.Int64 // unix ns of the event let through last
	count    atomic.Int64 // events since then, this one included
}

// Take counts an event at now and reports whether it is the one to log, with
// the events it stands for (itself included).
func (e *EveryInterval) Take(now time.Time) (ok bool, n int64) {
	e.count.Add(1)
	t := now.UnixNano()
	last := e.last.Load()
	if t-last < int64(e.Interval) || !e.last.CompareAndSwap(last, t) {
		return false, 0
	}
	return true, e.count.Swap(0)
}

// Reset returns the events counted since the last one let through, and starts
// the count again.
func (e *EveryInterval) Reset() int64 { return e.count.Swap(0) }
