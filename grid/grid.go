// Package grid is the spreadsheet domain: apps, tables, typed fields and rows,
// and their HTTP handlers.
//
// Every read and write of realm data goes through rls, so PostgreSQL's
// row-level security stands behind each query; the queries still say
// realm_id = $1, because RLS is the wall and the WHERE clause is the habit.
// grid never imports server, and knows nothing of limiter or fairness.
package grid

import (
	"context"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/rls"
	"github.com/appdor/appdor/tenancy"
)

// Gate runs a realm's long work as background work: the server backs it
// with the fairness controller, so a CSV import competes fairly with its own
// realm's and other realms' work instead of holding a request's seat.
type Gate interface {
	// Yield gives back the seat the request of ctx was admitted under.
	Yield(ctx context.Context)
	// Acquire waits, while ctx lasts, for a background seat of realm for one
	// unit of work (a batch); release gives it back.
	Acquire(ctx context.Context, realm string) (release func(), err error)
	// Rest, between two steps of the unit realm runs under its background
	// seat, rests the realm in proportion to the work since the last rest,
	// keeping the seat; an error is ctx's.
	Rest(ctx context.Context, realm string) error
}

// Handler serves the grid API.
type Handler struct {
	db *rls.DB
	// Gate, when set, runs each batch of a CSV import as background work;
	// nil runs imports under their request's seat.
	Gate Gate
	// CSVBodyLimit bounds a CSV import's body in bytes; 0 means
	// DefaultCSVBodyLimit. The server's general body limit must skip the
	// import route (see OwnsBodyLimit), which streams and bounds itself.
	CSVBodyLimit int64
	// Events, when set, hears of every row write batch (API writes and each
	// CSV import batch) inside its transaction; automations enqueue there.
	Events Events
	// Live, when set, hears of every committed row write batch and field
	// change, for the clients watching the table.
	Live Live

	schemas schemaCache
}

// New returns a Handler that reaches tenant data through db.
func New(db *rls.DB) *Handler { return &Handler{db: db} }

// Routes registers the grid API on g, which the server has already put behind
// authentication, the rate limiter and the fairness controller.
func (h *Handler) Routes(g *echo.Group) {
	read := tenancy.Require(tenancy.RoleViewer)
	write := tenancy.Require(tenancy.RoleEditor)

	g.POST("/apps", h.createApp, write)
	g.GET("/apps", h.listApps, read)
	g.POST("/apps/:app/tables", h.createTable, write)
	g.GET("/apps/:app/tables", h.listTables, read)
	g.GET("/tables/:table", h.getTable, read)
	g.POST("/tables/:table/fields", h.createField, write)
	g.PATCH("/tables/:table/fields/:field", h.updateField, write)
	g.DELETE("/tables/:table/fields/:field", h.deleteField, write)
	g.POST("/tables/:table/rows", h.createRows, write)
	g.PATCH("/tables/:table/rows", h.updateRows, write)
	g.DELETE("/tables/:table/rows", h.deleteRows, write)
	g.GET("/tables/:table/rows", h.listRows, read)
	g.GET("/tables/:table/rows/:row", h.getRow, read)
	g.GET("/tables/:table/count", h.countRows, read)
	g.GET("/tables/:table/csv", h.exportCSV, read)
	g.POST("/tables/:table/csv", h.importCSV, write)
}

// RealmOf returns the realm the request acts in. The server guarantees a
// principal on every grid route (and on the automations routes, which use it
// too).
func RealmOf(c echo.Context) uuid.UUID {
	if p := tenancy.PrincipalOf(c); p != nil {
		return p.RealmID
	}
	return uuid.Nil
}

// IDParam parses a path id. A malformed id names nothing this realm can see,
// so it is not found rather than a bad request; the message quotes at most
// 64 characters of it (a 5,000-character id came back whole).
func IDParam(c echo.Context, name string) (uuid.UUID, error) {
	id, err := uuid.Parse(c.Param(name))
	if err != nil {
		return uuid.Nil, appdor.Errorf(appdor.ENotFound, "%s %.64q not found", name, c.Param(name))
	}
	return id, nil
}

// decode reads a JSON body into v (appdor.DecodeJSON).
func decode(c echo.Context, v any) error { return appdor.DecodeJSON(c.Request().Body, v) }
