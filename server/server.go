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
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/rueidis"

	"github.com/appdor/appdor/airtable"
	"github.com/appdor/appdor/automations"
	"github.com/appdor/appdor/fairness"
	"github.com/appdor/appdor/grid"
	"github.com/appdor/appdor/limiter"
	"github.com/appdor/appdor/live"
	"github.com/appdor/appdor/migrations"
	"github.com/appdor/appdor/rls"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/usage"
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
	// LookupTimeout bounds a credential lookup the server cannot answer from
	// memory; 0 for tenancy.DefaultLookupTimeout.
	LookupTimeout time.Duration
	// RelookupConcurrency is how many known credentials whose cache entry
	// expired are looked up at once; 0 is half the cores.
	RelookupConcurrency int
	// LoginAddressPerMinute and LoginAccountPerMinute are the ceilings on
	// sign-in attempts per client address and per account; 0 for
	// limiter.DefaultLoginAddressPerMinute and DefaultLoginAccountPerMinute,
	// negative for none (off).
	LoginAddressPerMinute, LoginAccountPerMinute int
	// TrustedProxies are the proxies whose X-Forwarded-For names the client
	// address, and whose X-Forwarded-Proto names the scheme; none: the client
	// is the direct peer, the scheme the connection's.
	TrustedProxies []*net.IPNet
	// MigrateDatabaseURL is the schema owner's URL, for migrations; empty:
	// DatabaseURL's role migrates (and so owns the schema it serves).
	MigrateDatabaseURL string
	// HSTS sets Strict-Transport-Security on responses sent over HTTPS.
	HSTS bool
	// MetricsListen, when set, is the address /metrics is served on, and
	// the main listener's /metrics answers 404; MetricsToken, when set, is
	// the bearer token /metrics asks for. With neither, /metrics on the
	// main listener answers loopback clients only.
	MetricsListen, MetricsToken string
	// Pprof serves Go's profiles (net/http/pprof) under /debug/pprof/ on
	// MetricsListen, to whoever may read /metrics there.
	Pprof bool
	// MetricsRealmIdle is how long a realm sends no request before its
	// series leave /metrics; 0 for DefaultMetricsRealmIdle.
	MetricsRealmIdle time.Duration

	// Time bounds of the HTTP server (zero: the Default* of serve.go).
	// StreamTimeout replaces Read and WriteTimeout on the streamed CSV routes,
	// as the longest pause between two reads or writes. ShutdownDrain is how
	// long running requests may finish after a SIGTERM before they are
	// cancelled.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	StreamTimeout, ShutdownDrain                              time.Duration

	// Automations sizes the automation workers and webhook delivery; the
	// zero value takes automations' defaults.
	Automations automations.Config
	// UsageFlushInterval is how often a replica writes its usage sums to
	// Redis, for the gauges; 0 is usage.DefaultFlushInterval.
	UsageFlushInterval time.Duration
	// Live caps and times the live event streams; the zero value takes
	// live's defaults.
	Live live.Config
}

// ConnectError says which backing service could not be reached, with its URL
// stripped of any password.
type ConnectError struct {
	Service string // "database", "migration database" or "redis"
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
	// setup is the first run's one-time link, when nobody could sign in at
	// start; ui serves the browser app.
	setup *tenancy.SetupLink
	ui    http.Handler
	// usage adds up each realm's requests for the gauges; nil without Redis.
	usage   *usage.Recorder
	echo    *echo.Echo
	metrics *prometheus.Registry

	limiter        *limiter.Limiter
	stopTokenCache func()

	fair        *fairness.Controller
	httpMetrics *httpMetrics
	realms      *realmSeries    // forgets the series of realms gone quiet
	routePaths  map[string]bool // the route labels of the request histogram

	automations *automations.Service
	live        *live.Hub
	autoPool    *pgxpool.Pool // the automation workers' own

	// unavailable rate-limits the log line of 503s (pool acquire or
	// statement timeouts): one line a second, with how many it stands for.
	unavailableLast  atomic.Int64
	unavailableCount atomic.Int64

	// Shutdown and readiness (ServeListener, readyz).
	draining     atomic.Bool // a shutdown has begun: not ready
	databaseDown atomic.Bool // the last readiness check found PostgreSQL down
	inFlight     atomic.Int64
	streams      context.Context // done once the shutdown stops CSV imports (streamBody)
	stopStreams  context.CancelFunc
}

