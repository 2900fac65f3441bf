package live

import (
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	streams        *prometheus.GaugeVec
	refused        *prometheus.CounterVec
	ended          *prometheus.CounterVec
	delivered      *prometheus.CounterVec
	deliveredRows  prometheus.Counter // delivered{event="rows"}, looked up once
	published      prometheus.Counter
	publishFailed  prometheus.Counter
	publishDropped prometheus.Counter
	coalesced      prometheus.Counter
	lagged         prometheus.Counter
	latency        prometheus.Histogram
}

func newMetrics(h *Hub, reg prometheus.Registerer) *metrics {
	m := &metrics{
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "appdor_live_streams",
			Help: "Live event streams open on this replica, by realm."}, []string{"realm"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "appdor_live_streams_refused_total",
			Help: "Streams refused at a cap (live_streams), by the flag of the cap."}, []string{"limit"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "appdor_live_streams_ended_total",
			Help: "Streams this replica ended: idle (nothing to send for --live-idle-timeout), slow (a write blocked for its timeout: dropped), closed (the write failed)."},
			[]string{"reason"}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "appdor_live_messages_delivered_total",
			Help: "Messages written to streams, by event (rows, resync)."}, []string{"event"}),
		published: prometheus.NewCounter(prometheus.CounterOpts{Name: "appdor_live_events_published_total",
			Help: "Change events this replica published to Redis."}),
		publishFailed: prometheus.NewCounter(prometheus.CounterOpts{Name: "appdor_live_events_publish_failed_total",
			Help: "Change events Redis did not take; their tables' watchers are sent a resync."}),
		publishDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "appdor_live_events_dropped_total",
			Help: "Change events dropped because the publishing queue was full; their tables' watchers are sent a resync."}),
		coalesced: prometheus.NewCounter(prometheus.CounterOpts{Name: "appdor_live_events_coalesced_total",
			Help: "Events delivered inside a message that carried another."}),
		lagged: prometheus.NewCounter(prometheus.CounterOpts{Name: "appdor_live_streams_lagged_total",
			Help: "Times a stream's client fell so far behind that its waiting messages were replaced by a resync."}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "appdor_live_delivery_seconds",
			Help:    "From an event's publishing to the write of the message carrying it (the oldest, when several).",
			Buckets: []float64{.005, .01, .025, .05, .1, .15, .25, .5, 1, 2.5, 5}}),
	}
	m.deliveredRows = m.delivered.WithLabelValues("rows")
	if reg != nil {
		reg.MustRegister(m.streams, m.refused, m.ended, m.delivered, m.published, m.publishFailed, m.publishDropped,
			m.coalesced, m.lagged, m.latency, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "appdor_live_streams_total",
				Help: "Live event streams open on this replica."}, func() float64 { return float64(h.Streams()) }))
	}
	return m
}

func (m *metrics) open(realm uuid.UUID) prometheus.Gauge {
	return m.streams.WithLabelValues(realm.String())
}

func (m *metrics) forget(realm uuid.UUID) { m.streams.DeleteLabelValues(realm.String()) }
