package grid

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
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

// RowPatch is a change to one row: the given cells are merged into it (a null
// clears a cell) when version is still the row's version.
type RowPatch struct {
	ID      uuid.UUID                  `json:"id"`
	Version int64                      `json:"version"`
	Cells   map[string]json.RawMessage `json:"cells"`
}

// checkCells validates one row's cells against the table and returns them
// normalized, with a Detail for each wrong cell. A null clears a cell: it is
// dropped, or kept as nil when keepNulls (a patch needs it to clear the key).
func checkCells(t *Table, index int, cells map[string]json.RawMessage, keepNulls bool) (map[string]any, []Detail) {
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
		if v != nil || keepNulls {
			out[id] = v
		}
	}
	return out, details
}

// batchSize refuses an empty batch and one of more than MaxBatch items.
func batchSize(n int, item string) error {
	if n == 0 {
		return appdor.Errorf(appdor.EValidation, "send at least one %s", item)
	}
	if n > MaxBatch {
		return tooLarge(n)
	}
	return nil
}

// readJSON reads the whole body, which an idempotent write keeps to compare
// a retry with, and decodes it into v.
func readJSON(c echo.Context, v any) ([]byte, error) {
	body, err := readBody(c)
	if err != nil {
		return nil, err
	}
	return body, appdor.DecodeJSON(bytes.NewReader(body), v)
}

func tooLarge(n int) error {
	return appdor.Errorf(appdor.ETooLarge, "a batch has at most %d rows; this one has %d", MaxBatch, n)
}

