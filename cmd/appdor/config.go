package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/appdor/appdor/server"
)

// setting is one configuration value: a flag, and the APPDOR_* variable that
// gives its default. Flags win over the environment.
type setting struct {
	flag, env, def, usage string
}

func (s setting) register(fs *pflag.FlagSet) {
	def := s.def
	if v, ok := os.LookupEnv(s.env); ok {
		def = v
	}
	fs.String(s.flag, def, s.usage+" (env "+s.env+")")
}

var (
	sDatabaseURL = setting{"database-url", "APPDOR_DATABASE_URL", "postgres://localhost:5432/appdor?sslmode=disable", "PostgreSQL URL"}
	sRedisURL    = setting{"redis-url", "APPDOR_REDIS_URL", "redis://localhost:6379/0", "Redis URL"}
	sListen      = setting{"listen", "APPDOR_LISTEN", ":8080", "address to serve HTTP on"}
	sMaxConns    = setting{"db-max-conns", "APPDOR_DB_MAX_CONNS", "16", "PostgreSQL pool size"}
	sStmtTimeout = setting{"statement-timeout", "APPDOR_STATEMENT_TIMEOUT", "5s", "longest a tenant statement may run"}
	sAcqTimeout  = setting{"acquire-timeout", "APPDOR_ACQUIRE_TIMEOUT", "500ms", "longest a request waits for a pool connection before 503"}
	sBodyLimit   = setting{"body-limit", "APPDOR_BODY_LIMIT", "10M", "largest request body"}
	sMigrate     = setting{"migrate", "APPDOR_MIGRATE", "true", "apply pending migrations at start"}
	sLogLevel    = setting{"log-level", "APPDOR_LOG_LEVEL", "info", "debug, info, warn or error"}
	sLimiter     = setting{"limiter", "APPDOR_LIMITER", "on", "rate limit the API with GCRA in Redis; off is for diagnosis only"}
	sRealmRPM    = setting{"realm-requests-per-minute", "APPDOR_REALM_REQUESTS_PER_MINUTE", "6000", "every realm's API ceiling unless the realm sets its own"}
)

// connSettings are the settings every command that touches the database has.
var connSettings = []setting{sDatabaseURL, sRedisURL}

// serveSettings are those of `appdor serve`.
var serveSettings = []setting{sListen, sMaxConns, sStmtTimeout, sAcqTimeout, sBodyLimit, sMigrate, sLogLevel, sLimiter, sRealmRPM}

// configError names the flag and the variable a bad value came from.
func configError(s setting, format string, args ...any) error {
	// Driver errors span lines; the message a person reads is one.
	msg := strings.Join(strings.Fields(fmt.Sprintf(format, args...)), " ")
	return fmt.Errorf("%s (--%s): %s", s.env, s.flag, msg)
}

func str(cmd *cobra.Command, s setting) string {
	v, _ := cmd.Flags().GetString(s.flag)
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
	return cfg, nil
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
		if ce.Service == "redis" {
			s = sRedisURL
		}
		return configError(s, "cannot reach %s at %s: %v", ce.Service, ce.URL, ce.Err)
	}
	return err
}
