package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
)

// The UI's catch-all must leave every other route alone.
func TestUIDoesNotShadowRoutes(t *testing.T) {
	t.Parallel()
	a := &App{}
	e := echo.New()
	e.GET("/healthz", func(c echo.Context) error { return c.String(http.StatusOK, "healthz") })
	e.GET("/readyz", func(c echo.Context) error { return c.String(http.StatusOK, "readyz") })
	e.GET("/metrics", func(c echo.Context) error { return c.String(http.StatusOK, "metrics") })
	api := e.Group("/api/v1", func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { return echo.ErrUnauthorized }
	})
	api.GET("/apps", func(c echo.Context) error { return c.String(http.StatusOK, "apps") })
	e.GET("/api/v1/open", func(c echo.Context) error { return c.String(http.StatusOK, "open") })
	a.mountUI(e)

	do := func(method, path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		return rec
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/api/v1/open"} {
		rec := do(http.MethodGet, p)
		require.Equal(t, http.StatusOK, rec.Code, p)
		require.Equal(t, strings.Trim(p[strings.LastIndex(p, "/"):], "/"), rec.Body.String(), p)
	}
	require.Equal(t, http.StatusUnauthorized, do(http.MethodGet, "/api/v1/apps").Code)
	require.Equal(t, http.StatusNotFound, do(http.MethodGet, "/api/v2/nothing").Code)
	require.Equal(t, http.StatusNotFound, do(http.MethodPost, "/api/other").Code)

	for _, p := range []string{"/", "/t/abc", "/login"} {
		rec := do(http.MethodGet, p)
		require.Equal(t, http.StatusOK, rec.Code, p)
		require.Contains(t, rec.Body.String(), `<div id="root">`, p)
		require.NotEmpty(t, rec.Header().Get("Content-Security-Policy"), p)
	}
	require.Equal(t, http.StatusMethodNotAllowed, do(http.MethodPost, "/t/abc").Code)
}
