package server

import (
	"context"
	"log/slog"

	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor/fairness"
	"github.com/appdor/appdor/limiter"
	"github.com/appdor/appdor/tenancy"
)

// guardLookups puts the gates in front of the work a request causes before it
// is authenticated: a credential the server does not know is charged to its
// client's address (the limiter's unauthenticated ceiling, in Redis), and its
// lookup runs under a seat of the fairness controller's unauthenticated flow,
// within the lookup timeout (seat, pool connection and statement
// together). Known credentials pass neither; unknown ones are answered 401
// from memory for a while. Call it after the limiter and the controller are
// built.
func (a *App) guardLookups() {
	g := tenancy.Guard{Gate: a.unauthenticatedGate(), Timeout: a.cfg.LookupTimeout,
		Relookups: a.cfg.RelookupConcurrency, Log: a.log, Registerer: a.metrics}
	perSecond, burst := 0, 0
	if a.limiter != nil {
		perSecond, burst = a.limiter.UnauthenticatedLimit()
		if perSecond > 0 {
			g.Screen = a.limiter.ScreenAddress
		}
	}
	a.tenancy.SetGuard(g)
	if perSecond == 0 {
		a.log.Warn(limiter.UnauthenticatedFlag+"=off: lookups of unknown credentials are not limited per client address",
			slog.String("flag", limiter.UnauthenticatedFlag))
		return
	}
	a.log.Info("unauthenticated lookups limited per client address",
		slog.String("flag", limiter.UnauthenticatedFlag), slog.Int("per_second", perSecond),
		slog.Int("burst", burst), slog.Int("trusted_proxies", len(a.cfg.TrustedProxies)))
}

// unauthenticatedGate is tenancy's Gate on the fairness controller: a seat of
// the unauthenticated flow, at the interactive level (a request waits for
// it); the controller's refusal is its 429 concurrency_limited.
func (a *App) unauthenticatedGate() tenancy.Gate {
	if a.fair == nil {
		return nil
	}
	fair := a.fair
	return func(ctx context.Context) (func(), error) {
		return fair.Acquire(ctx, fairness.FlowUnauthenticated, fairness.Interactive)
	}
}

// ipExtractor is how a request's client address is found, for the limits
// keyed by it. With no trusted proxy it is the direct peer's address: a
// header any client can write must not choose whose allowance it spends.
// Behind trusted proxies, X-Forwarded-For is read from the right, skipping
// those proxies' addresses only.
func (a *App) ipExtractor() echo.IPExtractor {
	if len(a.cfg.TrustedProxies) == 0 {
		return echo.ExtractIPDirect()
	}
	return echo.ExtractIPFromXFFHeader(a.trustOptions()...)
}
