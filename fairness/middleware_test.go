package fairness

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/stretchr/testify/require"
)

// router is an Echo with Recover outside the controller, as in the server,
// and the realm taken from the X-Realm header.
func router(c *Controller, h echo.HandlerFunc) *echo.Echo {
	e := echo.New()
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisablePrintStack: true}))
	e.Use(c.Middleware(func(ec echo.Context) string { return ec.Request().Header.Get("X-Realm") }))
	e.Any("/*", h)
	return e
}

func serve(e *echo.Echo, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

func request(realm string) *http.Request {
	req := httptest.NewRequest(http.MethodGet, "/x", nil)
	req.Header.Set("X-Realm", realm)
	return req
}

func TestMiddlewareRefusesWithAPreEncodedAnswer(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, func(cfg *Config) { cfg.Hold = -1 })
	a := admitN(t, c, "a", 3)
	e := router(c, func(ec echo.Context) error { return ec.String(http.StatusOK, "ok") })

	rec := serve(e, request("a"))
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	require.Equal(t, "1", rec.Header().Get("Retry-After"))
	require.Equal(t, echo.MIMEApplicationJSON, rec.Header().Get(echo.HeaderContentType))
	var body struct {
		Error struct {
			Code         string            `json:"code"`
			Message      string            `json:"message"`
			Details      map[string]string `json:"details"`
			RetryAfterMS int64             `json:"retry_after_ms"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	require.Equal(t, "concurrency_limited", body.Error.Code)
	require.Equal(t, ReasonRealmLimit, body.Error.Details["reason"])
	require.Equal(t, int64(1000), body.Error.RetryAfterMS)

	// Another realm is admitted, from the reserve.
	require.Equal(t, http.StatusOK, serve(e, request("b")).Code)
	releaseAll(a)
	require.Equal(t, http.StatusOK, serve(e, request("a")).Code)
	require.Equal(t, 0, c.Total())
}

func TestMiddlewareHoldsAHotRealmUntilTheClientLeaves(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, func(cfg *Config) { cfg.Hold = 1 << 40; cfg.HotAfter = 1 })
	a := admitN(t, c, "a", 3)
	e := router(c, func(ec echo.Context) error { return ec.String(http.StatusOK, "ok") })
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the client has gone: the (very long) hold ends at once
	rec := serve(e, request("a").WithContext(ctx))
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	require.Equal(t, 1.0, value(c.m.held))
	releaseAll(a)
}

func TestMiddlewareReleasesOnError(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, nil)
	e := router(c, func(ec echo.Context) error { return errors.New("boom") })
	require.Equal(t, http.StatusInternalServerError, serve(e, request("a")).Code)
	require.Equal(t, 0, c.Total())
}

func TestMiddlewareReleasesOnPanic(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, nil)
	e := router(c, func(ec echo.Context) error {
		require.Equal(t, 1, c.Inflight("a"))
		panic("boom")
	})
	for range 5 { // more than the realm's share: a leak would show as a 429
		require.Equal(t, http.StatusInternalServerError, serve(e, request("a")).Code)
	}
	require.Equal(t, 0, c.Total())
}

func TestMiddlewareReleasesWhenTheClientGoesAway(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, nil)
	started := make(chan struct{})
	e := router(c, func(ec echo.Context) error {
		close(started)
		<-ec.Request().Context().Done() // a query canceled with its request
		return ec.Request().Context().Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		serve(e, request("a").WithContext(ctx))
	}()
	<-started
	require.Equal(t, 1, c.Inflight("a"))
	cancel()
	<-done
	require.Equal(t, 0, c.Total())
	require.Equal(t, 0, c.Inflight("a"))
}

func TestMiddlewareMarksTheRequestForReentrantAcquire(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, nil)
	a := admitN(t, c, "a", 1) // with the request, the realm's whole share
	e := router(c, func(ec echo.Context) error {
		rel, err := c.Acquire(ec.Request().Context(), "a", ClassImport)
		if err != nil {
			return err
		}
		defer rel()
		return ec.String(http.StatusOK, "ok")
	})
	require.Equal(t, http.StatusOK, serve(e, request("a")).Code)
	require.Equal(t, 1, c.Total())
	releaseAll(a)
}

func TestMiddlewarePassesUnkeyedRequests(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, nil)
	e := router(c, func(ec echo.Context) error { return ec.String(http.StatusOK, "ok") })
	require.Equal(t, http.StatusOK, serve(e, request("")).Code)
	require.Equal(t, 0, c.Active())
}

// BenchmarkAdmitRelease is the controller's own cost on an unloaded request.
func BenchmarkAdmitRelease(b *testing.B) {
	c := New(Config{Capacity: 2, Reserve: 1}, nil)
	for b.Loop() {
		rel, ref := c.Admit("4b1c1f1e-8d6a-4f0e-9a53-0d3f1f0c2a11", ClassRequest)
		if ref != nil {
			b.Fatal("refused")
		}
		rel()
	}
}

// BenchmarkAdmitReleaseParallel: many realms at once, on every core.
func BenchmarkAdmitReleaseParallel(b *testing.B) {
	c := New(Config{Capacity: 1 << 20, Reserve: 1}, nil)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rel, ref := c.Admit("4b1c1f1e-8d6a-4f0e-9a53-0d3f1f0c2a11", ClassRequest)
			if ref == nil {
				rel()
			}
		}
	})
}

// BenchmarkMiddleware is one request through the middleware alone, admitted
// and refused, against the bare handler.
func BenchmarkMiddleware(b *testing.B) {
	ok := func(ec echo.Context) error { return ec.NoContent(http.StatusNoContent) }
	run := func(b *testing.B, e *echo.Echo) {
		req := request("a")
		rec := httptest.NewRecorder()
		for b.Loop() {
			rec.Body.Reset()
			e.ServeHTTP(rec, req)
		}
	}
	b.Run("bare", func(b *testing.B) {
		e := echo.New()
		e.Any("/*", ok)
		run(b, e)
	})
	b.Run("admitted", func(b *testing.B) {
		run(b, router(New(Config{Capacity: 2, Reserve: 1}, nil), ok))
	})
	b.Run("refused", func(b *testing.B) {
		c := New(Config{Capacity: 2, Reserve: 1, Hold: -1}, nil)
		c.Admit("a", ClassRequest)
		c.Admit("a", ClassRequest)
		run(b, router(c, ok))
	})
}

// BenchmarkRefusalEncoding compares the pre-encoded refusal with encoding the
// same body per refusal, as the server's error handler would.
func BenchmarkRefusalEncoding(b *testing.B) {
	ok := func(ec echo.Context) error { return ec.NoContent(http.StatusNoContent) }
	c := New(Config{Capacity: 2, Reserve: 1, Hold: -1}, nil)
	c.Admit("a", ClassRequest)
	c.Admit("a", ClassRequest)
	encoding := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(ec echo.Context) error {
			rel, ref := c.Admit("a", ClassRequest)
			if ref != nil {
				e := c.refusalError(ref)
				ec.Response().Header().Set("Retry-After", "1")
				return ec.JSON(http.StatusTooManyRequests, map[string]any{"error": map[string]any{
					"code": e.Code, "message": e.Message, "details": e.Details, "retry_after_ms": e.RetryAfter.Milliseconds()}})
			}
			defer rel()
			return next(ec)
		}
	}
	run := func(b *testing.B, e *echo.Echo) {
		req := request("a")
		rec := httptest.NewRecorder()
		for b.Loop() {
			rec.Body.Reset()
			e.ServeHTTP(rec, req)
		}
	}
	b.Run("pre-encoded", func(b *testing.B) { run(b, router(c, ok)) })
	b.Run("encoded", func(b *testing.B) {
		e := echo.New()
		e.Use(encoding)
		e.Any("/*", ok)
		run(b, e)
	})
}
