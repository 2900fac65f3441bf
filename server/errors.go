package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
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
	}
	if ae.Code == appdor.EUnavailable {
		a.logUnavailable(c, ae)
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
