// Package airtable serves Airtable's REST API (its Web API, v0) on Appdor's
// tables, so that scripts and clients written for Airtable work against
// Appdor by changing their base URL and token.
//
// A base is an Appdor app, addressed by its id; a table is addressed by id
// or by name; a record id is an Appdor row id; fields are keyed by name
// (or by id, with returnFieldsByFieldId). Every route runs behind the same
// gates as the grid API — authentication, the rate limiter, the admission
// controller — and reaches rows only through grid, so row-level security
// stands behind each statement. filterByFormula is compiled to SQL by
// package formula.
package airtable

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/grid"
	"github.com/appdor/appdor/tenancy"
)

// MaxRecordsPerWrite is how many records one create, update or delete
// takes, as Airtable allows.
const MaxRecordsPerWrite = 10

// MaxPageSize is the most records one page holds, and its default.
const MaxPageSize = 100

// Handler serves the API on grid's tables.
type Handler struct {
	grid *grid.Handler
}

// New returns a Handler on g.
func New(g *grid.Handler) *Handler { return &Handler{grid: g} }

// Routes registers the API on g, which the server has put behind
// authentication, the rate limiter and the admission controller.
func (h *Handler) Routes(g *echo.Group) {
	read := tenancy.Require(tenancy.RoleViewer)
	write := tenancy.Require(tenancy.RoleEditor)

	g.GET("/meta/bases", h.listBases, read)
	g.GET("/meta/bases/:base/tables", h.listTables, read)
	g.GET("/:base/:table", h.listRecords, read)
	g.POST("/:base/:table/listRecords", h.listRecordsPost, read)
	g.GET("/:base/:table/:record", h.getRecord, read)
	g.POST("/:base/:table", h.createRecords, write)
	g.PATCH("/:base/:table", h.updateRecords(false), write)
	g.PUT("/:base/:table", h.updateRecords(true), write)
	g.PATCH("/:base/:table/:record", h.updateRecord(false), write)
	g.PUT("/:base/:table/:record", h.updateRecord(true), write)
	g.DELETE("/:base/:table", h.deleteRecords, write)
	g.DELETE("/:base/:table/:record", h.deleteRecord, write)
}

// param is a path parameter, unescaped: a table's name may hold any
// character, and Airtable's clients escape it.
func param(c echo.Context, name string) string {
	v := c.Param(name)
	if c.Request().URL.RawPath != "" {
		if u, err := url.PathUnescape(v); err == nil {
			return u
		}
	}
	return v
}

func realmOf(c echo.Context) uuid.UUID { return grid.RealmOf(c) }

// baseTables reads the request's base (an app id) with its tables and
// fields; a base the realm does not have is NOT_FOUND, as an Airtable base
// another account owns.
func (h *Handler) baseTables(c echo.Context) ([]*grid.Table, error) {
	base := param(c, "base")
	app, err := uuid.Parse(base)
	if err == nil {
		var tables []*grid.Table
		tables, err = h.grid.AppTables(c.Request().Context(), realmOf(c), app)
		if err == nil || appdor.ErrorCode(err) != appdor.ENotFound {
			return tables, err
		}
	}
	return nil, fail(TNotFound, "Could not find base %q", truncate(base))
}

// table finds the request's table in its base: by id or by name (exactly,
// then in any case).
func (h *Handler) table(c echo.Context) (*grid.Table, error) {
	tables, err := h.baseTables(c)
	if err != nil {
		return nil, err
	}
	name := param(c, "table")
	for _, t := range tables {
		if t.ID.String() == name || t.Name == name {
			return t, nil
		}
	}
	for _, t := range tables {
		if strings.EqualFold(t.Name, name) {
			return t, nil
		}
	}
	return nil, fail(TNotFound, "Could not find table %q in base %s", truncate(name), param(c, "base"))
}

// tableRecord finds the request's table and parses its record id.
func (h *Handler) tableRecord(c echo.Context) (*grid.Table, uuid.UUID, error) {
	t, err := h.table(c)
	if err != nil {
		return nil, uuid.Nil, err
	}
	id, err := recordID(param(c, "record"))
	return t, id, err
}

