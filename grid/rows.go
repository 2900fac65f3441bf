package grid

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
)

// Row is one record of a table; cells are keyed by field id.
type Row struct {
	ID        uuid.UUID       `json:"id"`
	Version   int64           `json:"version"`
	Cells     json.RawMessage `json:"cells"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// Limits on one request.
const (
	MaxBatch     = 1000
	DefaultLimit = 100
	MaxLimit     = 1000
)

// RowInput is a row as a client sends it.
type RowInput struct {
	Cells map[string]json.RawMessage `json:"cells"`
}

// checkCells validates one row's cells against the table and returns them
// normalized, with a Detail for each wrong cell.
func checkCells(t *Table, index int, cells map[string]json.RawMessage) ([]byte, []Detail) {
	out := make(map[string]any, len(cells))
	var details []Detail
	for id, raw := range cells {
		f := t.field(id)
		if f == nil {
			details = append(details, Detail{Row: &index, Field: id, Message: "no such field in this table"})
			continue
		}
		v, err := f.normalize(raw)
		if err != nil {
			details = append(details, Detail{Row: &index, Field: id, Message: err.Error()})
			continue
		}
		if v != nil {
			out[id] = v
		}
	}
	if details != nil {
		return nil, details
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, []Detail{{Row: &index, Message: err.Error()}}
	}
	return b, nil
}

func (h *Handler) createRows(c echo.Context) error {
	tableID, err := idParam(c, "table")
	if err != nil {
		return err
	}
	var in struct {
		Rows []RowInput `json:"rows"`
	}
	if err := decode(c, &in); err != nil {
		return err
	}
	if len(in.Rows) == 0 {
		return appdor.Errorf(appdor.EValidation, "send at least one row")
	}
	if len(in.Rows) > MaxBatch {
		return &appdor.Error{Code: appdor.ETooLarge, Message: fmt.Sprintf("a batch has at most %d rows; this one has %d", MaxBatch, len(in.Rows))}
	}
	ctx, realm := c.Request().Context(), realmOf(c)
	out := make([]Row, 0, len(in.Rows))
	err = h.db.Tx(ctx, realm, func(tx pgx.Tx) error {
		t, err := loadTable(ctx, tx, realm, tableID)
		if err != nil {
			return err
		}
		ids := make([]uuid.UUID, len(in.Rows))
		cells := make([][]byte, len(in.Rows))
		var details []Detail
		for i, r := range in.Rows {
			b, d := checkCells(t, i, r.Cells)
			details = append(details, d...)
			cells[i] = b
			if ids[i], err = uuid.NewV7(); err != nil {
				return err
			}
		}
		if details != nil {
			return validationFailed("some cells are invalid; nothing was written", details)
		}
		rows, err := tx.Query(ctx,
			`INSERT INTO rows (realm_id, id, table_id, cells)
			 SELECT $1, id, $2, cells FROM unnest($3::uuid[], $4::jsonb[]) AS r(id, cells)
			 RETURNING id, version, cells, created_at, updated_at`,
			realm, tableID, ids, cells)
		if err != nil {
			return err
		}
		var r Row
		_, err = pgx.ForEachRow(rows, []any{&r.ID, &r.Version, &r.Cells, &r.CreatedAt, &r.UpdatedAt}, func() error {
			out = append(out, r)
			return nil
		})
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, map[string]any{"rows": out})
}

// cursor is what next_cursor encodes: where the next page starts.
type cursor struct {
	After uuid.UUID `json:"a"`
}

func (k cursor) encode() string {
	b, _ := json.Marshal(k)
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseCursor(s string) (cursor, error) {
	var k cursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &k)
	}
	if err != nil {
		return cursor{}, appdor.Errorf(appdor.EInvalid, "cursor is not one this server gave out")
	}
	return k, nil
}

func parseLimit(s string) (int, error) {
	if s == "" {
		return DefaultLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxLimit {
		return 0, appdor.Errorf(appdor.EInvalid, "limit is a whole number from 1 to %d", MaxLimit)
	}
	return n, nil
}

// listRows reads one keyset page in one statement: the table's existence and
// its rows travel together, so an invisible table is told from an empty one
// without a second round trip, and nothing counts the table.
func (h *Handler) listRows(c echo.Context) error {
	tableID, err := idParam(c, "table")
	if err != nil {
		return err
	}
	limit, err := parseLimit(c.QueryParam("limit"))
	if err != nil {
		return err
	}
	var after cursor
	if s := c.QueryParam("cursor"); s != "" {
		if after, err = parseCursor(s); err != nil {
			return err
		}
	}
	ctx, realm := c.Request().Context(), realmOf(c)
	out := make([]Row, 0, limit)
	found := false
	err = h.db.Query(ctx, realm, func(rows pgx.Rows) error {
		for rows.Next() {
			found = true
			var (
				id           *uuid.UUID
				version      *int64
				cells        []byte
				created, upd *time.Time
			)
			if err := rows.Scan(&id, &version, &cells, &created, &upd); err != nil {
				return err
			}
			if id != nil {
				out = append(out, Row{ID: *id, Version: *version, Cells: cells, CreatedAt: *created, UpdatedAt: *upd})
			}
		}
		return rows.Err()
	}, `SELECT r.id, r.version, r.cells, r.created_at, r.updated_at
	    FROM tables t
	    LEFT JOIN LATERAL (
	        SELECT id, version, cells, created_at, updated_at FROM rows
	        WHERE realm_id = t.realm_id AND table_id = t.id AND id > $3
	        ORDER BY id LIMIT $4
	    ) r ON true
	    WHERE t.realm_id = $1 AND t.id = $2
	    ORDER BY r.id`, realm, tableID, after.After, limit+1)
	if err != nil {
		return err
	}
	if !found {
		return appdor.Errorf(appdor.ENotFound, "table not found")
	}
	var next *string
	if len(out) > limit {
		out = out[:limit]
		s := cursor{After: out[limit-1].ID}.encode()
		next = &s
	}
	return c.JSON(http.StatusOK, map[string]any{"rows": out, "next_cursor": next})
}

func (h *Handler) getRow(c echo.Context) error {
	tableID, err := idParam(c, "table")
	if err != nil {
		return err
	}
	rowID, err := idParam(c, "row")
	if err != nil {
		return err
	}
	ctx, realm := c.Request().Context(), realmOf(c)
	var r *Row
	err = h.db.Query(ctx, realm, func(rows pgx.Rows) error {
		for rows.Next() {
			var x Row
			if err := rows.Scan(&x.ID, &x.Version, &x.Cells, &x.CreatedAt, &x.UpdatedAt); err != nil {
				return err
			}
			r = &x
		}
		return rows.Err()
	}, `SELECT id, version, cells, created_at, updated_at FROM rows
	    WHERE realm_id = $1 AND table_id = $2 AND id = $3`, realm, tableID, rowID)
	if err != nil {
		return err
	}
	if r == nil {
		return appdor.Errorf(appdor.ENotFound, "row not found")
	}
	return c.JSON(http.StatusOK, r)
}
