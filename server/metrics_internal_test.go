package server

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestRealmSeriesKeepsRealmsInFlight: a realm with a request in flight is
// never forgotten, however long the request; once it ends, the realm is
// forgotten after the idle setting, from every vector registered through
// realmSeries, and series without a realm are untouched.
func TestRealmSeriesKeepsRealmsInFlight(t *testing.T) {
	t.Parallel()
	r := newRealmSeries(time.Minute)
	reg := prometheus.NewRegistry()
	counters := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total"}, []string{"realm", "scope"})
	gauges := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "g"}, []string{"realm"})
	other := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "o_total"}, []string{"route"})
	realmRegisterer{Registry: reg, r: r}.MustRegister(counters, gauges, other)

	start := time.Now()
	a, b := uuid.New(), uuid.New()
	r.enter(a)
	r.enter(b)
	counters.WithLabelValues(a.String(), "token").Inc()
	counters.WithLabelValues(b.String(), "token").Inc()
	counters.WithLabelValues("", "unauthenticated").Inc()
	gauges.WithLabelValues(a.String()).Set(1)
	gauges.WithLabelValues(b.String()).Set(1)
	other.WithLabelValues("/x").Inc()
	r.leave(b, start)

	require.Zero(t, r.forgetIdle(start.Add(59*time.Second)), "b is idle 59 s of 60")
	require.Equal(t, 1, r.forgetIdle(start.Add(time.Hour)), "b forgotten; a is still in flight")
	require.Equal(t, 2, series(counters), "a's and the realmless series")
	require.Equal(t, 1, series(gauges))
	require.Equal(t, 1, series(other))

	r.leave(a, start.Add(2*time.Hour))
	require.Zero(t, r.forgetIdle(start.Add(2*time.Hour+30*time.Second)))
	require.Equal(t, 1, r.forgetIdle(start.Add(2*time.Hour+time.Minute)))
	require.Equal(t, 1, series(counters), "the realmless series stays")
	require.Zero(t, series(gauges))
}

// series counts the series c holds.
func series(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	return n
}
