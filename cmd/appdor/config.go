package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/gommon/bytes"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/appdor/appdor/automations"
	"github.com/appdor/appdor/fairness"
	"github.com/appdor/appdor/live"
	"github.com/appdor/appdor/server"
)

// setting is one configuration value: a flag, and the APPDOR_* variable that
// gives its default. Flags win over the environment.
type setting struct {
	flag, env, def, usage string
}

func (s setting) register(fs *pflag.FlagSet) {
	def := s.def
	if v, ok := os.LookupEnv(s.env); ok && !secrets[s.flag] {
		def = v
	}
	fs.String(s.flag, def, s.usage+" (env "+s.env+")")
}

var (
	sDatabaseURL = setting{"database-url", "APPDOR_DATABASE_URL", "postgres://localhost:5432/appdor?sslmode=disable", "PostgreSQL URL"}
	sMigrateURL  = setting{"migrate-database-url", "APPDOR_MIGRATE_DATABASE_URL", "", "PostgreSQL URL of the role that owns the schema, for migrations and the admin commands; empty: the database URL's role"}
	sRedisURL    = setting{"redis-url", "APPDOR_REDIS_URL", "redis://localhost:6379/0", "Redis URL"}
	sListen      = setting{"listen", "APPDOR_LISTEN", ":8080", "address to serve HTTP on"}
	sMaxConns    = setting{"db-max-conns", "APPDOR_DB_MAX_CONNS", "16", "PostgreSQL pool size"}
	sStmtTimeout = setting{"statement-timeout", "APPDOR_STATEMENT_TIMEOUT", "5s", "longest a tenant statement may run"}
	sAcqTimeout  = setting{"acquire-timeout", "APPDOR_ACQUIRE_TIMEOUT", "500ms", "longest a request waits for a pool connection before 503"}
	sBodyLimit   = setting{"body-limit", "APPDOR_BODY_LIMIT", "10M", "largest request body"}
	sMigrate     = setting{"migrate", "APPDOR_MIGRATE", "true", "apply pending migrations at start"}
	sLogLevel    = setting{"log-level", "APPDOR_LOG_LEVEL", "info", "debug, info, warn or error"}
	sLimiter     = setting{"limiter", "APPDOR_LIMITER", "on", "rate limit the API with GCRA in Redis; off is for diagnosis only"}
	sRealmRPM    = setting{"realm-requests-per-minute", "APPDOR_REALM_REQUESTS_PER_MINUTE", "60000", "every realm's API ceiling unless the realm sets its own"}

	// The CSV import streams its body in bounded memory, so it has its own limit.
	sCSVBodyLimit = setting{"csv-body-limit", "APPDOR_CSV_BODY_LIMIT", "1G", "largest CSV import body"}

	sFairness       = setting{"fairness", "APPDOR_FAIRNESS", "on", "per-realm admission controller; off is for the storm harness's negative control only"}
	sFairSeats      = setting{"fairness-seats", "APPDOR_FAIRNESS_SEATS", "0", "interactive work units running at once, all realms; 0 is four per core, within the pool"}
	sFairBgSeats    = setting{"fairness-background-seats", "APPDOR_FAIRNESS_BACKGROUND_SEATS", "0", "background work units (CSV import batches, automations) running at once, in seats of their own, a realm in one at a time; 0 is one per core"}
	sFairBgRest     = setting{"fairness-background-rest", "APPDOR_FAIRNESS_BACKGROUND_REST", "12", "while another realm is active, a realm with more background work waiting (or a CSV import, between its steps) rests this many times as long as each of its units ran (12: a thirteenth of a core at most); higher is gentler on the other realms and slower for the import"}
	sFairBackRest   = setting{"fairness-backlogged-rest", "APPDOR_FAIRNESS_BACKLOGGED_REST", "1", "while a realm that is not backlogged is active, the backlogged realms' seats rest this many times as long as each of their requests held one (1: half the time); 0 is no rest"}
	sFairQueue      = setting{"fairness-queue-length", "APPDOR_FAIRNESS_QUEUE_LENGTH", "64", "requests of one realm that may wait for a seat; beyond it a request is refused (queue_full)"}
	sFairWait       = setting{"fairness-wait-bound", "APPDOR_FAIRNESS_WAIT_BOUND", "50ms", "longest a request waits for a seat before it is refused (wait_expired)"}
	sFairRetryAfter = setting{"fairness-retry-after", "APPDOR_FAIRNESS_RETRY_AFTER", "1s", "Retry-After of a concurrency_limited refusal"}

	sLoginConcurrency = setting{"login-concurrency", "APPDOR_LOGIN_CONCURRENCY", "0", "sign-in password checks at once; a sign-in that finds none free within 500ms is refused (429); 0 is half the cores"}

	// Before authentication: lookups of tokens and sessions the server does not know.
	sUnauthRate     = setting{"unauthenticated-requests-per-second", "APPDOR_UNAUTHENTICATED_REQUESTS_PER_SECOND", "2", "lookups of unknown tokens or sessions one client address may cause a second (429 rate_limited beyond); known credentials are not counted; 0 turns this off"}
	sLookupTimeout  = setting{"lookup-timeout", "APPDOR_LOOKUP_TIMEOUT", "1s", "a credential lookup the server cannot answer from memory (seat, pool connection and statement together) that takes longer is answered 503"}
	sRelookups      = setting{"relookup-concurrency", "APPDOR_RELOOKUP_CONCURRENCY", "0", "lookups at once of known credentials whose cache entry expired; one that finds no slot within the lookup timeout is answered 503; 0 is half the cores"}
	sUnauthBurst    = setting{"unauthenticated-burst", "APPDOR_UNAUTHENTICATED_BURST", "5", "how many of those lookups one client address may cause at once"}
	sTrustedProxies = setting{"trusted-proxies", "APPDOR_TRUSTED_PROXIES", "", "comma-separated addresses or CIDR ranges of proxies whose X-Forwarded-For names the client and X-Forwarded-Proto the scheme; empty: the client is the direct peer, the scheme the connection's"}

	// Sign-in attempts, before the password is checked.
	sLoginAddress = setting{"login-address-attempts-per-minute", "APPDOR_LOGIN_ADDRESS_ATTEMPTS_PER_MINUTE", "30", "sign-in attempts one client address may make a minute, all at once or spread (429 rate_limited beyond, before any password check); 0 turns this off"}
	sLoginAccount = setting{"login-account-attempts-per-minute", "APPDOR_LOGIN_ACCOUNT_ATTEMPTS_PER_MINUTE", "10", "sign-in attempts on one account (email) a minute, from any addresses (429 rate_limited beyond, before any password check); 0 turns this off"}

	sHSTS = setting{"hsts", "APPDOR_HSTS", "off", "send Strict-Transport-Security (max-age one year) on HTTPS responses; on only when the site is served over HTTPS for good"}

	// Who may read /metrics, which names realms; with neither set, loopback clients of the main listener only.
	sMetricsListen    = setting{"metrics-listen", "APPDOR_METRICS_LISTEN", "", "serve /metrics on this address only (e.g. 127.0.0.1:9090), not on --listen"}
	sMetricsToken     = setting{"metrics-token", "APPDOR_METRICS_TOKEN", "", "bearer token /metrics asks for (at least 16 characters; prefer the variable: a flag shows in the process list)"}
	sPprof            = setting{"pprof", "APPDOR_PPROF", "off", "serve Go's profiles (/debug/pprof/: CPU, heap, goroutines, execution trace) beside /metrics on --metrics-listen, which it needs, for its readers (--metrics-token)"}
	sMetricsRealmIdle = setting{"metrics-realm-idle", "APPDOR_METRICS_REALM_IDLE", "10m", "a realm's series leave /metrics after it has sent no request for this long (at least 2m)"}

	// Time bounds of the HTTP server and of its shutdown.
	sReadHeaderTimeout = setting{"read-header-timeout", "APPDOR_READ_HEADER_TIMEOUT", "5s", "longest a client may take to send a request's headers"}
	sReadTimeout       = setting{"read-timeout", "APPDOR_READ_TIMEOUT", "10s", "longest a client may take to send a whole request, body included, which bounds how long a slow body holds a seat (CSV import: see --stream-timeout)"}
	sWriteTimeout      = setting{"write-timeout", "APPDOR_WRITE_TIMEOUT", "60s", "longest from a request's headers to the end of its answer (CSV export: see --stream-timeout); longer than --statement-timeout"}
	sIdleTimeout       = setting{"idle-timeout", "APPDOR_IDLE_TIMEOUT", "2m", "longest a keep-alive connection waits for its next request"}
	sStreamTimeout     = setting{"stream-timeout", "APPDOR_STREAM_TIMEOUT", "30s", "longest pause between two reads of a CSV import's body or two writes of a CSV export"}
	sShutdownDrain     = setting{"shutdown-drain", "APPDOR_SHUTDOWN_DRAIN", "8s", "after SIGTERM, how long running requests may finish before they are cancelled (503); the process then closes the pool and exits 0"}

	// Automations and webhooks.
	sAutoWorkers  = setting{"automation-workers", "APPDOR_AUTOMATION_WORKERS", "4", "automation workers in this process (events and webhook deliveries); 0 runs none here (writes still record events for another process's workers)"}
	sAutoPool     = setting{"automation-pool-size", "APPDOR_AUTOMATION_POOL_SIZE", "4", "the automation workers' own PostgreSQL pool, apart from --db-max-conns"}
	sAutoBacklog  = setting{"automation-backlog", "APPDOR_AUTOMATION_BACKLOG", "10000", "automation events one realm may have waiting; past it the realm's writes that would add one are refused (429 automation_backlog)"}
	sAutoMaxHops  = setting{"automation-max-hops", "APPDOR_AUTOMATION_MAX_HOPS", "8", "how long a chain of automations triggering automations may grow before it stops (automation_hop_limit)"}
	sWebhookTime  = setting{"webhook-timeout", "APPDOR_WEBHOOK_TIMEOUT", "15s", "longest a webhook receiver may take to answer"}
	sWebhookPriv  = setting{"webhook-allow-private", "APPDOR_WEBHOOK_ALLOW_PRIVATE", "off", "let webhooks reach loopback, private, link-local, CGNAT and metadata addresses (the SSRF guard refuses them when off)"}
	sWebhookCIDRs = setting{"webhook-allow-cidrs", "APPDOR_WEBHOOK_ALLOW_CIDRS", "", "comma-separated CIDR ranges webhooks may reach although they are not public, e.g. 10.1.2.0/24"}

	// Live event streams (GET /tables/{table}/events). Past a cap, a new
	// stream is refused: 429 concurrency_limited, reason live_streams.
	sLiveStreams      = setting{"live-streams", "APPDOR_LIVE_STREAMS", "10000", "live event streams this process holds open at most (each a connection and a goroutine, no database connection)"}
	sLiveStreamsRealm = setting{"live-streams-per-realm", "APPDOR_LIVE_STREAMS_PER_REALM", "500", "live event streams one realm may hold open on this process"}
	sLiveStreamsUser  = setting{"live-streams-per-user", "APPDOR_LIVE_STREAMS_PER_USER", "20", "live event streams one user (or one API token) may hold open on this process: a person's tabs"}
	sLiveIdleTimeout  = setting{"live-idle-timeout", "APPDOR_LIVE_IDLE_TIMEOUT", "5m", "a live stream with nothing to send this long ends; its client reconnects, and is authenticated again"}
	sLiveWriteTimeout = setting{"live-write-timeout", "APPDOR_LIVE_WRITE_TIMEOUT", "10s", "a live stream whose client takes no data this long is dropped (it resumes or resyncs when it reconnects)"}
	sLiveWriters      = setting{"live-writers", "APPDOR_LIVE_WRITERS", "0", "live stream writes running at once (0: half the cores, at least one); a message wakes every stream of its table together, and the others wait their turn"}
)

