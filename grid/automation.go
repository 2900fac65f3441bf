package grid

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
)

// Row change events, as automations name their triggers.
const (
	EventRowCreated = "row.created"
	EventRowUpdated = "row.updated"
	EventRowDeleted = "row.deleted"
)

// RowRef names one written row and the version the write left it at.
type RowRef struct {
	ID      uuid.UUID
	Version int64
}

// Change is one committed write batch of one table: its event, the rows it
// wrote and, for an update, the ids of the fields it set. It carries no cell
// data.
type Change struct {
	Event  string
	Rows   []RowRef
	Fields []string
}

// Events hears of row writes inside their transaction, so that what it
// records commits or rolls back with the write. An error refuses the write.
type Events interface {
	RowsChanged(ctx context.Context, tx pgx.Tx, realm, table uuid.UUID, change Change) error
}

// EventFieldsChanged is a Change of a table's fields: one created, changed
// or deleted. It names no row.
const EventFieldsChanged = "fields.changed"

// Live hears of every committed change of a table, after its commit, to
// tell the clients watching it. It must not block.
type Live interface {
	TableChanged(realm, table uuid.UUID, change Change)
}

// rowsChanged tells h.Events of a write batch, when there is one to tell,
// and h.Live once it has committed.
func (h *Handler) rowsChanged(ctx context.Context, tx pgx.Tx, realm, table uuid.UUID, event string, rows []Row, fields []string) error {
	if h.Events == nil && h.Live == nil || len(rows) == 0 {
		return nil
	}
	refs := make([]RowRef, len(rows))
	for i, r := range rows {
		refs[i] = RowRef{ID: r.ID, Version: r.Version}
	}
	return h.refsChanged(ctx, tx, realm, table, event, refs, fields)
}

// refsChanged is rowsChanged for a writer that has only the rows' ids and
// versions.
func (h *Handler) refsChanged(ctx context.Context, tx pgx.Tx, realm, table uuid.UUID, event string, refs []RowRef, fields []string) error {
	if h.Events == nil && h.Live == nil || len(refs) == 0 {
		return nil
	}
	change := Change{Event: event, Rows: refs, Fields: fields}
	if h.Live != nil {
		AfterCommit(ctx, func() { h.Live.TableChanged(realm, table, change) })
	}
	if h.Events == nil {
		return nil
	}
	return h.Events.RowsChanged(ctx, tx, realm, table, change)
}

// fieldsChanged tells h.Live that a table's fields changed; its caller has
// committed.
func (h *Handler) fieldsChanged(realm, table uuid.UUID) {
	if h.Live != nil {
		h.Live.TableChanged(realm, table, Change{Event: EventFieldsChanged})
	}
}

// patchedFields lists, once each, the field ids a batch of patches sets.
func patchedFields(patches []RowPatch) []string {
	cells := make([]map[string]json.RawMessage, len(patches))
	for i, p := range patches {
		cells[i] = p.Cells
	}
	return cellKeys(cells)
}

// The functions below let automations act on rows with grid's own rules:
// the read API's filters, and the cell validation of the write API. They run
// inside the caller's realm-scoped transaction.

// DecodeJSON reads a request's JSON body into v as the grid API does:
// unknown fields and trailing data are refused.
func DecodeJSON(c echo.Context, v any) error { return decode(c, v) }

// LoadTable reads a table and its fields.
func LoadTable(ctx context.Context, tx pgx.Tx, realm, id uuid.UUID) (*Table, error) {
	return loadTable(ctx, tx, realm, id)
}

// QueueLoadTable queues LoadTable's query on b, to be sent with other
// statements in one round trip: when b's results are read, *dst is the
// table, or nil if there is none.
func QueueLoadTable(b *pgx.Batch, realm, id uuid.UUID, dst **Table) {
	b.Queue(tableSQL, realm, id).Query(func(rows pgx.Rows) error {
		t, err := scanTable(rows)
		if appdor.ErrorCode(err) == appdor.ENotFound {
			t, err = nil, nil
		}
		*dst = t
		return err
	})
}

// Field returns the table's field of the given id, or nil.
func (t *Table) Field(id string) *Field { return t.field(id) }

// CheckFilters parses filters (FIELD:OP:VALUE, as the read API's filter=)
// against t and returns a validation error naming the first one that is
// wrong.
func CheckFilters(t *Table, filters []string) error {
	if len(filters) > maxFilters {
		return appdor.Errorf(appdor.EValidation, "at most %d conditions", maxFilters)
	}
	for i, s := range filters {
		if _, err := parseFilter(t, s); err != nil {
			return appdor.Invalid("a condition is invalid", appdor.Detail{Row: &i, Field: "condition", Message: appdorMessage(err)})
		}
	}
	return nil
}

// CheckCells validates cell values against t as a write would, and returns a
// validation error with a detail for each wrong cell.
func CheckCells(t *Table, cells map[string]json.RawMessage) error {
	if _, details := checkCells(t, 0, cells, true); details != nil {
		return appdor.Invalid("some cells are invalid", details...)
	}
	return nil
}

func appdorMessage(err error) string {
	var ae *appdor.Error
	if errors.As(err, &ae) {
		return ae.Message
	}
	return err.Error()
}

