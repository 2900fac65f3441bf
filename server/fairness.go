package server

import (
	"log/slog"

	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor/fairness"
)

// setupFairness builds the per-realm admission controller from the
// configuration, sized by the cores and the pool. Switched off, it still
// exists (it admits everything and says so on /metrics), and the start is
// logged loudly: off is for the storm harness's negative control only.
func (a *App) setupFairness() {
	cfg := a.cfg.Fairness
	cfg.PoolSize = int(a.pool.Config().MaxConns)
	cfg.Log = a.log
	a.fair = fairness.New(cfg, a.metrics)
	sized := a.fair.Config()
	if sized.Off {
		a.log.Warn("fairness: the per-realm admission controller is OFF (APPDOR_FAIRNESS=off); one realm's load can become every realm's latency",
			slog.Bool("fairness", false))
		return
	}
	a.log.Info("fairness: per-realm admission controller on",
		slog.Int("capacity", sized.Capacity), slog.Int("reserve", sized.Reserve),
		slog.Int("pool", sized.PoolSize), slog.Duration("active_window", sized.ActiveWindow),
		slog.Duration("hold", sized.Hold), slog.Duration("spread", sized.Spread),
		slog.Duration("new_realm", max(sized.FreshFor, 0)), slog.Duration("retry_after", sized.RetryAfter))
}

// admit is the fairness gate of the API group: the last gate, after
// authentication and the rate limiter, so only work that is allowed at all
// competes for a slot. Switched off, it passes everything through.
func (a *App) admit() echo.MiddlewareFunc {
	if a.fair == nil || a.fair.Config().Off {
		return func(next echo.HandlerFunc) echo.HandlerFunc { return next }
	}
	return a.fair.Middleware(realmOf)
}

// Fairness is the admission controller, for tests and the grid's gate.
func (a *App) Fairness() *fairness.Controller { return a.fair }