// secrets are the settings whose variable must not show as the flag's
// default in --help; str reads their variable when the flag is not given.
var secrets = map[string]bool{sMetricsToken.flag: true}

// connSettings are the settings every command that touches the database has.
var connSettings = []setting{sDatabaseURL, sMigrateURL, sRedisURL}

// serveSettings are those of `appdor serve`.
var serveSettings = []setting{sListen, sMaxConns, sStmtTimeout, sAcqTimeout, sBodyLimit, sMigrate, sLogLevel, sLimiter, sRealmRPM,
	sFairness, sFairSeats, sFairBgSeats, sFairBgRest, sFairBackRest, sFairQueue, sFairWait, sFairRetryAfter,
	sLoginConcurrency, sCSVBodyLimit, sUnauthRate, sUnauthBurst, sLookupTimeout, sRelookups, sLoginAddress, sLoginAccount, sTrustedProxies, sHSTS,
	sMetricsListen, sMetricsToken, sMetricsRealmIdle, sPprof,
	sReadHeaderTimeout, sReadTimeout, sWriteTimeout, sIdleTimeout, sStreamTimeout, sShutdownDrain,
	sAutoWorkers, sAutoPool, sAutoBacklog, sAutoMaxHops, sWebhookTime, sWebhookPriv, sWebhookCIDRs,
	sLiveStreams, sLiveStreamsRealm, sLiveStreamsUser, sLiveIdleTimeout, sLiveWriteTimeout, sLiveWriters}

