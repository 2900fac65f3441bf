package fairness

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the controller's gauges and counters. The per-realm counters
// outlive a realm's state, so they never go backwards; the in-flight gauge of a
// realm that has gone quiet is dropped.
type metrics struct {
	inflight *prometheus.GaugeVec
	admitted *prometheus.CounterVec
	refused  *prometheus.CounterVec
	held     prometheus.Counter
}

func newMetrics(c *Controller, reg prometheus.Registerer) *metrics {
	m := &metrics{
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "appdor_fairness_inflight",
			Help: "Work in flight per realm, as admitted by the fairness controller.",
		}, []string{"realm"}),
		admitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appdor_fairness_admitted_total",
			Help: "Work admitted by the fairness controller, by realm and class.",
		}, []string{"realm", "class"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appdor_fairness_refused_total",
			Help: "Work refused by the fairness controller, by realm, class and reason (realm_limit, capacity, new_realm, canceled).",
		}, []string{"realm", "class", "reason"}),
		held: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "appdor_fairness_refusal_holds_total",
			Help: "Requests of a hot or new realm held for a slot by the fairness controller.",
		}),
	}
	if reg == nil {
		return m
	}
	cfg := c.cfg
	limit := func(kind string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "appdor_fairness_limit",
			Help:        "The fairness controller's current limits: capacity, reserve, and each active realm's share (slots).",
			ConstLabels: prometheus.Labels{"kind": kind},
		}, f)
	}
	reg.MustRegister(m.inflight, m.admitted, m.refused, m.held,
		limit("capacity", func() float64 { return float64(cfg.Capacity) }),
		limit("reserve", func() float64 { return float64(cfg.Reserve) }),
		limit("realm_share", func() float64 { return float64(c.Share()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "appdor_fairness_active_realms",
			Help: "Realms the fairness controller counts as active now.",
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

// forget drops a quiet realm's in-flight gauge.
func (m *metrics) forget(realm string) {
	m.inflight.DeleteLabelValues(realm)
}
