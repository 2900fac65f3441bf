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

func ok(ec echo.Context) error { return ec.String(http.StatusOK, "ok") }

func TestMiddlewareRefusesWithAPreEncodedAnswer(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, func(cfg *Config) { cfg.Seats, cfg.QueueLength = 1, 1 })
	hold := now(t, c, "a")
	out := make(chan grant, 1)
	ask(c, "a", Interactive, out)
	awaitQueued(t, c, "a", Interactive, 1)
	e := router(c, ok)

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
	require.Equal(t, ReasonQueueFull, body.Error.Details["reason"])
	require.Equal(t, int64(1000), body.Error.RetryAfterMS)
	hold()
	g := next(t, out)
	require.NoError(t, g.err)
	g.release()
	require.Equal(t, http.StatusOK, serve(e, request("a")).Code)
}

func TestMiddlewareReleasesOnError(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, nil)
	e := router(c, func(ec echo.Context) error { return errors.New("boom") })
	require.Equal(t, http.StatusInternalServerError, serve(e, request("a")).Code)
	require.Equal(t, 0, c.InUse(Interactive))
}

func TestMiddlewareReleasesOnPanic(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, nil)
	e := router(c, func(ec echo.Context) error {
		require.Equal(t, 1, c.InUse(Interactive))
		panic("boom")
	})
	for range 10 { // more than the seats and the queue: a leak would show as a 429
		require.Equal(t, http.StatusInternalServerError, serve(e, request("a")).Code)
	}
	require.Equal(t, 0, c.InUse(Interactive))
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
	require.Equal(t, 1, c.InUse(Interactive))
	cancel()
	<-done
	require.Equal(t, 0, c.InUse(Interactive))
}

// A handler that goes on as background work gives its request's seat back
// with Yield, and takes background seats for its batches.
func TestYieldGivesTheRequestsSeatBack(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, func(cfg *Config) { cfg.Seats = 1 })
	e := router(c, func(ec echo.Context) error {
		ctx := ec.Request().Context()
		require.Equal(t, 1, c.InUse(Interactive))
		Yield(ctx)
		require.Equal(t, 0, c.InUse(Interactive))
		other := now(t, c, "b") // the seat is free for anyone
		other()
		rel, err := c.Acquire(ctx, "a", Background)
		if err != nil {
			return err
		}
		require.Equal(t, 1, c.InUse(Background))
		rel()
		return ec.String(http.StatusOK, "ok")
	})
	require.Equal(t, http.StatusOK, serve(e, request("a")).Code)
	require.Equal(t, 0, c.InUse(Interactive))
	Yield(context.Background()) // outside a request: nothing
}

func TestMiddlewarePassesUnkeyedRequests(t *testing.T) {
	t.Parallel()
	c, _, _ := setup(t, nil)
	e := router(c, ok)
	require.Equal(t, http.StatusOK, serve(e, request("")).Code)
	require.Equal(t, 0, c.Active())
}

const benchRealm = "4b1c1f1e-8d6a-4f0e-9a53-0d3f1f0c2a11"

// BenchmarkAcquireRelease is the controller's own cost on an unloaded request.
func BenchmarkAcquireRelease(b *testing.B) {
	c := New(Config{Seats: 2}, nil)
	ctx := context.Background()
	for b.Loop() {
		rel, err := c.Acquire(ctx, benchRealm, Interactive)
		if err != nil {
			b.Fatal(err)
		}
		rel()
	}
}

// BenchmarkAcquireReleaseParallel: one realm at once, on every core.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	c := New(Config{Seats: 1 << 20, BackloggedSeats: 1 << 20}, nil)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if rel, err := c.Acquire(ctx, benchRealm, Interactive); err == nil {
				rel()
			}
		}
	})
}

// BenchmarkMiddleware is one request through the middleware alone, admitted
// and refused (queue full), against the bare handler.
func BenchmarkMiddleware(b *testing.B) {
	noContent := func(ec echo.Context) error { return ec.NoContent(http.StatusNoContent) }
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
		e.Any("/*", noContent)
		run(b, e)
	})
	b.Run("admitted", func(b *testing.B) {
		run(b, router(New(Config{Seats: 2}, nil), noContent))
	})
	b.Run("refused", func(b *testing.B) {
		c := New(Config{Seats: 1, QueueLength: 1, WaitBound: 1 << 40}, nil)
		hold, _ := c.Acquire(context.Background(), "a", Interactive)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { // fills a's queue until the benchmark ends
			defer close(done)
			c.Acquire(ctx, "a", Interactive)
		}()
		for c.Queued("a", Interactive) < 1 {
		}
		run(b, router(c, noContent))
		cancel()
		<-done
		hold()
	})
}
