package automations

import (
	"sync"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the automations' signals on /metrics.
type metrics struct {
	pending        *prometheus.GaugeVec
	oldest         *prometheus.GaugeVec
	runs           *prometheus.CounterVec
	evaluated      *prometheus.CounterVec
	deliveries     *prometheus.CounterVec
	latency        prometheus.Histogram
	attempt        prometheus.Histogram
	backlogRefused prometheus.Counter
	hopLimit       prometheus.Counter

	mu     sync.Mutex
	realms map[uuid.UUID]bool // realms with a queue gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "appdor_automation_events_pending",
			Help: "Automation events waiting to be evaluated, by realm (sampled).",
		}, []string{"realm"}),
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "appdor_automation_events_oldest_age_seconds",
			Help: "Age of the oldest automation event waiting, by realm (sampled).",
		}, []string{"realm"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appdor_automation_runs_total",
			Help: "Automation runs by the status their evaluation left them in (succeeded, failed, or pending on webhook deliveries).",
		}, []string{"status"}),
		evaluated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appdor_automation_events_evaluated_total",
			Help: "Automation events evaluated, by how their worker got them: handed at their write's commit, or claimed from the queue.",
		}, []string{"path"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appdor_webhook_deliveries_total",
			Help: "Webhook delivery attempts by result: delivered, retry, dead (the last attempt failed), gone (410: the action is disabled).",
		}, []string{"result"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "appdor_webhook_delivery_latency_seconds",
			Help:    "From the commit of the write that caused a webhook to its successful delivery.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 7200},
		}),
		attempt: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "appdor_webhook_attempt_duration_seconds",
			Help:    "Duration of one webhook request, whatever its result.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 15},
		}),
		backlogRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "appdor_automation_backlog_refused_total",
			Help: "Writes refused (429 automation_backlog) because their realm had --automation-backlog events waiting.",
		}),
		hopLimit: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "appdor_automation_hop_limit_total",
			Help: "Chains of automations stopped at --automation-max-hops.",
		}),
		realms: map[uuid.UUID]bool{},
	}
	if reg != nil {
		reg.MustRegister(m.pending, m.oldest, m.runs, m.evaluated, m.deliveries, m.latency, m.attempt, m.backlogRefused, m.hopLimit)
	}
	return m
}

// setQueue replaces the per-realm queue gauges with a sample; realms whose
// queue emptied lose their series.
func (m *metrics) setQueue(counts map[uuid.UUID]int, ages map[uuid.UUID]float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for r := range m.realms {
		if _, ok := counts[r]; !ok {
			m.pending.DeleteLabelValues(r.String())
			m.oldest.DeleteLabelValues(r.String())
			delete(m.realms, r)
		}
	}
	for r, n := range counts {
		m.pending.WithLabelValues(r.String()).Set(float64(n))
		m.oldest.WithLabelValues(r.String()).Set(ages[r])
		m.realms[r] = true
	}
}