// configError names the flag and the variable a bad value came from.
func configError(s setting, format string, args ...any) error {
	// Driver errors span lines; the message a person reads is one.
	msg := strings.Join(strings.Fields(fmt.Sprintf(format, args...)), " ")
	return fmt.Errorf("%s (--%s): %s", s.env, s.flag, msg)
}

func str(cmd *cobra.Command, s setting) string {
	v, _ := cmd.Flags().GetString(s.flag)
	if secrets[s.flag] && !cmd.Flags().Changed(s.flag) {
		v = os.Getenv(s.env)
	}
	return strings.TrimSpace(v)
}

func duration(cmd *cobra.Command, s setting) (time.Duration, error) {
	d, err := time.ParseDuration(str(cmd, s))
	if err != nil || d <= 0 {
		return 0, configError(s, "%q is not a positive duration such as 5s", str(cmd, s))
	}
	return d, nil
}

func boolean(cmd *cobra.Command, s setting) (bool, error) {
	switch strings.ToLower(str(cmd, s)) {
	case "true", "on", "1", "yes":
		return true, nil
	case "false", "off", "0", "no":
		return false, nil
	}
	return false, configError(s, "%q is not on or off", str(cmd, s))
}

// serverConfig reads and validates the whole configuration once.
func serverConfig(cmd *cobra.Command) (server.Config, error) {
	cfg := server.Config{
		DatabaseURL: str(cmd, sDatabaseURL),
		RedisURL:    str(cmd, sRedisURL),
		Listen:      str(cmd, sListen),
		BodyLimit:   str(cmd, sBodyLimit),
		Version:     version,
	}
	if cfg.DatabaseURL == "" {
		return cfg, configError(sDatabaseURL, "empty")
	}
	cfg.MigrateDatabaseURL = str(cmd, sMigrateURL)
	if cfg.RedisURL == "" {
		return cfg, configError(sRedisURL, "empty")
	}
	n, err := strconv.Atoi(str(cmd, sMaxConns))
	if err != nil || n < 2 || n > 1000 {
		return cfg, configError(sMaxConns, "%q is not a number from 2 to 1000", str(cmd, sMaxConns))
	}
	cfg.DBMaxConns = int32(n)
	if cfg.StatementTimeout, err = duration(cmd, sStmtTimeout); err != nil {
		return cfg, err
	}
	if cfg.AcquireTimeout, err = duration(cmd, sAcqTimeout); err != nil {
		return cfg, err
	}
	if cfg.Migrate, err = boolean(cmd, sMigrate); err != nil {
		return cfg, err
	}
	limiterOn, err := boolean(cmd, sLimiter)
	if err != nil {
		return cfg, err
	}
	cfg.LimiterOff = !limiterOn
	if cfg.RealmRequestsPerMinute, err = strconv.Atoi(str(cmd, sRealmRPM)); err != nil ||
		cfg.RealmRequestsPerMinute < 1 || cfg.RealmRequestsPerMinute > 1_000_000 {
		return cfg, configError(sRealmRPM, "%q is not a number from 1 to 1000000", str(cmd, sRealmRPM))
	}
	if cfg.Fairness, err = fairnessConfig(cmd); err != nil {
		return cfg, err
	}
	if cfg.LoginConcurrency, err = strconv.Atoi(str(cmd, sLoginConcurrency)); err != nil ||
		cfg.LoginConcurrency < 0 || cfg.LoginConcurrency > 1000 {
		return cfg, configError(sLoginConcurrency, "%q is not a number from 0 (half the cores) to 1000", str(cmd, sLoginConcurrency))
	}
	if cfg.LookupTimeout, err = duration(cmd, sLookupTimeout); err != nil {
		return cfg, err
	}
	if cfg.RelookupConcurrency, err = strconv.Atoi(str(cmd, sRelookups)); err != nil ||
		cfg.RelookupConcurrency < 0 || cfg.RelookupConcurrency > 1000 {
		return cfg, configError(sRelookups, "%q is not a number from 0 (half the cores) to 1000", str(cmd, sRelookups))
	}
	csvLimit, err := bytes.Parse(str(cmd, sCSVBodyLimit))
	if err != nil || csvLimit < 1 {
		return cfg, configError(sCSVBodyLimit, "%q is not a size such as 1G or 500M", str(cmd, sCSVBodyLimit))
	}
	cfg.CSVBodyLimit = csvLimit
	if err := unauthenticatedConfig(cmd, &cfg); err != nil {
		return cfg, err
	}
	if cfg.HSTS, err = boolean(cmd, sHSTS); err != nil {
		return cfg, err
	}
	if err := metricsConfig(cmd, &cfg); err != nil {
		return cfg, err
	}
	if err := timeoutConfig(cmd, &cfg); err != nil {
		return cfg, err
	}
	if cfg.Automations, err = automationsConfig(cmd); err != nil {
		return cfg, err
	}
	if cfg.Live, err = liveConfig(cmd); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// liveConfig reads the live event streams' caps and time bounds.
func liveConfig(cmd *cobra.Command) (live.Config, error) {
	var lc live.Config
	for _, c := range []struct {
		s   setting
		dst *int
	}{{sLiveStreams, &lc.MaxStreams}, {sLiveStreamsRealm, &lc.MaxStreamsPerRealm}, {sLiveStreamsUser, &lc.MaxStreamsPerUser}} {
		n, err := strconv.Atoi(str(cmd, c.s))
		if err != nil || n < 1 || n > 1_000_000 {
			return lc, configError(c.s, "%q is not a number from 1 to 1000000", str(cmd, c.s))
		}
		*c.dst = n
	}
	n, err := strconv.Atoi(str(cmd, sLiveWriters))
	if err != nil || n < 0 || n > 1000 {
		return lc, configError(sLiveWriters, "%q is not a number from 0 to 1000", str(cmd, sLiveWriters))
	}
	lc.Writers = n
	if lc.IdleTimeout, err = duration(cmd, sLiveIdleTimeout); err != nil {
		return lc, err
	}
	if lc.WriteTimeout, err = duration(cmd, sLiveWriteTimeout); err != nil {
		return lc, err
	}
	return lc, nil
}

// timeoutConfig reads the HTTP server's time bounds and the shutdown's drain.
func timeoutConfig(cmd *cobra.Command, cfg *server.Config) error {
	for _, d := range []struct {
		s   setting
		dst *time.Duration
	}{
		{sReadHeaderTimeout, &cfg.ReadHeaderTimeout}, {sReadTimeout, &cfg.ReadTimeout}, {sWriteTimeout, &cfg.WriteTimeout},
		{sIdleTimeout, &cfg.IdleTimeout}, {sStreamTimeout, &cfg.StreamTimeout}, {sShutdownDrain, &cfg.ShutdownDrain},
	} {
		v, err := duration(cmd, d.s)
		if err != nil {
			return err
		}
		*d.dst = v
	}
	// An answer cut by the write deadline is a reset connection, not a 503:
	// a statement must be able to time out well within it.
	if cfg.WriteTimeout <= cfg.StatementTimeout+cfg.AcquireTimeout {
		return configError(sWriteTimeout, "%s is not longer than --statement-timeout plus --acquire-timeout (%s)",
			cfg.WriteTimeout, cfg.StatementTimeout+cfg.AcquireTimeout)
	}
	return nil
}

// automationsConfig reads the automation workers' and webhooks' settings.
func automationsConfig(cmd *cobra.Command) (automations.Config, error) {
	var ac automations.Config
	count := func(s setting, least, most int) (int, error) {
		n, err := strconv.Atoi(str(cmd, s))
		if err != nil || n < least || n > most {
			return 0, configError(s, "%q is not a number from %d to %d", str(cmd, s), least, most)
		}
		return n, nil
	}
	var err error
	if ac.Workers, err = count(sAutoWorkers, 0, 1000); err != nil {
		return ac, err
	}
	if ac.Workers == 0 {
		ac.Workers = -1 // none here; automations' zero is its default
	}
	if ac.PoolSize, err = count(sAutoPool, 1, 1000); err != nil {
		return ac, err
	}
	if ac.Backlog, err = count(sAutoBacklog, 1, 100_000_000); err != nil {
		return ac, err
	}
	if ac.MaxHops, err = count(sAutoMaxHops, 1, 100); err != nil {
		return ac, err
	}
	if ac.DeliveryTimeout, err = duration(cmd, sWebhookTime); err != nil {
		return ac, err
	}
	if ac.AllowPrivate, err = boolean(cmd, sWebhookPriv); err != nil {
		return ac, err
	}
	for _, f := range strings.Split(str(cmd, sWebhookCIDRs), ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return ac, configError(sWebhookCIDRs, "%q is not a CIDR range such as 10.1.2.0/24", f)
		}
		ac.AllowCIDRs = append(ac.AllowCIDRs, p.Masked())
	}
	return ac, nil
}

