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

// readyz says whether PostgreSQL and Redis both answer within a second.
func (a *App) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), time.Second)
	defer cancel()
	checks := map[string]string{"database": "ok", "redis": "ok"}
	status := http.StatusOK
	if err := a.pool.Ping(ctx); err != nil {
		checks["database"] = "unreachable"
		status = http.StatusServiceUnavailable
	}
	if err := a.redis.Do(ctx, a.redis.B().Ping().Build()).Error(); err != nil {
		checks["redis"] = "unreachable"
		status = http.StatusServiceUnavailable
	}
	if status != http.StatusOK {
		a.log.Warn("not ready", slog.Any("checks", checks))
	}
	return c.JSON(status, map[string]any{"status": map[bool]string{true: "ready", false: "not ready"}[status == http.StatusOK], "checks": checks})
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