// New connects to PostgreSQL and Redis, migrates when asked (or checks that
// the schema is current), and builds the router. It fails with a
// *ConnectError when PostgreSQL does not answer; without Redis it starts
// degraded (see connectRedis).
func New(ctx context.Context, cfg Config, log *slog.Logger) (*App, error) {
	a := &App{cfg: cfg, log: log, metrics: prometheus.NewRegistry(), realms: newRealmSeries(cfg.MetricsRealmIdle)}
	a.streams, a.stopStreams = context.WithCancel(context.Background())
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
	pcfg.ConnConfig.BuildContextWatcherHandler = keepConnOnCancel
	if cfg.Migrate {
		mcfg, err := pgx.ParseConfig(cfg.migrateURL())
		if err == nil {
			mcfg.ConnectTimeout = pcfg.ConnConfig.ConnectTimeout
			err = ensureDatabase(ctx, mcfg, log)
		}
		if err != nil {
			return nil, &ConnectError{Service: cfg.migrateService(), URL: Redact(cfg.migrateURL()), Err: err}
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

	redisDown, err := a.connectRedis()
	if err != nil {
		return nil, err
	}

	if err := a.prepareSchema(ctx); err != nil {
		return nil, err
	}

	a.db = rls.New(a.pool, cfg.StatementTimeout, cfg.AcquireTimeout)
	a.tenancy = tenancy.New(a.pool)
	a.tenancy.UseDB(a.db)
	a.startLimiter(ctx)
	a.reportRedis(ctx, redisDown)
	a.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.setupMetrics()
	a.startUsage()
	a.setupFairness()
	a.guardLookups()
	a.routes()
	if err := a.startAutomations(ctx); err != nil {
		return nil, err
	}
	a.startLive(ctx)
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

// migrateURL is the URL migrations run with.
func (c Config) migrateURL() string {
	if c.MigrateDatabaseURL != "" {
		return c.MigrateDatabaseURL
	}
	return c.DatabaseURL
}

// migrateService names the URL migrations run with in a ConnectError.
func (c Config) migrateService() string {
	if c.MigrateDatabaseURL != "" {
		return "migration database"
	}
	return "database"
}

// prepareSchema migrates, as the schema's owner, or with migration off
// refuses a schema that is behind this binary.
func (a *App) prepareSchema(ctx context.Context) error {
	m, err := migrations.Open(ctx, a.cfg.migrateURL())
	if err != nil {
		return &ConnectError{Service: a.cfg.migrateService(), URL: Redact(a.cfg.migrateURL()), Err: err}
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
	if err := a.pool.QueryRow(ctx, `SELECT appdor_anyone_can_sign_in()`).Scan(&anyone); err == nil && !anyone {
		// The link's secret is written to the log on purpose, this once:
		// whoever can read the server's log runs the server. It is spent
		// when the first realm is made, and dies with the process.
		a.setup = tenancy.NewSetupLink()
		a.log.Info("first run: nobody can sign in yet; open the setup link to create the first realm and its owner",
			slog.String("setup_url", a.setupURL()+"/setup?token="+a.setup.Secret()))
		a.log.Info("first run, scripted instead: `appdor realm create NAME`, then " +
			"`appdor user create --realm ID --email E --password P --role owner`, " +
			"then `appdor token create --realm ID --user E --name N` (in Docker: `docker compose exec appdor appdor ...`)")
	}
	return nil
}

// setupURL is where this server is reached, as best it knows: its listen
// address, with an unspecified host as localhost.
func (a *App) setupURL() string {
	host, port, err := net.SplitHostPort(a.cfg.Listen)
	if err != nil {
		return "http://localhost"
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// SetupLink is the first run's one-time link, nil when someone could sign in
// at start or once it is spent; for tests.
func (a *App) SetupLink() *tenancy.SetupLink { return a.setup }

// routes builds the middleware chain and mounts every domain. The order is
// the request path of DESIGN.md: request id, recover, access log, body limit;
// then, on the API, authenticate, rate limit, admit.
func (a *App) routes() {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = a.errorHandler
	e.IPExtractor = a.ipExtractor()
	e.SchemeExtractor = a.schemeExtractor()
	a.echo = e

	// Airtable's npm client asks for /v0/{base}/{table}/ with a slash.
	e.Pre(middleware.RemoveTrailingSlashWithConfig(middleware.TrailingSlashConfig{
		Skipper: func(c echo.Context) bool { return !airtable.IsPath(c.Request().URL.Path) },
	}))
	e.Use(requestIDs())
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
	e.Use(a.secureHeaders())
	e.Use(a.streamDeadlines()) // CSV import and export: deadlines of their own
	// The CSV import streams its body and bounds it itself (grid.OwnsBodyLimit).
	e.Use(middleware.BodyLimitWithConfig(middleware.BodyLimitConfig{Limit: a.cfg.BodyLimit, Skipper: grid.OwnsBodyLimit}))

	e.GET("/healthz", a.healthz)
	e.GET("/readyz", a.readyz)
	a.mountMetrics(e)

	// Public API routes (sign-in) go on v1; everything else on api, which
	// passes the gates in this order. Every route on api reads or writes
	// realm data, or a realm's people and tokens.
	v1 := e.Group("/api/v1")
	api := v1.Group("", a.tenancy.Authenticate(), a.recordUsage, a.trackRealm, a.rateLimit())
	api.Use(a.admit()) // the last gate: keep it after every other middleware of api
	v1.GET("/openapi.json", openAPIDocument)
	tenancy.NewPeople(a.tenancy, tenancy.PeopleConfig{
		LoginConcurrency: a.cfg.LoginConcurrency, Screen: a.loginScreen(), Log: a.log, Registerer: a.metrics,
		Setup: a.setup,
	}).Routes(v1)
	// The setup page exists only with its link's secret.
	e.GET("/setup", func(c echo.Context) error {
		if !a.setup.Valid(c.QueryParam("token")) {
			return echo.ErrNotFound
		}
		a.ui.ServeHTTP(c.Response(), c.Request()) // mountUI, below, sets it
		return nil
	})

	gh := grid.New(a.db)
	gh.CSVBodyLimit = a.cfg.CSVBodyLimit
	if a.fair != nil {
		gh.Gate = backgroundGate{a.fair} // CSV imports run as background work
	}
	gh.Events = a.automationService() // row writes record automation events
	gh.Live = a.liveHub()             // and tell the clients watching their table once committed
	a.automationService().Live = a.liveHub()
	gh.Routes(api)
	a.liveHub().Routes(api, gh.CheckTable)
	a.automationService().Routes(api)
	a.tenancy.TokenRoutes(api)
	a.tenancy.MemberRoutes(api)
	a.tenancy.AuditRoutes(api)
	a.usageRoutes(api)

	// The Airtable-compatible API passes the same gates; its errors, the
	// gates' refusals among them, answer in Airtable's shape (errorHandler).
	v0 := e.Group(airtable.Prefix, a.tenancy.Authenticate(), a.recordUsage, a.trackRealm, a.rateLimit())
	v0.Use(a.admitAirtable()) // the last gate, as on api
	airtable.New(gh).Routes(v0)

	a.mountUI(e) // last: the UI's catch-all must not shadow a route above
	a.indexRoutes()
}

// Handler is the application as an http.Handler, for tests.
func (a *App) Handler() http.Handler { return a.echo }

// Serve listens on the configured address until ctx ends, then drains
// in-flight requests (see shutdown).
func (a *App) Serve(ctx context.Context) error {
	stopMetrics, err := a.serveMetrics()
	if err != nil {
		return err
	}
	defer stopMetrics()
	ln, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", a.cfg.Listen, err)
	}
	return a.ServeListener(ctx, ln)
}

// ServeListener serves on ln until ctx ends, then shuts down (see shutdown).
func (a *App) ServeListener(ctx context.Context, ln net.Listener) error {
	base, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	srv := a.httpServer(base)
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
	return a.shutdown(srv, cancelRequests)
}

// Close releases the connections.
func (a *App) Close() {
	a.stopLive()
	a.stopAutomations()
	a.stopLimiter()
	a.stopUsage()
	if a.redis != nil {
		a.redis.Close()
	}
	if a.pool != nil {
		a.pool.Close()
	}
}

// keepConnOnCancel is what a query does when its request's context ends (the
// client went away, or gave up): it runs on for queryGrace, and only then
// is it cancelled by a cancel request, which leaves the connection usable.
// pgx's default closes the connection at once, so every client that gave up
// on a read cost the pool a connection and the next requests a new
// PostgreSQL backend (a fork, and caches and prepared statements built
// again): the storm harness's victim measured its p99 after a storm stopped
// above its p99 during the storm. The connection is closed only if the
// server does not answer the cancel within queryCancelDeadline.
func keepConnOnCancel(c *pgconn.PgConn) ctxwatch.Handler {
	return &pgconn.CancelRequestContextWatcherHandler{Conn: c, CancelRequestDelay: queryGrace, DeadlineDelay: queryCancelDeadline}
}

const (
	queryGrace          = 100 * time.Millisecond
	queryCancelDeadline = 2 * time.Second
)