// matchRowsSQL reads the rows $3 of realm $1's table $2; MatchRows adds its
// filters to it.
const matchRowsSQL = `SELECT r.id, r.version, r.cells, r.created_at, r.updated_at FROM rows r
WHERE r.realm_id = $1 AND r.table_id = $2 AND r.id = ANY($3::uuid[])`

// MatchRows returns those of the rows ids of table that every filter keeps,
// as they are now; rows gone since are left out. No filter keeps them all.
func MatchRows(ctx context.Context, tx pgx.Tx, realm uuid.UUID, t *Table, filters []string, ids []uuid.UUID) ([]Row, error) {
	b := &sqlBuilder{args: []any{realm, t.ID, ids}, names: []string{"", "", ""}} // $1-$3 of matchRowsSQL
	conds := []string{matchRowsSQL}
	for _, s := range filters {
		f, err := parseFilter(t, s)
		if err != nil {
			return nil, err
		}
		conds = append(conds, b.where(f))
	}
	rows, err := tx.Query(ctx, strings.Join(conds, " AND ")+" ORDER BY r.id", b.args...)
	if err != nil {
		return nil, err
	}
	return collectMatched(rows)
}

// QueueRows queues MatchRows with no filter on b, to be sent with other
// statements in one round trip: when b's results are read, *dst is those
// of the rows ids that exist, in MatchRows' order.
func QueueRows(b *pgx.Batch, realm, table uuid.UUID, ids []uuid.UUID, dst *[]Row) {
	b.Queue(matchRowsSQL+" ORDER BY r.id", realm, table, ids).
		Query(func(rows pgx.Rows) (err error) {
			*dst, err = collectMatched(rows)
			return err
		})
}

func collectMatched(rows pgx.Rows) ([]Row, error) {
	var out []Row
	var r Row
	_, err := pgx.ForEachRow(rows, []any{&r.ID, &r.Version, &r.Cells, &r.CreatedAt, &r.UpdatedAt}, func() error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// CellPatch sets cells of one row, whatever its version.
type CellPatch struct {
	ID    uuid.UUID
	Cells map[string]json.RawMessage
}

// PatchRows validates and merges each patch's cells into its row (a null
// clears a cell) and bumps the version; rows gone since are skipped. It
// returns the rows as written.
func PatchRows(ctx context.Context, tx pgx.Tx, realm uuid.UUID, t *Table, patches []CellPatch) ([]Row, error) {
	cells := make([]map[string]json.RawMessage, len(patches))
	ids := make([]uuid.UUID, len(patches))
	for i, p := range patches {
		cells[i], ids[i] = p.Cells, p.ID
	}
	b, err := validateBatch(ctx, tx, realm, t, cells, true)
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx,
		`UPDATE rows r SET cells = jsonb_strip_nulls(r.cells || u.patch), version = r.version + 1, updated_at = now()
		 FROM unnest($3::uuid[], $4::jsonb[]) AS u(id, patch)
		 WHERE r.realm_id = $1 AND r.table_id = $2 AND r.id = ANY($3::uuid[]) AND r.id = u.id
		 RETURNING r.id, r.version, r.cells, r.created_at, r.updated_at`,
		realm, t.ID, ids, b)
	if err != nil {
		return nil, err
	}
	var out []Row
	var r Row
	_, err = pgx.ForEachRow(rows, []any{&r.ID, &r.Version, &r.Cells, &r.CreatedAt, &r.UpdatedAt}, func() error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// InsertRows validates and inserts rows into t, and returns them as stored.
func InsertRows(ctx context.Context, tx pgx.Tx, realm uuid.UUID, t *Table, cells []map[string]json.RawMessage) ([]Row, error) {
	b, err := validateBatch(ctx, tx, realm, t, cells, false)
	if err != nil {
		return nil, err
	}
	return insertRows(ctx, tx, realm, t.ID, b)
}

// afterCommit is what must run once a write's transaction has committed.
type afterCommit struct{ fns []func() }

type afterCommitKey struct{}

// AfterCommit runs f once the grid write whose context ctx is has committed,
// and never if it rolls back: a worker woken before the commit would find
// nothing to claim and sleep until its next poll. Outside a grid write (an
// automation's own action, a test), f runs at once.
func AfterCommit(ctx context.Context, f func()) {
	if a, ok := ctx.Value(afterCommitKey{}).(*afterCommit); ok {
		a.fns = append(a.fns, f)
		return
	}
	f()
}

// writeTx is h.db.Tx for the writes that tell h.Events: fn's context
// collects AfterCommit functions, run when the transaction has committed.
func (h *Handler) writeTx(ctx context.Context, realm uuid.UUID, fn func(ctx context.Context, tx pgx.Tx) error) error {
	a := &afterCommit{}
	ctx = context.WithValue(ctx, afterCommitKey{}, a)
	err := h.db.Tx(ctx, realm, func(tx pgx.Tx) error {
		a.fns = a.fns[:0] // a retried transaction starts over
		return fn(ctx, tx)
	})
	if err != nil {
		return err
	}
	for _, f := range a.fns {
		f()
	}
	return nil
}
