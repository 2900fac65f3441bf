package server

import (
	"context"

	"github.com/appdor/appdor/live"
)

// liveHub returns the App's live-update hub, made on first use (the router
// test builds the routes with no Redis).
func (a *App) liveHub() *live.Hub {
	if a.live == nil {
		cfg := a.cfg.Live
		cfg.Log = a.log
		a.live = live.New(a.redis, cfg, a.metrics)
	}
	return a.live
}

// startLive publishes this replica's changes and subscribes to every
// replica's, until the App closes.
func (a *App) startLive(ctx context.Context) {
	a.liveHub().Start(context.WithoutCancel(ctx))
}

// stopLive ends every stream: their clients reconnect, to another replica
// or to this one once it is back.
func (a *App) stopLive() {
	if a.live != nil {
		a.live.Close()
	}
}

// Live is the App's live-update hub, for tests.
func (a *App) Live() *live.Hub { return a.liveHub() }
