package server

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor/web"
)

// mountUI serves the browser grid at / with the SPA fallback. Echo matches
// static and parameter routes before this catch-all, so /healthz, /readyz,
// /metrics and every API route keep their handlers; an unknown path under
// /api stays a coded JSON 404 instead of becoming index.html.
func (a *App) mountUI(e *echo.Echo) {
	ui := web.Handler()
	a.ui = ui
	serve := func(c echo.Context) error {
		p := c.Request().URL.Path
		if p == "/api" || strings.HasPrefix(p, "/api/") {
			return echo.ErrNotFound
		}
		ui.ServeHTTP(c.Response(), c.Request())
		return nil
	}
	e.GET("/*", serve)
	e.HEAD("/*", serve)
	e.Match([]string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}, "/*", func(c echo.Context) error {
		p := c.Request().URL.Path
		if p == "/api" || strings.HasPrefix(p, "/api/") {
			return echo.ErrNotFound
		}
		return echo.ErrMethodNotAllowed
	})
}
