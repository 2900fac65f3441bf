package server

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/appdor/appdor/tenancy"
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
		Help:    "HTTP request latency by method (other for a method the API does not use), route (the registered pattern, or unmatched) and status.",
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
		a.httpMetrics.duration.WithLabelValues(methodLabel(c.Request().Method), a.routeLabel(c.Path()),
			strconv.Itoa(c.Response().Status)).Observe(time.Since(start).Seconds())
		return err
	}
}

// poolCollector exports pgxpool's starvation signals: how often a request
// had to wait for a connection and for how long.
type poolCollector struct {
	pool *pgxpool.Pool

	acquires, acquireWait, emptyAcquires, emptyWait, canceled, newConns *prometheus.Desc
	acquired, idle, total, max                                          *prometheus.Desc
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
		newConns:      d("new_conns_total", "Connections opened (each a PostgreSQL backend): the pool's churn."),
		acquired:      d("acquired_conns", "Connections in use now."),
		idle:          d("idle_conns", "Idle connections now."),
		total:         d("total_conns", "Open connections now."),
		max:           d("max_conns", "The pool's size."),
	}
}

func (p *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{p.acquires, p.acquireWait, p.emptyAcquires, p.emptyWait, p.canceled, p.newConns,
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
	counter(p.newConns, float64(s.NewConnsCount()))
	gauge(p.acquired, float64(s.AcquiredConns()))
	gauge(p.idle, float64(s.IdleConns()))
	gauge(p.total, float64(s.TotalConns()))
	gauge(p.max, float64(s.MaxConns()))
}

// Pool is the database pool, for tests that read its starvation signals.
func (a *App) Pool() *pgxpool.Pool { return a.pool }

// httpMethods are the methods the request histogram names; any other is
// "other", so a client cannot add a series per made-up method.
var httpMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

func methodLabel(m string) string {
	if httpMethods[m] {
		return m
	}
	return "other"
}

// unmatchedRoute is the route label of a request no registered route matched.
const unmatchedRoute = "unmatched"

// indexRoutes remembers the registered route patterns: the only route labels
// the request histogram uses besides unmatchedRoute. Call it once every
// route is registered.
func (a *App) indexRoutes() {
	a.routePaths = map[string]bool{}
	for _, r := range a.echo.Routes() {
		a.routePaths[r.Path] = true
	}
}

func (a *App) routeLabel(path string) string {
	if a.routePaths[path] {
		return path
	}
	return unmatchedRoute
}

// DefaultMetricsRealmIdle is how long a realm may send no request before its
// series leave /metrics; MinMetricsRealmIdle the least it may be set to.
// The least is longer than the fairness controller keeps an idle realm's
// flow (a minute): a flow it still holds keeps its counters, and deleting
// them under it would leave it counting into series nobody sees.
const (
	DefaultMetricsRealmIdle = 10 * time.Minute
	MinMetricsRealmIdle     = 2 * time.Minute
)

// seriesDeleter is a metric vector: CounterVec, GaugeVec, HistogramVec.
type seriesDeleter interface {
	DeletePartialMatch(prometheus.Labels) int
}

// realmSeries forgets the per-realm series of realms gone quiet, so that
// /metrics lists the realms at work lately, not every realm that ever sent a
// request to this process: it counts each realm's requests in flight and
// when its last one ended, and deletes every series labelled with a realm
// that has had none in flight for idle, from every vector registered through
// it (the limiter's, the fairness controller's).
type realmSeries struct {
	idle time.Duration

	mu     sync.Mutex
	realms map[uuid.UUID]*realmUse
	vecs   []seriesDeleter
}

type realmUse struct {
	inflight int
	last     time.Time // when the last request ended
}

func newRealmSeries(idle time.Duration) *realmSeries {
	if idle <= 0 {
		idle = DefaultMetricsRealmIdle
	}
	return &realmSeries{idle: idle, realms: map[uuid.UUID]*realmUse{}}
}

// register registers cs on reg, and remembers those that are vectors.
func (r *realmSeries) register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
		if v, ok := c.(seriesDeleter); ok {
			r.mu.Lock()
			r.vecs = append(r.vecs, v)
			r.mu.Unlock()
		}
	}
	return nil
}

// enter counts a request of realm in flight, until leave.
func (r *realmSeries) enter(realm uuid.UUID) {
	r.mu.Lock()
	u := r.realms[realm]
	if u == nil {
		u = &realmUse{}
		r.realms[realm] = u
	}
	u.inflight++
	r.mu.Unlock()
}

func (r *realmSeries) leave(realm uuid.UUID, now time.Time) {
	r.mu.Lock()
	if u := r.realms[realm]; u != nil {
		u.inflight--
		u.last = now
	}
	r.mu.Unlock()
}

// forgetIdle deletes the series of the realms with nothing in flight since
// idle before now, and returns how many realms it forgot. It holds the lock
// while it deletes, so a request of a realm being forgotten enters after its
// series are gone and starts them afresh.
func (r *realmSeries) forgetIdle(now time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for realm, u := range r.realms {
		if u.inflight > 0 || now.Sub(u.last) < r.idle {
			continue
		}
		labels := prometheus.Labels{"realm": realm.String()}
		for _, v := range r.vecs {
			v.DeletePartialMatch(labels)
		}
		delete(r.realms, realm)
		n++
	}
	return n
}

// realmRegisterer is the App's registry as a Registerer that hands its
// vectors to realmSeries, for the packages whose series carry a realm.
type realmRegisterer struct {
	*prometheus.Registry
	r *realmSeries
}

func (g realmRegisterer) Register(c prometheus.Collector) error { return g.r.register(g.Registry, c) }

func (g realmRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := g.Register(c); err != nil {
			panic(err)
		}
	}
}

// realmRegistry is where the limiter and the fairness controller register
// their metrics: their per-realm series are forgotten with the realm.
func (a *App) realmRegistry() prometheus.Registerer {
	return realmRegisterer{Registry: a.metrics, r: a.realms}
}

// trackRealm counts the request's realm in flight, for realmSeries; it sits
// right after authentication, before any gate makes a series of the realm.
func (a *App) trackRealm(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		p := tenancy.PrincipalOf(c)
		if p == nil || a.realms == nil {
			return next(c)
		}
		realm := p.RealmID
		a.realms.enter(realm)
		defer func() { a.realms.leave(realm, time.Now()) }()
		return next(c)
	}
}

// ForgetIdleRealms deletes the series of realms idle since before now less
// the idle setting, as a scrape of /metrics does; for tests.
func (a *App) ForgetIdleRealms(now time.Time) int { return a.realms.forgetIdle(now) }
