package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/airtable"
	"github.com/appdor/appdor/automations"
	"github.com/appdor/appdor/tenancy"
)

var statusOf = map[string]int{
	appdor.ENotFound:           http.StatusNotFound,
	appdor.EUnauthorized:       http.StatusUnauthorized,
	appdor.EForbidden:          http.StatusForbidden,
	appdor.EInvalid:            http.StatusBadRequest,
	appdor.EValidation:         http.StatusUnprocessableEntity,
	appdor.EConflict:           http.StatusConflict,
	appdor.ETooLarge:           http.StatusRequestEntityTooLarge,
	appdor.ERateLimited:        http.StatusTooManyRequests,
	appdor.EConcurrencyLimited: http.StatusTooManyRequests,
	appdor.EUnavailable:        http.StatusServiceUnavailable,
	appdor.EInternal:           http.StatusInternalServerError,

	// A realm's automation backlog is full (automations).
	automations.EBacklog: http.StatusTooManyRequests,

	// Browser sessions (tenancy).
	tenancy.ERealmRequired: http.StatusBadRequest,
	tenancy.ECSRFFailed:    http.StatusForbidden,
}

// StatusOf is the HTTP status for an error code.
func StatusOf(code string) int {
	if s, ok := statusOf[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

type errorBody struct {
	Error errorPayload `json:"error"`
}

type errorPayload struct {
	Code         string `json:"code"`
	Message      string `json:"message"`
	Details      any    `json:"details,omitempty"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
}

// fromEcho turns Echo's own errors (no route, wrong method, body too large)
// into coded errors.
func fromEcho(he *echo.HTTPError) *appdor.Error {
	switch he.Code {
	case http.StatusNotFound:
		return appdor.Errorf(appdor.ENotFound, "no such route")
	case http.StatusMethodNotAllowed:
		return &appdor.Error{Code: "method_not_allowed", Message: "this route does not take that method"}
	case http.StatusRequestEntityTooLarge:
		return appdor.Errorf(appdor.ETooLarge, "the request body is too large")
	case http.StatusUnauthorized:
		return appdor.Errorf(appdor.EUnauthorized, "a valid API token or session is required")
	case http.StatusForbidden:
		return appdor.Errorf(appdor.EForbidden, "forbidden")
	case http.StatusServiceUnavailable:
		return appdor.Errorf(appdor.EUnavailable, "unavailable")
	}
	if he.Code >= 400 && he.Code < 500 {
		return appdor.Errorf(appdor.EInvalid, "%v", he.Message)
	}
	return nil
}

// errorHandler is the one place an error becomes an HTTP response. Coded
// errors are shown to the client; anything else is logged once, with the
// request id, and shown as "internal error".
func (a *App) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var ae *appdor.Error
	var he *echo.HTTPError
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &he) && fromEcho(he) != nil:
		ae = fromEcho(he)
	case unavailable(err, a.draining.Load()) != nil:
		ae = unavailable(err, a.draining.Load())
	case errors.Is(err, context.Canceled) && c.Request().Context().Err() != nil:
		// The client went away; nobody is left to answer.
		a.log.Debug("request canceled by client", "request_id", requestID(c))
		c.Response().WriteHeader(499)
		return
	default:
		a.log.Error("internal error", slog.String("request_id", requestID(c)),
			slog.String("method", c.Request().Method), slog.String("route", c.Path()),
			slog.String("error", err.Error()))
		ae = appdor.Errorf(appdor.EInternal, "internal error (request %s)", requestID(c))
		ae.Details = appdor.DetailsOf(err)
	}
	if ae.Code == appdor.EUnavailable {
		a.logUnavailable(c, ae)
	}
	if airtable.IsPath(c.Request().URL.Path) {
		_ = airtable.WriteError(c, ae)
		return
	}
	status := StatusOf(ae.Code)
	if ae.Code == "method_not_allowed" {
		status = http.StatusMethodNotAllowed
	}
	p := errorPayload{Code: ae.Code, Message: ae.Message, Details: ae.Details}
	if ae.RetryAfter > 0 {
		c.Response().Header().Set("Retry-After", appdor.RetryAfterSeconds(ae.RetryAfter))
		p.RetryAfterMS = ae.RetryAfter.Milliseconds()
		if p.RetryAfterMS < 1 {
			p.RetryAfterMS = 1
		}
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(status)
		return
	}
	_ = c.JSON(status, errorBody{Error: p})
}

// logUnavailable logs a 503 — a pool connection not found within
// --acquire-timeout, or a statement past --statement-timeout — at most once a
// second, with the number of such answers since the last line. The pool's
// own signals are on /metrics (appdor_db_pool_*).
func (a *App) logUnavailable(c echo.Context, ae *appdor.Error) {
	n := a.unavailableCount.Add(1)
	now := time.Now().UnixNano()
	last := a.unavailableLast.Load()
	if now-last < int64(time.Second) || !a.unavailableLast.CompareAndSwap(last, now) {
		return
	}
	a.unavailableCount.Add(-n)
	a.log.Warn("unavailable", slog.String("request_id", requestID(c)), slog.String("route", c.Path()),
		slog.String("reason", ae.Message), slog.Int64("count", n),
		slog.String("settings", "acquire-timeout, statement-timeout, db-max-conns"))
}

// unavailable is the 503 for an error that says nothing about the request
// and everything about the moment: the connection to PostgreSQL went away
// (a restart, an administrator's pg_terminate_backend, a network cut, a
// refused dial when the pool reconnects), or the server cancelled the request
// because it is shutting down. The pool replaces broken connections by
// itself, so the client is told to retry shortly. nil for any other error.
func unavailable(err error, shuttingDown bool) *appdor.Error {
	if shuttingDown && errors.Is(err, context.Canceled) {
		return &appdor.Error{Code: appdor.EUnavailable, Message: "the server is shutting down; retry shortly", RetryAfter: time.Second}
	}
	if connectionLost(err) {
		return &appdor.Error{Code: appdor.EUnavailable, Message: "the database connection was lost; retry shortly", RetryAfter: time.Second}
	}
	return nil
}

// connectionLost says whether err means the connection to PostgreSQL, not
// the statement, failed.
func connectionLost(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08") // connection_exception
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) || errors.Is(err, pgconn.ErrConnClosed) {
		return true
	}
	// A network error or a cut stream: pgx hands some of them over bare
	// (reading a batch's results, for one). Body reads, the other source of
	// such errors, are turned into coded errors where they happen.
	var opErr *net.OpError
	return errors.As(err, &opErr) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