// unauthenticatedConfig reads the limits on what a client may cause before it
// is authenticated — lookups of unknown credentials per client address,
// sign-in attempts per address and per account — and the proxies trusted to
// name the client.
func unauthenticatedConfig(cmd *cobra.Command, cfg *server.Config) error {
	rate, err := strconv.Atoi(str(cmd, sUnauthRate))
	if err != nil || rate < 0 || rate > 100_000 {
		return configError(sUnauthRate, "%q is not a number from 0 (off) to 100000", str(cmd, sUnauthRate))
	}
	burst, err := strconv.Atoi(str(cmd, sUnauthBurst))
	if err != nil || burst < 1 || burst > 100_000 {
		return configError(sUnauthBurst, "%q is not a number from 1 to 100000", str(cmd, sUnauthBurst))
	}
	cfg.UnauthenticatedPerSecond, cfg.UnauthenticatedBurst = rate, burst
	if rate == 0 {
		cfg.UnauthenticatedPerSecond = -1 // the server's zero is the default
	}
	perMinute := func(s setting) (int, error) {
		n, err := strconv.Atoi(str(cmd, s))
		if err != nil || n < 0 || n > 100_000 {
			return 0, configError(s, "%q is not a number from 0 (off) to 100000", str(cmd, s))
		}
		if n == 0 {
			n = -1 // the server's zero is the default
		}
		return n, nil
	}
	if cfg.LoginAddressPerMinute, err = perMinute(sLoginAddress); err != nil {
		return err
	}
	if cfg.LoginAccountPerMinute, err = perMinute(sLoginAccount); err != nil {
		return err
	}
	for _, f := range strings.Split(str(cmd, sTrustedProxies), ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			if strings.Contains(f, ":") {
				f += "/128"
			} else {
				f += "/32"
			}
		}
		_, n, err := net.ParseCIDR(f)
		if err != nil {
			return configError(sTrustedProxies, "%q is not an address or a CIDR range such as 10.0.0.0/8", f)
		}
		cfg.TrustedProxies = append(cfg.TrustedProxies, n)
	}
	return nil
}

