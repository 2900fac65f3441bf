package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor"
)

// TestInternalErrorKeepsItsDetails: an internal error is logged with its
// text and answered "internal error" without it, but details attached with
// appdor.WithDetails (what a CSV import had written before it failed) reach
// the client.
func TestInternalErrorKeepsItsDetails(t *testing.T) {
	t.Parallel()
	var logged bytes.Buffer
	a := &App{log: slog.New(slog.NewJSONHandler(&logged, nil))}
	e := echo.New()
	rec := httptest.NewRecorder()
	c := e.NewContext(httptest.NewRequest("POST", "/api/v1/tables/x/csv", nil), rec)

	a.errorHandler(appdor.WithDetails(errors.New("database: connection reset"), map[string]int{"inserted": 1000}), c)

	require.Equal(t, http.StatusInternalServerError, rec.Code)
	var body struct {
		Error struct {
			Code    string         `json:"code"`
			Message string         `json:"message"`
			Details map[string]int `json:"details"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	require.Equal(t, "internal", body.Error.Code)
	require.NotContains(t, body.Error.Message, "connection reset")
	require.Equal(t, 1000, body.Error.Details["inserted"])
	require.Contains(t, logged.String(), "connection reset", "logged once, in full")
}
