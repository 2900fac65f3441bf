package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/rueidis"
)

// connectRedis makes the App's Redis client. A Redis that does not answer at
// start does not stop the server: what needs Redis (the rate limiter) fails
// open and the client dials again on its next call, so the server serves
// degraded (see readyz) until Redis is back. down is why it did not answer,
// nil when it did. A URL that does not parse, or a Redis that answers with an
// error (a wrong password), is a configuration error and fails the start.
func (a *App) connectRedis() (down error, err error) {
	url := a.cfg.RedisURL
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		return nil, &ConnectError{Service: "redis", URL: Redact(url), Err: err}
	}
	opt.DisableCache = true
	opt.Dialer.Timeout = 2 * time.Second
	opt.ConnWriteTimeout = 2 * time.Second
	if a.redis, err = rueidis.NewClient(opt); err == nil {
		return nil, nil
	}
	if _, answered := rueidis.IsRedisErr(err); answered {
		return nil, &ConnectError{Service: "redis", URL: Redact(url), Err: err}
	}
	// Unreachable. Without a first answer rueidis cannot tell a cluster from
	// a single Redis; a single client is the one it makes without one (it
	// returns it with the dial's error), and it reconnects by itself.
	opt.ForceSingleClient = true
	if a.redis, _ = rueidis.NewClient(opt); a.redis == nil {
		return nil, &ConnectError{Service: "redis", URL: Redact(url), Err: err}
	}
	return err, nil
}

// reportRedis says once at start that Redis is not there: through the
// limiter, which then logs its return too, or directly when it is off.
func (a *App) reportRedis(ctx context.Context, down error) {
	if down == nil {
		return
	}
	if a.limiter != nil {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_ = a.limiter.Ping(pctx) // logs the outage, and its end when it comes
		return
	}
	a.log.Warn("redis unreachable at start; serving without it", slog.String("redis_url", Redact(a.cfg.RedisURL)),
		slog.String("error", down.Error()))
}

// pingRedis asks Redis whether it answers, through the limiter when there
// is one, so an outage seen by the readiness check is logged as the
// limiter's own.
func (a *App) pingRedis(ctx context.Context) error {
	if a.limiter != nil {
		return a.limiter.Ping(ctx)
	}
	return a.redis.Do(ctx, a.redis.B().Ping().Build()).Error()
}
