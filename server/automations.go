package server

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/appdor/appdor/automations"
)

// automationService returns the App's automations, made on first use: the
// routes need them, and the router test builds the routes with no services.
func (a *App) automationService() *automations.Service {
	if a.automations == nil {
		a.automations = automations.New(a.cfg.Automations, a.db, a.log, a.metrics)
	}
	return a.automations
}

// startAutomations opens the workers' own small pool, so that automation
// work can never take a connection the API needs, and starts the workers,
// each unit of their work under a background seat of its realm.
func (a *App) startAutomations(ctx context.Context) error {
	s := a.automationService()
	pcfg, err := pgxpool.ParseConfig(a.cfg.DatabaseURL)
	if err != nil {
		return &ConnectError{Service: "database", URL: Redact(a.cfg.DatabaseURL), Err: err}
	}
	pcfg.MaxConns = int32(s.Config().PoolSize)
	pcfg.MinConns = 0
	pcfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pcfg.AfterConnect = automations.WorkerConnection
	// A stopping worker's statement is cancelled, not its connection
	// closed. A closed connection keeps its place in this small pool until
	// its cancel request and goodbye are through, and the claim a stopping
	// worker gives back (automations.Service.Close) needs a place within
	// 2 s: in one CI run it did not get one (its test failed after 2.42 s),
	// as when every connection of the pool closes at once on a loaded
	// machine.
	pcfg.ConnConfig.BuildContextWatcherHandler = keepConnOnCancel
	if a.autoPool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return &ConnectError{Service: "database", URL: Redact(a.cfg.DatabaseURL), Err: err}
	}
	var gate automations.Gate
	if a.fair != nil && !a.fair.Config().Off {
		gate = backgroundGate{a.fair}
	}
	s.Start(a.autoPool, a.cfg.StatementTimeout, gate)
	return nil
}

// stopAutomations stops the workers, then closes their pool.
func (a *App) stopAutomations() {
	if a.automations != nil {
		a.automations.Close()
	}
	if a.autoPool != nil {
		a.autoPool.Close()
	}
}

// Automations is the App's automations, for tests.
func (a *App) Automations() *automations.Service { return a.automationService() }
