// Package appdor holds the vocabulary every part of Appdor shares: the coded
// error that handlers return and the server turns into one JSON shape.
//
// It imports nothing of Appdor's own, so every package may import it.
package appdor

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Error codes. A client switches on these; they never change meaning.
const (
	ENotFound           = "not_found"
	EUnauthorized       = "unauthorized"
	EForbidden          = "forbidden"
	EInvalid            = "invalid_request"
	EValidation         = "validation_failed"
	EConflict           = "conflict"
	ETooLarge           = "too_large"
	ERateLimited        = "rate_limited"
	EConcurrencyLimited = "concurrency_limited"
	EUnavailable        = "unavailable"
	EInternal           = "internal"
)

// Error is an error a client may see. Anything that is not an *Error reaches
// the client as "internal error" and is logged with the request id.
type Error struct {
	Code    string
	Message string
	// Details carries structured context, such as the per-cell messages of a
	// validation failure. It is sent to the client as is.
	Details any
	// RetryAfter, when set, becomes the Retry-After header (whole seconds,
	// rounded up).
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf returns an *Error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err, or EInternal when err is not an *Error.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EInternal
}

// WithDetails attaches details a client may see to an error that is not
// coded (an internal one): the server still logs err and answers "internal
// error", and sends the details along — what a long operation, such as a
// CSV import, had done for good before it failed.
func WithDetails(err error, details any) error {
	if err == nil {
		return nil
	}
	return &detailedError{err: err, details: details}
}

type detailedError struct {
	err     error
	details any
}

func (e *detailedError) Error() string { return e.err.Error() }
func (e *detailedError) Unwrap() error { return e.err }

// DetailsOf returns the details WithDetails attached to err, or nil.
func DetailsOf(err error) any {
	var d *detailedError
	if errors.As(err, &d) {
		return d.details
	}
	return nil
}

// RetryAfterSeconds renders d for the Retry-After header: whole seconds,
// rounded up, never 0. Every refusal's Retry-After goes through it.
func RetryAfterSeconds(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(s, 1), 10)
}