// metricsConfig reads who may read /metrics, and how long a quiet realm
// keeps its series there. The token is never part of an error message.
func metricsConfig(cmd *cobra.Command, cfg *server.Config) error {
	cfg.MetricsListen, cfg.MetricsToken = str(cmd, sMetricsListen), str(cmd, sMetricsToken)
	if cfg.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(cfg.MetricsListen); err != nil {
			return configError(sMetricsListen, "%q is not an address such as 127.0.0.1:9090", cfg.MetricsListen)
		}
		if cfg.MetricsListen == cfg.Listen {
			return configError(sMetricsListen, "%q is also --listen; give /metrics an address of its own", cfg.MetricsListen)
		}
	}
	pprof, err := boolean(cmd, sPprof)
	if err != nil {
		return err
	}
	if pprof && cfg.MetricsListen == "" {
		return configError(sPprof, "profiles are served on --metrics-listen only; set it too (e.g. 127.0.0.1:9090)")
	}
	cfg.Pprof = pprof
	if cfg.MetricsToken != "" && len(cfg.MetricsToken) < 16 {
		return configError(sMetricsToken, "the token is shorter than 16 characters")
	}
	idle, err := duration(cmd, sMetricsRealmIdle)
	if err != nil {
		return err
	}
	if idle < server.MinMetricsRealmIdle {
		return configError(sMetricsRealmIdle, "%s is shorter than %s, the least", idle, server.MinMetricsRealmIdle)
	}
	cfg.MetricsRealmIdle = idle
	return nil
}