// validateBatch checks every row's cells, then the link cells of the whole
// batch against the database, and returns the cells as JSON.
func validateBatch(ctx context.Context, tx pgx.Tx, realm uuid.UUID, t *Table, in []map[string]json.RawMessage, keepNulls bool) ([][]byte, error) {
	norm := make([]map[string]any, len(in))
	idx := make([]int, len(in))
	var details []Detail
	for i, cells := range in {
		var d []Detail
		norm[i], d = checkCells(t, i, cells, keepNulls)
		idx[i] = i
		details = append(details, d...)
	}
	if details == nil {
		d, err := checkLinks(ctx, tx, realm, t, norm, idx)
		if err != nil {
			return nil, err
		}
		details = d
	}
	if details != nil {
		return nil, appdor.Invalid("some cells are invalid; nothing was written", details...)
	}
	out := make([][]byte, len(norm))
	for i, m := range norm {
		b, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

// insertSQL writes a batch of rows given as parallel arrays of ids and cells,
// in the batch's order; its caller names what comes back.
const insertSQL = `INSERT INTO rows (realm_id, id, table_id, cells)
	SELECT $1, id, $2, cells FROM unnest($3::uuid[], $4::jsonb[]) WITH ORDINALITY AS r(id, cells, n)
	ORDER BY n
	RETURNING `

// newRowIDs makes a batch's row ids. UUIDv7s made in one process increase,
// so id order is the batch's order.
func newRowIDs(n int) ([]uuid.UUID, error) {
	ids := make([]uuid.UUID, n)
	for i := range ids {
		var err error
		if ids[i], err = uuid.NewV7(); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// insertRows writes validated rows and returns them as stored.
func insertRows(ctx context.Context, tx pgx.Tx, realm, tableID uuid.UUID, cells [][]byte) ([]Row, error) {
	ids, err := newRowIDs(len(cells))
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, insertSQL+`id, version, cells, created_at, updated_at`, realm, tableID, ids, cells)
	if err != nil {
		return nil, err
	}
	out := make([]Row, 0, len(cells))
	var r Row
	_, err = pgx.ForEachRow(rows, []any{&r.ID, &r.Version, &r.Cells, &r.CreatedAt, &r.UpdatedAt}, func() error {
		out = append(out, r)
		return nil
	})
	slices.SortFunc(out, func(a, b Row) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	return out, err
}

// insertRowRefs writes validated rows and returns only their ids and
// versions, for a writer that does not answer with the rows (an import):
// decoding a thousand rows' cells back is most of a batch's own CPU.
func insertRowRefs(ctx context.Context, tx pgx.Tx, realm, tableID uuid.UUID, cells [][]byte) ([]RowRef, error) {
	ids, err := newRowIDs(len(cells))
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, insertSQL+`id, version`, realm, tableID, ids, cells)
	if err != nil {
		return nil, err
	}
	out := make([]RowRef, 0, len(cells))
	var r RowRef
	_, err = pgx.ForEachRow(rows, []any{&r.ID, &r.Version}, func() error {
		out = append(out, r)
		return nil
	})
	sortRefs(out)
	return out, err
}

// sortRefs puts refs in the order of their ids.
func sortRefs(refs []RowRef) {
	slices.SortFunc(refs, func(a, b RowRef) int { return bytes.Compare(a.ID[:], b.ID[:]) })
}

func (h *Handler) createRows(c echo.Context) error {
	tableID, err := IDParam(c, "table")
	if err != nil {
		return err
	}
	var in struct {
		Rows []RowInput `json:"rows"`
	}
	body, err := readJSON(c, &in)
	if err != nil {
		return err
	}
	if err := batchSize(len(in.Rows), "row"); err != nil {
		return err
	}
	realm := RealmOf(c)
	return h.writeOnce(c, body, http.StatusCreated, func(ctx context.Context, tx pgx.Tx) (any, error) {
		t, err := loadTable(ctx, tx, realm, tableID)
		if err != nil {
			return nil, err
		}
		cells := make([]map[string]json.RawMessage, len(in.Rows))
		for i, r := range in.Rows {
			cells[i] = r.Cells
		}
		b, err := validateBatch(ctx, tx, realm, t, cells, false)
		if err != nil {
			return nil, err
		}
		out, err := insertRows(ctx, tx, realm, tableID, b)
		if err != nil {
			return nil, err
		}
		if err := h.rowsChanged(ctx, tx, realm, tableID, EventRowCreated, out, nil); err != nil {
			return nil, err
		}
		return map[string]any{"rows": out}, nil
	})
}

// updateRows merges each patch's cells into its row and bumps the version,
// all or nothing: a stale version is a conflict and changes no row.
func (h *Handler) updateRows(c echo.Context) error {
	tableID, err := IDParam(c, "table")
	if err != nil {
		return err
	}
	var in struct {
		Rows []RowPatch `json:"rows"`
	}
	body, err := readJSON(c, &in)
	if err != nil {
		return err
	}
	if err := batchSize(len(in.Rows), "row"); err != nil {
		return err
	}
	seen := make(map[uuid.UUID]bool, len(in.Rows))
	var details []Detail
	for i, r := range in.Rows {
		switch {
		case r.ID == uuid.Nil:
			details = append(details, Detail{Row: &i, Field: "id", Message: "each row needs its id"})
		case r.Version < 1:
			details = append(details, Detail{Row: &i, Field: "version", Message: "each row needs the version it was read at"})
		case seen[r.ID]:
			details = append(details, Detail{Row: &i, Field: "id", Message: "this row is listed twice"})
		}
		seen[r.ID] = true
	}
	if details != nil {
		return appdor.Invalid("some rows are invalid; nothing was written", details...)
	}
	realm := RealmOf(c)
	return h.writeOnce(c, body, http.StatusOK, func(ctx context.Context, tx pgx.Tx) (any, error) {
		t, err := loadTable(ctx, tx, realm, tableID)
		if err != nil {
			return nil, err
		}
		cells := make([]map[string]json.RawMessage, len(in.Rows))
		ids := make([]uuid.UUID, len(in.Rows))
		versions := make([]int64, len(in.Rows))
		for i, r := range in.Rows {
			cells[i], ids[i], versions[i] = r.Cells, r.ID, r.Version
		}
		patches, err := validateBatch(ctx, tx, realm, t, cells, true)
		if err != nil {
			return nil, err
		}
		rows, err := tx.Query(ctx,
			`UPDATE rows r SET cells = jsonb_strip_nulls(r.cells || u.patch), version = r.version + 1, updated_at = now()
			 FROM unnest($3::uuid[], $4::bigint[], $5::jsonb[]) AS u(id, version, patch)
			 WHERE r.realm_id = $1 AND r.table_id = $2 AND r.id = ANY($3::uuid[]) AND r.id = u.id AND r.version = u.version
			 RETURNING r.id, r.version, r.cells, r.created_at, r.updated_at`,
			realm, tableID, ids, versions, patches)
		if err != nil {
			return nil, err
		}
		byID := make(map[uuid.UUID]Row, len(in.Rows))
		var r Row
		if _, err := pgx.ForEachRow(rows, []any{&r.ID, &r.Version, &r.Cells, &r.CreatedAt, &r.UpdatedAt}, func() error {
			byID[r.ID] = r
			return nil
		}); err != nil {
			return nil, err
		}
		if len(byID) < len(in.Rows) {
			return nil, missedRows(ctx, tx, realm, tableID, in.Rows, byID)
		}
		out := make([]Row, len(in.Rows))
		for i, p := range in.Rows {
			out[i] = byID[p.ID]
		}
		if err := h.rowsChanged(ctx, tx, realm, tableID, EventRowUpdated, out, patchedFields(in.Rows)); err != nil {
			return nil, err
		}
		return map[string]any{"rows": out}, nil
	})
}

// missedRows explains why some rows of a PATCH were not updated: a row that
// does not exist is not found; one whose version moved on is a conflict.
func missedRows(ctx context.Context, tx pgx.Tx, realm, tableID uuid.UUID, in []RowPatch, done map[uuid.UUID]Row) error {
	var missing []uuid.UUID
	for _, p := range in {
		if _, ok := done[p.ID]; !ok {
			missing = append(missing, p.ID)
		}
	}
	current := map[uuid.UUID]int64{}
	rows, err := tx.Query(ctx, `SELECT id, version FROM rows WHERE realm_id = $1 AND table_id = $2 AND id = ANY($3)`,
		realm, tableID, missing)
	if err != nil {
		return err
	}
	var id uuid.UUID
	var v int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &v}, func() error { current[id] = v; return nil }); err != nil {
		return err
	}
	var notFound, stale []Detail
	for i, p := range in {
		if _, ok := done[p.ID]; ok {
			continue
		}
		if cv, ok := current[p.ID]; ok {
			stale = append(stale, Detail{Row: &i, Field: "version", Message: fmt.Sprintf("the row is at version %d, not %d; read it again", cv, p.Version)})
		} else {
			notFound = append(notFound, Detail{Row: &i, Field: "id", Message: "no such row in this table"})
		}
	}
	if notFound != nil {
		return &appdor.Error{Code: appdor.ENotFound, Message: "some rows were not found; nothing was written", Details: notFound}
	}
	return &appdor.Error{Code: appdor.EConflict, Message: "some rows changed since they were read; nothing was written", Details: stale}
}

// deleteRows removes rows by id, all in one transaction, and takes them out of
// the link cells that pointed at them. Ids that name no row are ignored, so a
// retried delete is harmless.
func (h *Handler) deleteRows(c echo.Context) error {
	tableID, err := IDParam(c, "table")
	if err != nil {
		return err
	}
	var in struct {
		IDs []uuid.UUID `json:"ids"`
	}
	if err := decode(c, &in); err != nil {
		return err
	}
	if err := batchSize(len(in.IDs), "id"); err != nil {
		return err
	}
	ctx, realm := c.Request().Context(), RealmOf(c)
	var deleted []string
	err = h.writeTx(ctx, realm, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := loadTable(ctx, tx, realm, tableID); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `DELETE FROM rows WHERE realm_id = $1 AND table_id = $2 AND id = ANY($3) RETURNING id, version`,
			realm, tableID, in.IDs)
		if err != nil {
			return err
		}
		var gone []Row
		var r Row
		if _, err := pgx.ForEachRow(rows, []any{&r.ID, &r.Version}, func() error {
			deleted = append(deleted, r.ID.String())
			gone = append(gone, r)
			return nil
		}); err != nil {
			return err
		}
		if err := unlink(ctx, tx, realm, tableID, deleted); err != nil {
			return err
		}
		return h.rowsChanged(ctx, tx, realm, tableID, EventRowDeleted, gone, nil)
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"deleted": len(deleted)})
}

