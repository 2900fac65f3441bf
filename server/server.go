// Package server is the Echo application: the middleware chain in its one
// order, the mounting of each domain's routes, the error handler, health and
// metrics. It holds nothing domain-specific: grid, tenancy, limiter and
// fairness own their handlers and their rules.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/rueidis"

	"github.com/appdor/appdor/automations"
	"github.com/appdor/appdor/fairness"
	"github.com/appdor/appdor/grid"
	"github.com/appdor/appdor/limiter"
	"github.com/appdor/appdor/migrations"
	"github.com/appdor/appdor/rls"
	"github.com/appdor/appdor/tenancy"
)

// Config is the server's whole configuration, parsed and validated by the
// command line before it reaches here.
type Config struct {
	Listen           string
	DatabaseURL      string
	RedisURL         string
	Migrate          bool
	DBMaxConns       int32
	StatementTimeout time.Duration
	AcquireTimeout   time.Duration
	BodyLimit        string
	Version          string
	// LimiterOff turns the rate limiter off (for diagnosis only).
	LimiterOff bool
	// RealmRequestsPerMinute is every realm's API ceiling unless the realm
	// sets its own; 0 for limiter.DefaultRealmLimit.
	RealmRequestsPerMinute int
	// Fairness sizes the per-realm admission controller; the zero value is
	// on, sized by the cores and DBMaxConns.
	Fairness fairness.Config
	// LoginConcurrency is how many sign-in password checks run at once; 0
	// is half the cores (tenancy.PeopleConfig).
	LoginConcurrency int
	// CSVBodyLimit bounds a CSV import's body in bytes; 0 is grid's default.
	CSVBodyLimit int64
	// UnauthenticatedPerSecond is how many lookups of unknown credentials a
	// client address may cause a second; 0 for
	// limiter.DefaultUnauthenticatedPerSecond, negative for none (off).
	UnauthenticatedPerSecond int
	// UnauthenticatedBurst is how many of those may come at once; 0 for
	// limiter.DefaultUnauthenticatedBurst (or twice a rate that is set).
	UnauthenticatedBurst int
	// TrustedProxies are the proxies whose X-Forwarded-For names the client
	// address; none: the client is the direct peer.
	TrustedProxies []*net.IPNet
	// Automations sizes the automation workers and webhook delivery; the
	// zero value takes automations' defaults.
	Automations automations.Config
}

// ConnectError says which backing service could not be reached, with its URL
// stripped of any password.
type ConnectError struct {
	Service string // "database" or "redis"
	URL     string
	Err     error
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("cannot reach %s at %s: %v", e.Service, e.URL, e.Err)
}

func (e *ConnectError) Unwrap() error { return e.Err }

// Redact returns rawURL with its password replaced, for messages and logs.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparseable url)"
	}
	return u.Redacted()
}

// App is one running Appdor: its connections, its router and its metrics.
// End-to-end tests start it the same way `appdor serve` does.
type App struct {
	cfg     Config
	log     *slog.Logger
	pool    *pgxpool.Pool
	redis   rueidis.Client
	db      *rls.DB
	tenancy *tenancy.Service
	echo    *echo.Echo
	metrics *prometheus.Registry

	limiter        *limiter.Limiter
	stopTokenCache func()

	fair        *fairness.Controller
	httpMetrics *httpMetrics

	automations *automations.Service
	autoPool    *pgxpool.Pool // the automation workers' own

	// unavailable rate-limits the log line of 503s (pool acquire or
	// statement timeouts): one line a second, with how many it stands for.
	unavailableLast  atomic.Int64
	unavailableCount atomic.Int64
}

// New connects to PostgreSQL and Redis, migrates when asked (or checks that
// the schema is current), and builds the router. It fails with a
// *ConnectError when a service does not answer.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*App, error) {
	a := &App{cfg: cfg, log: log, metrics: prometheus.NewRegistry()}
	ok := false
	defer func() {
		if !ok {
			a.Close()
		}
	}()

	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, &ConnectError{Service: "database", URL: Redact(cfg.DatabaseURL), Err: err}
	}
	if cfg.DBMaxConns > 0 {
		pcfg.MaxConns = cfg.DBMaxConns
	}
	// Keep half the pool open: a burst should not wait for new PostgreSQL
	// backends (a fork and a statement cache each) while it holds its slots.
	pcfg.MinConns = max(1, pcfg.MaxConns/2)
	pcfg.ConnConfig.ConnectTimeout = 5 * time.Second
	if cfg.Migrate {
		if err := ensureDatabase(ctx, pcfg.ConnConfig, log); err != nil {
			return nil, &ConnectError{Service: "database", URL: Redact(cfg.DatabaseURL), Err: err}
		}
	}
	if a.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return nil, &ConnectError{Service: "database", URL: Redact(cfg.DatabaseURL), Err: err}
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = a.pool.Ping(pctx)
	cancel()
	if err != nil {
		return nil, &ConnectError{Service: "database", URL: Redact(cfg.DatabaseURL), Err: err}
	}

	ropt, err := rueidis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, &ConnectError{Service: "redis", URL: Redact(cfg.RedisURL), Err: err}
	}
	ropt.DisableCache = true
	ropt.Dialer.Timeout = 2 * time.Second
	ropt.ConnWriteTimeout = 2 * time.Second
	if a.redis, err = rueidis.NewClient(ropt); err != nil {
		return nil, &ConnectError{Service: "redis", URL: Redact(cfg.RedisURL), Err: err}
	}

	if err := a.prepareSchema(ctx); err != nil {
		return nil, err
	}

	a.db = rls.New(a.pool, cfg.StatementTimeout, cfg.AcquireTimeout)
	a.tenancy = tenancy.New(a.pool)
	a.startLimiter(ctx)
	a.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.setupMetrics()
	a.setupFairness()
	a.guardLookups()
	a.routes()
	if err := a.startAutomations(ctx); err != nil {
		return nil, err
	}
	ok = true
	return a, nil
}

