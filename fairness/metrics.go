package fairness

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the controller's gauges and counters, per realm (flow) and
// level. A flow's series outlive its state while it is remembered; its
// gauges are dropped when it is forgotten, its counters never go backwards.
type metrics struct {
	queue      *prometheus.GaugeVec
	seats      *prometheus.GaugeVec
	load       *prometheus.GaugeVec
	dispatched *prometheus.CounterVec
	refused    *prometheus.CounterVec
	waited     *prometheus.HistogramVec
}

// flowMetrics are one flow's series, looked up once.
type flowMetrics struct {
	m          *metrics
	labels     [2]string
	queue      prometheus.Gauge
	seats      prometheus.Gauge
	load       prometheus.Gauge
	dispatched prometheus.Counter
	waited     prometheus.Observer
	byReason   map[string]prometheus.Counter
}

func newMetrics(c *Controller, reg prometheus.Registerer) *metrics {
	labels := []string{"realm", "level"}
	m := &metrics{
		queue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "appdor_fairness_queue_length",
			Help: "Work waiting for a seat, by realm and level.",
		}, labels),
		seats: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "appdor_fairness_seats_in_use",
			Help: "Seats held, by realm and level.",
		}, labels),
		load: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "appdor_fairness_outstanding",
			Help: "Work in flight or queued, averaged over the last quarter second, by realm and level, its own units at their usual cost (a realm whose units run slower than in the last second or so counts them for less); an interactive realm at the sparse depth (2) or more is backlogged.",
		}, labels),
		dispatched: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appdor_fairness_dispatched_total",
			Help: "Work given a seat by the fairness controller, by realm and level.",
		}, labels),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appdor_fairness_refused_total",
			Help: "Work refused by the fairness controller, by realm, level and reason (queue_full, wait_expired, canceled).",
		}, []string{"realm", "level", "reason"}),
		waited: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "appdor_fairness_wait_seconds",
			Help:    "Time from arrival to a seat, by realm and level (0 for work seated at once).",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5, 30},
		}, labels),
	}
	if reg == nil {
		return m
	}
	cfg := c.cfg
	seats := func(lvl Level, n int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "appdor_fairness_seats",
			Help:        "Seats of each level.",
			ConstLabels: prometheus.Labels{"level": lvl.String()},
		}, func() float64 { return float64(n) })
	}
	reg.MustRegister(m.queue, m.seats, m.load, m.dispatched, m.refused, m.waited,
		seats(Interactive, cfg.Seats), seats(Background, cfg.BackgroundSeats),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "appdor_fairness_active_realms",
			Help: "Realms (flows) with interactive work within the active window.",
		}, func() float64 { return float64(c.Active()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "appdor_fairness_enabled",
			Help: "1 when the fairness controller admits work, 0 when it is switched off.",
		}, func() float64 {
			if cfg.Off {
				return 0
			}
			return 1
		}),
	)
	return m
}

// flow returns the series of flow name at lvl.
func (m *metrics) flow(name string, lvl Level) *flowMetrics {
	l := [2]string{name, lvl.String()}
	return &flowMetrics{
		m:          m,
		labels:     l,
		queue:      m.queue.WithLabelValues(l[:]...),
		seats:      m.seats.WithLabelValues(l[:]...),
		load:       m.load.WithLabelValues(l[:]...),
		dispatched: m.dispatched.WithLabelValues(l[:]...),
		waited:     m.waited.WithLabelValues(l[:]...),
		byReason:   map[string]prometheus.Counter{},
	}
}

// refused is the flow's refusal counter for reason. c.mu is held.
func (fm *flowMetrics) refused(reason string) prometheus.Counter {
	ctr := fm.byReason[reason]
	if ctr == nil {
		ctr = fm.m.refused.WithLabelValues(fm.labels[0], fm.labels[1], reason)
		fm.byReason[reason] = ctr
	}
	return ctr
}

// forget drops a forgotten flow's gauges.
func (fm *flowMetrics) forget() {
	fm.m.queue.DeleteLabelValues(fm.labels[:]...)
	fm.m.seats.DeleteLabelValues(fm.labels[:]...)
	fm.m.load.DeleteLabelValues(fm.labels[:]...)
}