func (h *Handler) getRow(c echo.Context) error {
	tableID, err := IDParam(c, "table")
	if err != nil {
		return err
	}
	rowID, err := IDParam(c, "row")
	if err != nil {
		return err
	}
	ctx, realm := c.Request().Context(), RealmOf(c)
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
	return writeRow(c, r)
}

// pageScratch is the memory a page read fills, its rows and their cells,
// kept between reads in scratchPool: a page's cells and rows were two thirds
// of the bytes a 200-row read allocated, and under a storm allocation turns
// into garbage collection that every realm's requests wait on.
type pageScratch struct {
	rows  []Row
	cells cellArena
}

var scratchPool = sync.Pool{New: func() any { return new(pageScratch) }}

// cellArena receives each row's cells from the driver, whose buffer lasts
// only until the next row, and keeps them in one buffer rather than in one
// allocation a row. A full buffer is not moved (earlier rows point into it);
// the next one is larger, so that a reused arena soon holds a whole page.
type cellArena struct {
	buf  []byte
	last []byte // the cells last scanned; nil for NULL
	left int    // rows still expected, to size a new buffer
}

// maxArenaBuffer bounds a new buffer's size; a larger cell gets a buffer of
// its own size, and an arena that grew past it is not kept for reuse.
const maxArenaBuffer = 1 << 20

// ScanBytes implements pgtype.BytesScanner.
func (a *cellArena) ScanBytes(v []byte) error {
	a.left--
	if len(v) == 0 {
		a.last = nil
		if v != nil {
			a.last = []byte{}
		}
		return nil
	}
	if cap(a.buf)-len(a.buf) < len(v) {
		n := min(max(len(v)*(a.left+1), 2*cap(a.buf), 4<<10), maxArenaBuffer)
		a.buf = make([]byte, 0, max(n, len(v)))
	}
	start := len(a.buf)
	a.buf = append(a.buf, v...)
	// Capped, so that nothing appended to one row's cells overwrites the next.
	a.last = a.buf[start:len(a.buf):len(a.buf)]
	return nil
}

// sigScan scans a column that repeats one text on every row (the fields
// signature) and allocates only when the text changes.
type sigScan struct{ s string }

// ScanBytes implements pgtype.BytesScanner.
func (s *sigScan) ScanBytes(v []byte) error {
	if string(v) != s.s {
		s.s = string(v)
	}
	return nil
}
