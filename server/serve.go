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
	"sync"
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
	// streamGrace is how long CSV imports stopped at the end of the drain
	// have to commit the rows they read before every request is cancelled.
	streamGrace = time.Second
)

// durationOr is d, or def when d is not set.
func durationOr(d, def time.Duration) time.Duration {
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
		ReadHeaderTimeout: durationOr(a.cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout),
		ReadTimeout:       durationOr(a.cfg.ReadTimeout, DefaultReadTimeout),
		WriteTimeout:      durationOr(a.cfg.WriteTimeout, DefaultWriteTimeout),
		IdleTimeout:       durationOr(a.cfg.IdleTimeout, DefaultIdleTimeout),
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

// shutdown stops srv in steps: stop accepting and let the requests running
// finish within the drain (--shutdown-drain), readiness saying "shutting
// down" meanwhile; then stop the CSV imports still reading (they write the
// rows they read and answer 503 with Retry-After and how many rows they
// inserted); then cancel every request still running (their context is
// cancelRequests'), which answer 503 with Retry-After; then close what
// ignored that. The caller closes the pool after it returns, with no handler
// left to use it.
func (a *App) shutdown(srv *http.Server, cancelRequests context.CancelFunc) error {
	a.draining.Store(true)
	if a.live != nil {
		a.live.EndStreams() // now, rather than hold the drain: their clients reconnect elsewhere
	}
	drain := durationOr(a.cfg.ShutdownDrain, DefaultShutdownDrain)
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
	// CSV imports first: they stop reading, commit the rows they hold and
	// answer with how many, which a cancelled context would not let them do.
	a.stopStreams()
	sctx, scancel := context.WithTimeout(context.Background(), streamGrace)
	err = srv.Shutdown(sctx)
	scancel()
	if err == nil {
		a.log.Info("shutdown: the stopped imports returned")
		return nil
	}
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
// that stalls for --stream-timeout ends.
//
// An import's body is read by a goroutine of its own (streamBody), so that
// the import can stop reading without touching the connection: when the
// shutdown stops streams, or the request is cancelled, the import's next read
// returns at once, even while the network read waits, and — the connection
// left alone, so its context stays alive — the import still commits the rows
// it has read and answers with how many.
func (a *App) streamDeadlines() echo.MiddlewareFunc {
	idle := durationOr(a.cfg.StreamTimeout, DefaultStreamTimeout)
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
			at := func() time.Time { return time.Now().Add(idle) }
			// Read here, not in timedOut: the body's goroutine calls it, and
			// reading the headers there raced with the handler's writes.
			rid, route := requestID(c), c.Path()
			_ = rc.SetReadDeadline(at())
			_ = rc.SetWriteDeadline(at())
			timedOut := func(err error, since time.Time) {
				if errors.Is(err, os.ErrDeadlineExceeded) && time.Since(since) >= idle {
					timeouts.Inc()
					a.log.Warn("stream_timeout: the client paused longer than the stream timeout; its connection is closed",
						slog.String("request_id", rid), slog.String("method", req.Method), slog.String("route", route),
						slog.Duration("stream_timeout", idle), slog.String("flag", "stream-timeout"))
				}
			}
			res.Writer = &streamWriter{ResponseWriter: res.Writer, timedOut: timedOut,
				extend: func() { _ = rc.SetWriteDeadline(at()) }}
			if req.Method != http.MethodPost {
				return next(c)
			}
			body := &streamBody{ReadCloser: req.Body, ctx: req.Context(), shutdown: a.streams, draining: &a.draining,
				timedOut: timedOut, extend: func() {
					_ = rc.SetReadDeadline(at())
					_ = rc.SetWriteDeadline(at())
				}}
			defer body.stop(func() {
				// A cut read cancels the connection's context: this connection
				// serves no other request.
				res.Header().Set(echo.HeaderConnection, "close")
				_ = rc.SetReadDeadline(time.Now())
			})
			req.Body = body
			return next(c)
		}
	}
}

// streamChunk is the size of a streamed body's reads.
const streamChunk = 32 << 10

// streamBody hands a request body to its reader through a goroutine that
// reads ahead by one chunk in two buffers it reuses, so the reader may stop
// waiting without the connection being cut (a cut read cancels the request's
// context in net/http). The goroutine starts at the first read.
type streamBody struct {
	io.ReadCloser
	ctx      context.Context // the request's
	shutdown context.Context // done when the shutdown stops streams
	draining *atomic.Bool
	extend   func()
	timedOut func(error, time.Time)

	chunks chan streamRead
	free   chan []byte
	done   chan struct{}

	mu       sync.Mutex
	reading  bool // the goroutine waits in a read of the body
	quitting bool // stop was called: no read starts any more

	cur  streamRead // what is left of the chunk being read
	held []byte     // cur's buffer, to give back once it is read
}

type streamRead struct {
	b   []byte
	err error
}

func (b *streamBody) start() {
	b.chunks, b.free, b.done = make(chan streamRead), make(chan []byte, 2), make(chan struct{})
	b.free <- make([]byte, streamChunk)
	b.free <- make([]byte, streamChunk)
	go func() {
		defer close(b.done)
		for buf := range b.free {
			b.mu.Lock()
			if b.quitting {
				b.mu.Unlock()
				return
			}
			b.reading = true
			b.mu.Unlock()
			b.extend()
			start := time.Now()
			n, err := b.ReadCloser.Read(buf)
			b.mu.Lock()
			b.reading = false
			b.mu.Unlock()
			if err != nil {
				b.timedOut(err, start)
			}
			b.chunks <- streamRead{buf[:n], err} // taken by Read, or by stop
			if err != nil {
				return
			}
		}
	}()
}

func (b *streamBody) Read(p []byte) (int, error) {
	if b.chunks == nil {
		b.start()
	}
	if len(b.cur.b) == 0 && b.cur.err == nil {
		if b.held != nil {
			b.free <- b.held[:cap(b.held)]
			b.held = nil
		}
		select {
		case b.cur = <-b.chunks:
			b.held = b.cur.b
		case <-b.shutdown.Done():
			return 0, b.stopped()
		case <-b.ctx.Done():
			return 0, b.stopped()
		}
	}
	n := copy(p, b.cur.b)
	b.cur.b = b.cur.b[n:]
	if len(b.cur.b) == 0 && b.cur.err != nil {
		return n, b.cur.err
	}
	return n, nil
}

// stop ends the reading goroutine once the handler is done with the body;
// cut, when the goroutine still waits in a network read, ends that read.
func (b *streamBody) stop(cut func()) {
	if b.chunks == nil {
		return
	}
	b.mu.Lock()
	b.quitting = true
	reading := b.reading
	b.mu.Unlock()
	if reading {
		cut()
	}
	close(b.free) // the goroutine's next wait for a buffer ends it
	for {
		select {
		case <-b.chunks: // a chunk nobody will read
		case <-b.done:
			return
		}
	}
}

// stopped is the error of a read the shutdown or the request's cancellation
// cut short. The shutdown's is also the coded 503 the client is answered
// with, with the rows the import inserted.
func (b *streamBody) stopped() error {
	if b.shutdown.Err() == nil && !(b.ctx.Err() != nil && b.draining.Load()) {
		return b.ctx.Err()
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
