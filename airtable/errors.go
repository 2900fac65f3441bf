package airtable

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
)

// Airtable's error types, as its clients switch on them. An *appdor.Error
// whose Code is one of these is answered with its status; any other code
// is translated by its Appdor meaning (typeOf).
const (
	TNotFound              = "NOT_FOUND"
	TAuthenticationNeeded  = "AUTHENTICATION_REQUIRED"
	TPermissionsOrNotFound = "INVALID_PERMISSIONS_OR_MODEL_NOT_FOUND"
	TInvalidRequest        = "INVALID_REQUEST_UNKNOWN"
	TInvalidJSON           = "INVALID_JSON_REQUEST_BODY"
	TInvalidRecords        = "INVALID_RECORDS"
	TInvalidValue          = "INVALID_VALUE_FOR_COLUMN"
	TUnknownField          = "UNKNOWN_FIELD_NAME"
	TInvalidChoice         = "INVALID_MULTIPLE_CHOICE_OPTIONS"
	TInvalidFormula        = "INVALID_FILTER_BY_FORMULA"
	TInvalidSort           = "INVALID_SORT_PARAMETER"
	TInvalidOffset         = "INVALID_OFFSET_VALUE"
	TInvalidPageSize       = "INVALID_PAGE_SIZE_PARAMETER"
	TInvalidMaxRecords     = "INVALID_MAX_RECORDS_PARAMETER"
	TCellFormat            = "INVALID_CELL_FORMAT"
	TTooLarge              = "REQUEST_TOO_LARGE"
	TRateLimited           = "RATE_LIMIT_REACHED"
	TConflict              = "ROW_CONFLICT"
	TServerError           = "SERVER_ERROR"
	TUnavailable           = "SERVICE_UNAVAILABLE"
	TMethodNotAllowed      = "METHOD_NOT_ALLOWED"
)

var statusOfType = map[string]int{
	TNotFound:              http.StatusNotFound,
	TAuthenticationNeeded:  http.StatusUnauthorized,
	TPermissionsOrNotFound: http.StatusForbidden,
	TInvalidRequest:        http.StatusUnprocessableEntity,
	TInvalidJSON:           http.StatusBadRequest,
	TInvalidRecords:        http.StatusUnprocessableEntity,
	TInvalidValue:          http.StatusUnprocessableEntity,
	TUnknownField:          http.StatusUnprocessableEntity,
	TInvalidChoice:         http.StatusUnprocessableEntity,
	TInvalidFormula:        http.StatusUnprocessableEntity,
	TInvalidSort:           http.StatusUnprocessableEntity,
	TInvalidOffset:         http.StatusUnprocessableEntity,
	TInvalidPageSize:       http.StatusUnprocessableEntity,
	TInvalidMaxRecords:     http.StatusUnprocessableEntity,
	TCellFormat:            http.StatusUnprocessableEntity,
	TTooLarge:              http.StatusRequestEntityTooLarge,
	TRateLimited:           http.StatusTooManyRequests,
	TConflict:              http.StatusConflict,
	TServerError:           http.StatusInternalServerError,
	TUnavailable:           http.StatusServiceUnavailable,
	TMethodNotAllowed:      http.StatusMethodNotAllowed,
}

// typeOf is the Airtable type of an Appdor error code.
var typeOf = map[string]string{
	appdor.ENotFound:           TNotFound,
	appdor.EUnauthorized:       TAuthenticationNeeded,
	appdor.EForbidden:          TPermissionsOrNotFound,
	appdor.EInvalid:            TInvalidRequest,
	appdor.EValidation:         TInvalidValue,
	appdor.EConflict:           TConflict,
	appdor.ETooLarge:           TTooLarge,
	appdor.ERateLimited:        TRateLimited,
	appdor.EConcurrencyLimited: TRateLimited,
	appdor.EUnavailable:        TUnavailable,
	appdor.EInternal:           TServerError,
	"method_not_allowed":       TMethodNotAllowed,
	"automation_backlog":       TRateLimited,
}

// fail is an error in Airtable's terms: its type and message.
func fail(typ, format string, args ...any) *appdor.Error {
	return &appdor.Error{Code: typ, Message: fmt.Sprintf(format, args...)}
}

// Body is an error answer as Airtable sends it.
type Body struct {
	Error BodyError `json:"error"`
}

// BodyError is the inside of Body.
type BodyError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// IsPath tells whether an URL path is this API's, whose errors the server
// answers with WriteError.
func IsPath(path string) bool {
	return path == Prefix || len(path) > len(Prefix) && path[:len(Prefix)+1] == Prefix+"/"
}

// Prefix is where the API is mounted.
const Prefix = "/v0"

// WriteError answers e in Airtable's shape, {"error":{"type","message"}},
// with the status Airtable gives its type, and Retry-After on a refusal that
// says when to come back. The server's error handler calls it for every
// error of a path under Prefix, the limiter's and the admission
// controller's refusals among them.
func WriteError(c echo.Context, e *appdor.Error) error {
	typ := e.Code
	if t, ok := typeOf[typ]; ok {
		typ = t
	}
	status, ok := statusOfType[typ]
	if !ok {
		typ, status = TServerError, http.StatusInternalServerError
	}
	msg := e.Message
	switch typ {
	case TRateLimited:
		msg = "Rate limit exceeded. Please try again later: " + e.Message
	case TAuthenticationNeeded:
		msg = "Authentication required: send Authorization: Bearer with an Appdor API token"
	}
	if e.RetryAfter > 0 {
		c.Response().Header().Set("Retry-After", appdor.RetryAfterSeconds(e.RetryAfter))
	}
	if c.Request().Method == http.MethodHead {
		return c.NoContent(status)
	}
	return c.JSON(status, Body{Error: BodyError{Type: typ, Message: msg}})
}

// RefusalBody is the pre-encoded answer of a request the admission
// controller refuses, in Airtable's shape; the controller sets Retry-After.
func RefusalBody(reason string) []byte {
	return []byte(`{"error":{"type":"` + TRateLimited + `","message":"Rate limit exceeded. Please try again later: this realm has too much work in flight (` + reason + `)"}}` + "\n")
}

// asError returns err's *appdor.Error, or nil.
func asError(err error) *appdor.Error {
	var ae *appdor.Error
	if errors.As(err, &ae) {
		return ae
	}
	return nil
}