// fairnessConfig reads the admission controller's knobs; zeros leave the
// sizing to the controller (cores and pool).
func fairnessConfig(cmd *cobra.Command) (fairness.Config, error) {
	var fc fairness.Config
	on, err := boolean(cmd, sFairness)
	if err != nil {
		return fc, err
	}
	fc.Off = !on
	count := func(s setting, least int) (int, error) {
		n, err := strconv.Atoi(str(cmd, s))
		if err != nil || n < least || n > 100_000 {
			return 0, configError(s, "%q is not a number from %d to 100000", str(cmd, s), least)
		}
		return n, nil
	}
	if fc.Seats, err = count(sFairSeats, 0); err != nil {
		return fc, err
	}
	if fc.BackgroundSeats, err = count(sFairBgSeats, 0); err != nil {
		return fc, err
	}
	rest, err := strconv.ParseFloat(str(cmd, sFairBgRest), 64)
	if err != nil || rest < 0.1 || rest > 100 {
		return fc, configError(sFairBgRest, "%q is not a number from 0.1 to 100", str(cmd, sFairBgRest))
	}
	fc.BackgroundRest = rest
	backRest, err := strconv.ParseFloat(str(cmd, sFairBackRest), 64)
	if err != nil || backRest < 0 || backRest > 100 {
		return fc, configError(sFairBackRest, "%q is not a number from 0 to 100", str(cmd, sFairBackRest))
	}
	fc.BackloggedRest = backRest
	if backRest == 0 {
		fc.BackloggedRest = -1 // none
	}
	if fc.QueueLength, err = count(sFairQueue, 1); err != nil {
		return fc, err
	}
	if fc.WaitBound, err = duration(cmd, sFairWait); err != nil {
		return fc, err
	}
	if fc.RetryAfter, err = duration(cmd, sFairRetryAfter); err != nil {
		return fc, err
	}
	return fc, nil
}

func logLevel(cmd *cobra.Command) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(str(cmd, sLogLevel))); err != nil {
		return l, configError(sLogLevel, "%q is not debug, info, warn or error", str(cmd, sLogLevel))
	}
	return l, nil
}

// explain turns a connection failure into the one line that says which
// variable to fix.
func explain(err error) error {
	var ce *server.ConnectError
	if errors.As(err, &ce) {
		s := sDatabaseURL
		switch ce.Service {
		case "redis":
			s = sRedisURL
		case "migration database":
			s = sMigrateURL
		}
		return configError(s, "cannot reach %s at %s: %v", ce.Service, ce.URL, ce.Err)
	}
	return err
}
