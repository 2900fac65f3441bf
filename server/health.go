package server

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor/tenancy"
)

// healthz says the process is up; it touches nothing else.
func (a *App) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz says whether this replica should get traffic: 200 "ready" when
// PostgreSQL and Redis answer within a second; 200 "degraded" when only Redis
// does not (the limiter fails open and the rest works, so a load balancer
// should keep sending requests); 503 "not ready" when PostgreSQL does not, and
// 503 "shutting down" once a shutdown has begun. The body names what is down.
func (a *App) readyz(c echo.Context) error {
	if a.draining.Load() {
		return c.JSON(http.StatusServiceUnavailable, map[string]any{"status": "shutting down"})
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), time.Second)
	defer cancel()
	checks := map[string]string{"database": "ok", "redis": "ok"}
	redisErr := make(chan error, 1)
	go func() { redisErr <- a.pingRedis(ctx) }()
	dbErr := a.pool.Ping(ctx)
	if dbErr != nil {
		checks["database"] = "unreachable"
	}
	if <-redisErr != nil {
		checks["redis"] = "unreachable"
	}
	status, code := "ready", http.StatusOK
	switch {
	case dbErr != nil:
		status, code = "not ready", http.StatusServiceUnavailable
	case checks["redis"] != "ok":
		status = "degraded"
	}
	// Redis's outages are the limiter's to log; the database's are logged
	// here, once when they start and once when they end.
	if down := dbErr != nil; a.databaseDown.Swap(down) != down {
		if down {
			a.log.Warn("not ready: the database does not answer", slog.String("error", dbErr.Error()))
		} else {
			a.log.Info("ready: the database answers again")
		}
	}
	return c.JSON(code, map[string]any{"status": status, "checks": checks})
}

// accessLog writes one JSON line per request with its request id and realm.
func (a *App) accessLog(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			// Answer now, so the status logged is the status sent.
			c.Error(err)
		}
		attrs := []slog.Attr{
			slog.String("request_id", requestID(c)),
			slog.String("method", c.Request().Method),
			slog.String("route", c.Path()),
			slog.Int("status", c.Response().Status),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
		}
		if realm := realmOf(c); realm != "" {
			attrs = append(attrs, slog.String("realm", realm))
		}
		a.log.LogAttrs(c.Request().Context(), slog.LevelInfo, "request", attrs...)
		return nil
	}
}

func requestID(c echo.Context) string {
	return c.Response().Header().Get(echo.HeaderXRequestID)
}

func realmOf(c echo.Context) string {
	if p := tenancy.PrincipalOf(c); p != nil {
		return p.RealmID.String()
	}
	return ""
}
