package server

import (
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics is the request latency histogram by route and status.
type httpMetrics struct {
	duration *prometheus.HistogramVec
}

// setupMetrics registers the request histogram and the pool's signals on the
// App's registry.
func (a *App) setupMetrics() {
	a.httpMetrics = &httpMetrics{duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "appdor_http_request_duration_seconds",
		Help:    "HTTP request latency by method, route (the registered pattern) and status.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"method", "route", "status"})}
	a.metrics.MustRegister(a.httpMetrics.duration, newPoolCollector(a.pool))
}

// observe records each request's latency. It sits outside the access log,
// which has already turned an error into the response it logs.
func (a *App) observe(next echo.HandlerFunc) echo.HandlerFunc {
	if a.httpMetrics == nil {
		return next
	}
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		a.httpMetrics.duration.WithLabelValues(c.Request().Method, route, strconv.Itoa(c.Response().Status)).
			Observe(time.Since(start).Seconds())
		return err
	}
}

// poolCollector exports pgxpool's starvation signals: how often a request
// had to wait for a connection and for how long.
type poolCollector struct {
	pool *pgxpool.Pool

	acquires, acquireWait, emptyAcquires, emptyWait, canceled *prometheus.Desc
	acquired, idle, total, max                                *prometheus.Desc
}

func newPoolCollector(pool *pgxpool.Pool) *poolCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("appdor_db_pool_"+name, help, nil, nil)
	}
	return &poolCollector{
		pool:          pool,
		acquires:      d("acquires_total", "Connections acquired from the pool."),
		acquireWait:   d("acquire_wait_seconds_total", "Time spent acquiring connections, all acquires."),
		emptyAcquires: d("empty_acquires_total", "Acquires that found no idle connection and waited (or dialed): the starvation signal."),
		emptyWait:     d("empty_acquire_wait_seconds_total", "Time spent waiting by acquires that found the pool empty."),
		canceled:      d("canceled_acquires_total", "Acquires canceled by their context (e.g. the acquire deadline: a 503)."),
		acquired:      d("acquired_conns", "Connections in use now."),
		idle:          d("idle_conns", "Idle connections now."),
		total:         d("total_conns", "Open connections now."),
		max:           d("max_conns", "The pool's size."),
	}
}

func (p *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{p.acquires, p.acquireWait, p.emptyAcquires, p.emptyWait, p.canceled,
		p.acquired, p.idle, p.total, p.max} {
		ch <- d
	}
}

func (p *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := p.pool.Stat()
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter(p.acquires, float64(s.AcquireCount()))
	counter(p.acquireWait, s.AcquireDuration().Seconds())
	counter(p.emptyAcquires, float64(s.EmptyAcquireCount()))
	counter(p.emptyWait, s.EmptyAcquireWaitTime().Seconds())
	counter(p.canceled, float64(s.CanceledAcquireCount()))
	gauge(p.acquired, float64(s.AcquiredConns()))
	gauge(p.idle, float64(s.IdleConns()))
	gauge(p.total, float64(s.TotalConns()))
	gauge(p.max, float64(s.MaxConns()))
}

// Pool is the database pool, for tests that read its starvation signals.
func (a *App) Pool() *pgxpool.Pool { return a.pool }