// recordID parses a record id; one that names no row is NOT_FOUND.
func recordID(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, fail(TNotFound, "Could not find record %q", truncate(s))
	}
	return id, nil
}

// decodeBody reads a JSON body as the grid API does (unknown members and
// trailing data refused), with the error in Airtable's terms.
func decodeBody(c echo.Context, v any) error {
	if err := grid.DecodeJSON(c, v); err != nil {
		if ae := asError(err); ae != nil && ae.Code == appdor.EInvalid {
			return fail(TInvalidRequest, "%s", ae.Message)
		}
		return err
	}
	return nil
}

// getRecord serves GET /v0/{base}/{table}/{record}.
func (h *Handler) getRecord(c echo.Context) error {
	t, id, err := h.tableRecord(c)
	if err != nil {
		return err
	}
	byID := boolParam(c.QueryParam("returnFieldsByFieldId"))
	rec, err := h.one(c.Request().Context(), realmOf(c), t, id, byID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, rec)
}

// one reads one record.
func (h *Handler) one(ctx context.Context, realm uuid.UUID, t *grid.Table, id uuid.UUID, byID bool) (record, error) {
	rows, _, err := h.grid.Select(ctx, realm, t, grid.Query{IDs: []uuid.UUID{id}, Limit: 1})
	if err != nil {
		return record{}, err
	}
	if len(rows) == 0 {
		return record{}, fail(TNotFound, "Could not find record %s", id)
	}
	return recordOf(t, rows[0], byID, nil)
}

func boolParam(s string) bool { return s == "true" || s == "1" }

// listBases serves GET /v0/meta/bases: the realm's apps, with the
// permission level of the caller's role.
func (h *Handler) listBases(c echo.Context) error {
	apps, err := h.grid.Apps(c.Request().Context(), realmOf(c))
	if err != nil {
		return err
	}
	level := "read"
	if p := tenancy.PrincipalOf(c); p != nil {
		switch p.Role {
		case tenancy.RoleOwner:
			level = "create"
		case tenancy.RoleEditor:
			level = "edit"
		}
	}
	type base struct {
		ID              string `json:"id"`
		Name            string `json:"name"`
		PermissionLevel string `json:"permissionLevel"`
	}
	out := make([]base, len(apps))
	for i, a := range apps {
		out[i] = base{ID: a.ID.String(), Name: a.Name, PermissionLevel: level}
	}
	return c.JSON(http.StatusOK, map[string]any{"bases": out})
}

// listTables serves GET /v0/meta/bases/{base}/tables: each table with its
// fields in Airtable's type names and options; the first field is the
// primary one. Appdor has no views: every table lists none.
func (h *Handler) listTables(c echo.Context) error {
	tables, err := h.baseTables(c)
	if err != nil {
		return err
	}
	type field struct {
		ID      string         `json:"id"`
		Name    string         `json:"name"`
		Type    string         `json:"type"`
		Options map[string]any `json:"options,omitempty"`
	}
	type table struct {
		ID             string  `json:"id"`
		Name           string  `json:"name"`
		PrimaryFieldID string  `json:"primaryFieldId,omitempty"`
		Fields         []field `json:"fields"`
		Views          []any   `json:"views"`
	}
	out := make([]table, len(tables))
	for i, t := range tables {
		tt := table{ID: t.ID.String(), Name: t.Name, Fields: make([]field, len(t.Fields)), Views: []any{}}
		for j := range t.Fields {
			f := &t.Fields[j]
			tt.Fields[j] = field{ID: f.ID.String(), Name: f.Name, Type: airtableType[f.Type], Options: fieldOptions(f)}
		}
		if len(t.Fields) > 0 {
			tt.PrimaryFieldID = t.Fields[0].ID.String()
		}
		out[i] = tt
	}
	return c.JSON(http.StatusOK, map[string]any{"tables": out})
}

// rawFields is a record's fields as sent, keyed by name or id.
type rawFields = map[string]json.RawMessage
