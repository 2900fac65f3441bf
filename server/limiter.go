package server

import (
	"context"
	"log/slog"

	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor/limiter"
	"github.com/appdor/appdor/tenancy"
)

// startLimiter turns on the token cache (so a refused request costs no
// PostgreSQL work) and builds the rate limiter on the App's Redis, metrics
// and database (for the audit of refusal episodes). With Config.LimiterOff
// the limiter is not built, and the start log says so loudly.
func (a *App) startLimiter(ctx context.Context) {
	a.stopTokenCache = a.tenancy.StartTokenCache(ctx, 0, a.log)
	if a.cfg.LimiterOff {
		a.log.Warn("limiter=off: API requests are not rate limited (--limiter, APPDOR_LIMITER)",
			slog.String("flag", "limiter"), slog.String("value", "off"))
		return
	}
	perSecond, burst := a.cfg.UnauthenticatedPerSecond, a.cfg.UnauthenticatedBurst
	if perSecond == 0 {
		perSecond = limiter.DefaultUnauthenticatedPerSecond
		if burst == 0 {
			burst = limiter.DefaultUnauthenticatedBurst
		}
	}
	a.limiter = limiter.New(limiter.Config{
		Client:     a.redis,
		DB:         a.db,
		Log:        a.log,
		Registerer: a.realmRegistry(),
		RealmLimit: a.cfg.RealmRequestsPerMinute,

		UnauthenticatedPerSecond: max(perSecond, 0),
		UnauthenticatedBurst:     burst,

		LoginAddressPerMinute: orDefault(a.cfg.LoginAddressPerMinute, limiter.DefaultLoginAddressPerMinute),
		LoginAccountPerMinute: orDefault(a.cfg.LoginAccountPerMinute, limiter.DefaultLoginAccountPerMinute),
	})
	a.log.Info("limiter=on", slog.String("flag", "limiter"), slog.Int("realm_requests_per_minute", a.limiter.RealmLimit()))
}

// stopLimiter ends what startLimiter started; the audit rows already queued
// are written first.
func (a *App) stopLimiter() {
	if a.limiter != nil {
		a.limiter.Close()
	}
	if a.stopTokenCache != nil {
		a.stopTokenCache()
	}
}

// rateLimit is the limiter's middleware for the gated API, right after
// Authenticate: a request is charged to its token's ceiling (when it has one)
// and to its realm's; a session's request to its realm's only.
func (a *App) rateLimit() echo.MiddlewareFunc {
	if a.limiter == nil {
		return func(next echo.HandlerFunc) echo.HandlerFunc { return next }
	}
	return a.limiter.Middleware(func(c echo.Context) (limiter.Subject, bool) {
		p := tenancy.PrincipalOf(c)
		if p == nil {
			return limiter.Subject{}, false
		}
		return limiter.Subject{
			Realm:      p.RealmID,
			Token:      p.TokenID,
			User:       p.UserID,
			TokenLimit: p.TokenRPM,
			RealmLimit: p.RealmRPM,
		}, true
	})
}

// Limiter is the App's rate limiter, nil when it is off. Tests use it to wait
// for the audit writer (Flush).
func (a *App) Limiter() *limiter.Limiter { return a.limiter }
