package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/appdor/appdor"
)

// Defaults of the HTTP server's time bounds (Config).
const (
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 10 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultStreamTimeout     = 30 * time.Second
	DefaultShutdownDrain     = 8 * time.Second
	// cancelGrace is how long requests cancelled at the end of the drain
	// have to return before their connections are closed under them.
	cancelGrace = 5 * time.Second
)

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// httpServer is the http.Server of ServeListener: every phase of a request
// bounded in time, so a slow client cannot hold a goroutine, a connection or
// a seat for long, and requests that run under base, which the shutdown
// cancels once its drain is over.
func (a *App) httpServer(base context.Context) *http.Server {
	return &http.Server{
		Handler:           a.countInFlight(a.echo),
		ReadHeaderTimeout: orDefault(a.cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout),
		ReadTimeout:       orDefault(a.cfg.ReadTimeout, DefaultReadTimeout),
		WriteTimeout:      orDefault(a.cfg.WriteTimeout, DefaultWriteTimeout),
		IdleTimeout:       orDefault(a.cfg.IdleTimeout, DefaultIdleTimeout),
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return base },
	}
}

func (a *App) countInFlight(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.inFlight.Add(1)
		defer a.inFlight.Add(-1)
		next.ServeHTTP(w, r)
	})
}

// shutdown stops srv in three steps: stop accepting and let the requests
// running finish within the drain (--shutdown-drain), readiness saying
// "shutting down" meanwhile; then cancel those still running (their context
// is cancelRequests'), which answer 503 with Retry-After — a CSV import stops
// at its next read or batch, its committed batches stay; then close what
// ignored that. The caller closes the pool after it returns, with no handler
// left to use it.
func (a *App) shutdown(srv *http.Server, cancelRequests context.CancelFunc) error {
	a.draining.Store(true)
	drain := orDefault(a.cfg.ShutdownDrain, DefaultShutdownDrain)
	a.log.Info("shutting down: draining", slog.Duration("shutdown_drain", drain), slog.Int64("in_flight", a.inFlight.Load()))
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	err := srv.Shutdown(ctx)
	if err == nil {
		a.log.Info("shutdown: drained")
		return nil
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	a.log.Warn("shutdown_drain: requests still running when the drain ended; cancelling them",
		slog.Int64("in_flight", a.inFlight.Load()), slog.Duration("shutdown_drain", drain), slog.String("flag", "shutdown-drain"))
	cancelRequests()
	gctx, gcancel := context.WithTimeout(context.Background(), cancelGrace)
	defer gcancel()
	if err := srv.Shutdown(gctx); err != nil {
		a.log.Warn("shutdown: requests did not return once cancelled; closing their connections",
			slog.Int64("in_flight", a.inFlight.Load()))
		return srv.Close()
	}
	a.log.Info("shutdown: the cancelled requests returned")
	return nil
}

// streamedCSV says whether a route streams a CSV body (import) or response
// (export): those may take longer than --read-timeout or --write-timeout and
// are bounded by --stream-timeout between reads or writes instead.
func streamedCSV(c echo.Context) bool {
	return strings.HasSuffix(c.Path(), "/tables/:table/csv")
}

// streamDeadlines moves a streamed CSV route's read and write deadlines
// forward at each read of its body and each write of its response, so a
// transfer of any length may go on while the client keeps it moving, and one
// that stalls for --stream-timeout ends. Once the request is cancelled (the
// client went away, or the shutdown's drain is over) the body's next read
// returns at once, even a read waiting on the network.
func (a *App) streamDeadlines() echo.MiddlewareFunc {
	idle := orDefault(a.cfg.StreamTimeout, DefaultStreamTimeout)
	timeouts := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "appdor_stream_timeouts_total",
		Help: "CSV imports and exports cut because the client paused longer than --stream-timeout.",
	})
	a.metrics.MustRegister(timeouts)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if !streamedCSV(c) {
				return next(c)
			}
			req, res := c.Request(), c.Response()
			rc := http.NewResponseController(res.Writer)
			extend := func() {
				at := time.Now().Add(idle)
				_ = rc.SetReadDeadline(at)
				_ = rc.SetWriteDeadline(at)
			}
			extend()
			ctx := req.Context()
			stop := context.AfterFunc(ctx, func() { _ = rc.SetReadDeadline(time.Now()) })
			defer stop()
			timedOut := func(err error, since time.Time) {
				if errors.Is(err, os.ErrDeadlineExceeded) && time.Since(since) >= idle {
					timeouts.Inc()
					a.log.Warn("stream_timeout: the client paused longer than the stream timeout; its connection is closed",
						slog.String("request_id", requestID(c)), slog.String("method", req.Method), slog.String("route", c.Path()),
						slog.Duration("stream_timeout", idle), slog.String("flag", "stream-timeout"))
				}
			}
			req.Body = &streamBody{ReadCloser: req.Body, ctx: ctx, draining: &a.draining, extend: extend, timedOut: timedOut}
			res.Writer = &streamWriter{ResponseWriter: res.Writer, timedOut: timedOut,
				extend: func() { _ = rc.SetWriteDeadline(time.Now().Add(idle)) }}
			return next(c)
		}
	}
}

type streamBody struct {
	io.ReadCloser
	ctx      context.Context // the request's
	draining *atomic.Bool
	extend   func()
	timedOut func(err error, since time.Time)
}

func (b *streamBody) Read(p []byte) (int, error) {
	if err := b.stopped(); err != nil {
		return 0, err
	}
	b.extend()
	start := time.Now()
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.timedOut(err, start)
		if serr := b.stopped(); serr != nil {
			return n, serr
		}
	}
	return n, err
}

// stopped is the error of a read the request's cancellation cut short, nil
// while it is not cancelled. During a shutdown it is also the coded 503 the
// client is answered with.
func (b *streamBody) stopped() error {
	err := b.ctx.Err()
	if err == nil || !b.draining.Load() {
		return err
	}
	return shutdownCanceled{coded: &appdor.Error{Code: appdor.EUnavailable,
		Message: "the server is shutting down; send the rest again", RetryAfter: time.Second}}
}

// shutdownCanceled is a cancellation (errors.Is context.Canceled) that is
// also a coded error (errors.As *appdor.Error).
type shutdownCanceled struct{ coded *appdor.Error }

func (e shutdownCanceled) Error() string   { return e.coded.Error() }
func (e shutdownCanceled) Unwrap() []error { return []error{e.coded, context.Canceled} }

type streamWriter struct {
	http.ResponseWriter
	extend   func()
	timedOut func(err error, since time.Time)
}

func (w *streamWriter) Write(p []byte) (int, error) {
	w.extend()
	start := time.Now()
	n, err := w.ResponseWriter.Write(p)
	if err != nil {
		w.timedOut(err, start)
	}
	return n, err
}

func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
