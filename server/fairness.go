package server

import (
	"context"
	"log/slog"

	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor/airtable"
	"github.com/appdor/appdor/fairness"
)

// setupFairness builds the fair-queuing controller from the configuration,
// sized by the cores and the pool. Switched off, it still exists (it admits
// everything and says so on /metrics), and the start is logged loudly: off is
// for the storm harness's negative control only.
func (a *App) setupFairness() {
	cfg := a.cfg.Fairness
	cfg.PoolSize = int(a.pool.Config().MaxConns)
	cfg.Log = a.log
	if a.usage != nil {
		cfg.Usage = a.seatUsage
	}
	a.fair = fairness.New(cfg, a.realmRegistry())
	sized := a.fair.Config()
	if sized.Off {
		a.log.Warn("fairness: the per-realm fair-queuing controller is OFF (APPDOR_FAIRNESS=off); one realm's load can become every realm's latency",
			slog.Bool("fairness", false))
		return
	}
	a.log.Info("fairness: per-realm fair queuing on",
		slog.Int("seats", sized.Seats), slog.Int("background_seats", sized.BackgroundSeats),
		slog.Float64("background_rest", sized.BackgroundRest),
		slog.Int("backlogged_seats", sized.BackloggedSeats), slog.Float64("backlogged_rest", sized.BackloggedRest),
		slog.Int("queue_length", sized.QueueLength),
		slog.Duration("wait_bound", sized.WaitBound), slog.Int("pool", sized.PoolSize),
		slog.Duration("active_window", sized.ActiveWindow), slog.Duration("retry_after", sized.RetryAfter))
}

// admit is the fairness gate of the API group: the last gate, after
// authentication and the rate limiter, so only work that is allowed at all
// competes for a seat. Switched off, it passes everything through.
func (a *App) admit() echo.MiddlewareFunc {
	if a.fair == nil || a.fair.Config().Off {
		return func(next echo.HandlerFunc) echo.HandlerFunc { return next }
	}
	return a.fair.Middleware(realmOf)
}

// admitAirtable is admit for the Airtable-compatible API: its refusals in
// Airtable's error shape, so that Airtable's clients back off and retry.
func (a *App) admitAirtable() echo.MiddlewareFunc {
	if a.fair == nil || a.fair.Config().Off {
		return func(next echo.HandlerFunc) echo.HandlerFunc { return next }
	}
	return a.fair.MiddlewareWithBody(realmOf, airtable.RefusalBody)
}

// Fairness is the controller, for tests.
func (a *App) Fairness() *fairness.Controller { return a.fair }

// backgroundGate runs the grid's long work (CSV import batches) as
// background work of its realm.
type backgroundGate struct{ c *fairness.Controller }

func (g backgroundGate) Yield(ctx context.Context) { fairness.Yield(ctx) }

func (g backgroundGate) Rest(ctx context.Context, realm string) error {
	return g.c.Rest(ctx, realm)
}

func (g backgroundGate) Acquire(ctx context.Context, realm string) (func(), error) {
	return g.c.Acquire(ctx, realm, fairness.Background)
}