// ensureDatabase creates the configured database when it does not exist yet
// and the role may create it, so a first `appdor serve` on a host with a bare
// PostgreSQL just works.
func ensureDatabase(ctx context.Context, cc *pgx.ConnConfig, log *slog.Logger) error {
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return err
	}
	admin := cc.Copy()
	admin.Database = "postgres"
	conn, aerr := pgx.ConnectConfig(ctx, admin)
	if aerr != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, cerr := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{cc.Database}.Sanitize()); cerr != nil {
		return fmt.Errorf("%w (and creating it failed: %v)", err, cerr)
	}
	log.Info("created database", slog.String("database", cc.Database))
	return nil
}

// prepareSchema migrates, or with migration off refuses a schema that is
// behind this binary.
func (a *App) prepareSchema(ctx context.Context) error {
	m, err := migrations.Open(ctx, a.cfg.DatabaseURL)
	if err != nil {
		return &ConnectError{Service: "database", URL: Redact(a.cfg.DatabaseURL), Err: err}
	}
	defer m.Close()
	if a.cfg.Migrate {
		if err := m.Up(); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	have, dirty, err := m.Version()
	if err != nil {
		return fmt.Errorf("schema version: %w", err)
	}
	want, err := migrations.Latest()
	if err != nil {
		return err
	}
	if dirty || have != want {
		return fmt.Errorf("the schema is at version %d (dirty: %t) but this binary needs %d; run `appdor migrate up`", have, dirty, want)
	}
	a.log.Info("schema ready", slog.Uint64("version", uint64(have)))
	var anyone bool
	if err := a.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM users)`).Scan(&anyone); err == nil && !anyone {
		a.log.Info("first run: nobody can sign in yet; create a realm, an owner and a token with " +
			"`appdor realm create NAME`, then `appdor user create --realm ID --email E --password P --role owner`, " +
			"then `appdor token create --realm ID --user E --name N` (in Docker: `docker compose exec appdor appdor ...`)")
	}
	return nil
}

// routes builds the middleware chain and mounts every domain. The order is
// the request path of DESIGN.md: request id, recover, access log, body limit;
// then, on the API, authenticate, rate limit, admit.
func (a *App) routes() {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = a.errorHandler
	e.IPExtractor = a.ipExtractor()
	a.echo = e

	e.Use(middleware.RequestID())
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{
		DisableStackAll:   true,
		DisablePrintStack: true,
		LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
			a.log.Error("panic", slog.String("request_id", requestID(c)), slog.String("error", err.Error()),
				slog.String("stack", string(stack)))
			return err
		},
	}))
	e.Use(a.observe)
	e.Use(a.accessLog)
	// The CSV import streams its body and bounds it itself (grid.OwnsBodyLimit).
	e.Use(middleware.BodyLimitWithConfig(middleware.BodyLimitConfig{Limit: a.cfg.BodyLimit, Skipper: grid.OwnsBodyLimit}))

	e.GET("/healthz", a.healthz)
	e.GET("/readyz", a.readyz)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(a.metrics, promhttp.HandlerOpts{})))

	// Public API routes (sign-in) go on v1; everything else on api, which
	// passes the gates in this order. Every route on api reads or writes
	// realm data, or a realm's people and tokens.
	v1 := e.Group("/api/v1")
	api := v1.Group("", a.tenancy.Authenticate(), a.rateLimit())
	api.Use(a.admit()) // the last gate: keep it after every other middleware of api
	v1.GET("/openapi.json", openAPIDocument)
	tenancy.NewPeople(a.tenancy, tenancy.PeopleConfig{
		LoginConcurrency: a.cfg.LoginConcurrency, Log: a.log, Registerer: a.metrics,
	}).Routes(v1)

	gh := grid.New(a.db)
	gh.CSVBodyLimit = a.cfg.CSVBodyLimit
	if a.fair != nil {
		gh.Gate = backgroundGate{a.fair} // CSV imports run as background work
	}
	gh.Events = a.automationService() // row writes record automation events
	gh.Routes(api)
	a.automationService().Routes(api)
	a.tenancy.TokenRoutes(api)

	a.mountUI(e) // last: the UI's catch-all must not shadow a route above
}

// Handler is the application as an http.Handler, for tests.
func (a *App) Handler() http.Handler { return a.echo }

// Serve listens on the configured address until ctx ends, then drains
// in-flight requests for up to ten seconds.
func (a *App) Serve(ctx context.Context) error {
	ln, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", a.cfg.Listen, err)
	}
	return a.ServeListener(ctx, ln)
}

// ServeListener serves on ln until ctx ends.
func (a *App) ServeListener(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           a.echo,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	a.log.Info("serving", slog.String("listen", ln.Addr().String()), slog.String("version", a.cfg.Version))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	a.log.Info("shutting down")
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	return nil
}

// Close releases the connections.
func (a *App) Close() {
	a.stopAutomations()
	a.stopLimiter()
	if a.redis != nil {
		a.redis.Close()
	}
	if a.pool != nil {
		a.pool.Close()
	}
}
