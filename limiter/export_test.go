package limiter

// SetClock makes l take the time from now (µs since the epoch) instead of
// Redis TIME, so that the script can be run against a fake clock.
func (l *Limiter) SetClock(now func() int64) { l.now = now }

// Model is the Go arithmetic the script mirrors, for one key whose state is
// held in a map; an entry whose tat has passed is gone, as the key expires in
// Redis.
type Model struct {
	tat map[string]int64
}

func NewModel() *Model { return &Model{tat: map[string]int64{}} }

// Decide runs gcra for one request on key at now (µs).
func (m *Model) Decide(key string, now int64, limit int) (allowed bool, retry, remaining, reset int64) {
	t, ok := m.tat[key]
	if ok && t <= now {
		delete(m.tat, key) // expired
		t = 0
	}
	v := gcra(now, t, rateOf(limit))
	if v.allowed {
		m.tat[key] = v.tat
	}
	return v.allowed, v.retry, v.remaining, v.reset
}

// Keys is how many keys the model holds that have not expired at now.
func (m *Model) Keys(now int64) int {
	n := 0
	for _, t := range m.tat {
		if t > now {
			n++
		}
	}
	return n
}

var CeilSeconds = ceilSeconds

var Keys = keys
