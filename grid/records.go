package grid

// The records API: the grid's apps, tables and rows for another wire format
// than the grid API's own (the Airtable-compatible API, package airtable),
// with the grid API's rules: every statement in the realm's RLS
// transaction, the cells' own validation, and every write told to the
// automations and to the clients watching its table.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/appdor/appdor"
)

// Condition renders a SQL boolean on the row r, with every value a
// parameter of b. It must render the same SQL for the same binder calls
// each time it is called.
type Condition func(b Binder) string

// Binder is what a Condition builds its SQL with.
type Binder interface {
	// Arg is the placeholder of a new parameter v.
	Arg(v any) string
	// Cell is the raw jsonb of f's cell in r (SQL NULL when it has none).
	Cell(f *Field) string
	// Value is f's cell cast as sort= and filter= compare it: float8 for
	// a number, boolean for a checkbox, timestamptz for a datetime, the
	// JSON text of a list, text otherwise; NULL when empty.
	Value(f *Field) string
}

// Arg implements Binder.
func (b *sqlBuilder) Arg(v any) string { return b.arg(v) }

// Cell implements Binder.
func (b *sqlBuilder) Cell(f *Field) string { return b.cell(f) }

// Value implements Binder.
func (b *sqlBuilder) Value(f *Field) string { return b.expr(f) }

// Apps returns the realm's apps, oldest first.
func (h *Handler) Apps(ctx context.Context, realm uuid.UUID) ([]App, error) {
	apps := []App{}
	err := h.db.Query(ctx, realm, func(rows pgx.Rows) error {
		var a App
		_, err := pgx.ForEachRow(rows, []any{&a.ID, &a.Name, &a.CreatedAt}, func() error {
			apps = append(apps, a)
			return nil
		})
		return err
	}, `SELECT id, name, created_at FROM apps WHERE realm_id = $1 ORDER BY created_at, id`, realm)
	return apps, err
}

// AppTables returns an app's tables with their fields, oldest first, in one
// round trip; not_found when the realm has no such app.
func (h *Handler) AppTables(ctx context.Context, realm, app uuid.UUID) ([]*Table, error) {
	var tables []*Table
	found := false
	err := h.db.Query(ctx, realm, func(rows pgx.Rows) error {
		for rows.Next() {
			found = true
			var (
				tid, fid            *uuid.UUID
				tname, fname, ftype *string
				tcreated            *time.Time
				foptions            []byte
				fposition           *int
				appID               uuid.UUID
			)
			if err := rows.Scan(&appID, &tid, &tname, &tcreated, &fid, &fname, &ftype, &foptions, &fposition); err != nil {
				return err
			}
			if tid == nil {
				continue // an app with no table
			}
			if len(tables) == 0 || tables[len(tables)-1].ID != *tid {
				tables = append(tables, &Table{ID: *tid, AppID: appID, Name: *tname, Fields: []Field{}, CreatedAt: *tcreated})
			}
			if fid != nil {
				t := tables[len(tables)-1]
				f := Field{ID: *fid, Name: *fname, Type: FieldType(*ftype), Position: *fposition}
				if err := json.Unmarshal(foptions, &f.Options); err != nil {
					return err
				}
				t.Fields = append(t.Fields, f)
			}
		}
		return rows.Err()
	}, `SELECT a.id, t.id, t.name, t.created_at, f.id, f.name, f.type, f.options, f.position
	    FROM apps a
	    LEFT JOIN tables t ON t.realm_id = a.realm_id AND t.app_id = a.id
	    LEFT JOIN fields f ON f.realm_id = t.realm_id AND f.table_id = t.id
	    WHERE a.realm_id = $1 AND a.id = $2
	    ORDER BY t.created_at, t.id, f.position, f.id`, realm, app)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, appdor.Errorf(appdor.ENotFound, "app not found")
	}
	return tables, nil
}

// FieldByName finds a field by its exact name, or else by its name in any
// case; nil when none has it.
func (t *Table) FieldByName(name string) *Field {
	for i := range t.Fields {
		if t.Fields[i].Name == name {
			return &t.Fields[i]
		}
	}
	for i := range t.Fields {
		if strings.EqualFold(t.Fields[i].Name, name) {
			return &t.Fields[i]
		}
	}
	return nil
}

// Sort is one key of a Query's order; empty cells sort last either way.
type Sort struct {
	Field *Field
	Desc  bool
}

// Query is one page of a table's rows: those Where keeps, in Sort's order
// (then the row id), after Cursor, at most Limit of them.
type Query struct {
	Sort  []Sort
	Where Condition // nil keeps every row
	// Fields is the projection: the ids of the fields whose cells the page
	// holds; nil holds every cell.
	Fields []uuid.UUID
	// IDs, when set, reads just these rows.
	IDs []uuid.UUID
	// Cursor is a previous page's Next, for the same Sort.
	Cursor string
	Limit  int
}

// Select reads one page of t's rows; next is the cursor of the page after
// it, "" on the last page. A cursor this server did not give out for this
// sort is an invalid_request error on the parameter "cursor".
func (h *Handler) Select(ctx context.Context, realm uuid.UUID, t *Table, in Query) (rows []Row, next string, err error) {
	if in.Limit < 1 || in.Limit > MaxLimit {
		return nil, "", badRequest("limit", "limit is between 1 and %d", MaxLimit)
	}
	q := &readQuery{realm: realm, table: t.ID, limit: in.Limit, ids: in.IDs}
	for _, s := range in.Sort {
		q.keys = append(q.keys, sortKey{field: s.Field, desc: s.Desc})
	}
	if in.Where != nil {
		q.where = []Condition{in.Where}
	}
	if in.Cursor != "" {
		k, err := parseCursor(in.Cursor)
		if err != nil {
			return nil, "", err
		}
		q.after = &k
		if q.values, err = cursorValues(k, q.keys); err != nil {
			return nil, "", err
		}
	}
	if in.Fields != nil {
		keep := make(map[uuid.UUID]bool, len(in.Fields))
		for _, id := range in.Fields {
			keep[id] = true
		}
		q.project, q.drop = []string{}, []string{}
		for _, f := range t.Fields {
			if keep[f.ID] {
				q.project = append(q.project, f.ID.String())
			} else {
				q.drop = append(q.drop, f.ID.String())
			}
		}
	}
	sql, args := q.pageSQL()
	var (
		arena cellArena
		last  []any
		found bool
	)
	sc := newPageScan(in.Limit+1, len(q.keys), &arena)
	err = h.db.Query(ctx, realm, func(pr pgx.Rows) error {
		for pr.Next() {
			found = true
			if err := pr.Scan(sc.dest...); err != nil {
				return err
			}
			r, ok := sc.row()
			if !ok {
				continue
			}
			rows = append(rows, r)
			if len(rows) == in.Limit && len(sc.values) > 0 {
				last = slices.Clone(sc.values)
			}
		}
		return pr.Err()
	}, sql, args...)
	if err != nil {
		return nil, "", err
	}
	if !found {
		return nil, "", appdor.Errorf(appdor.ENotFound, "table not found")
	}
	if len(rows) > in.Limit {
		rows = rows[:in.Limit]
		if next, err = q.next(rows[in.Limit-1].ID, last); err != nil {
			return nil, "", err
		}
	}
	return rows, next, nil
}

// Update is a change to one row of a Write: its cells merged into the row
// (a null clears a cell), or, for a replacing write, its cells the row's
// whole cells. An Update with no ID is matched on the write's merge fields.
type Update struct {
	ID    uuid.UUID
	Cells map[string]json.RawMessage
}

// Write is one batch of updates, all or nothing.
type Write struct {
	Updates []Update
	// Replace clears every cell an update does not name.
	Replace bool
	// MergeOn, when set, makes the write an upsert: an update with no ID
	// goes to the one row whose cells of these fields equal its own, or
	// creates a row when none does; two or more such rows refuse the write.
	MergeOn []*Field
}

// Written is what a Write did: the rows in the order of its updates, and
// which of them it created.
type Written struct {
	Rows    []Row
	Created []bool
}

// Insert validates and creates rows in t in one transaction, and returns
// them as stored, in order.
func (h *Handler) Insert(ctx context.Context, realm uuid.UUID, t *Table, cells []map[string]json.RawMessage) ([]Row, error) {
	if err := batchSize(len(cells), "row"); err != nil {
		return nil, err
	}
	var out []Row
	err := h.writeTx(ctx, realm, func(ctx context.Context, tx pgx.Tx) error {
		b, err := validateBatch(ctx, tx, realm, t, cells, false)
		if err != nil {
			return err
		}
		if out, err = insertRows(ctx, tx, realm, t.ID, b); err != nil {
			return err
		}
		return h.rowsChanged(ctx, tx, realm, t.ID, EventRowCreated, out, nil)
	})
	return out, err
}

// Apply runs a Write on t in one transaction. An update of a row the
// table does not have refuses the whole write with not_found, its detail
// naming the row.
func (h *Handler) Apply(ctx context.Context, realm uuid.UUID, t *Table, w Write) (Written, error) {
	var res Written
	if err := batchSize(len(w.Updates), "row"); err != nil {
		return res, err
	}
	err := h.writeTx(ctx, realm, func(ctx context.Context, tx pgx.Tx) error {
		res = Written{Rows: make([]Row, len(w.Updates)), Created: make([]bool, len(w.Updates))}
		updates := slices.Clone(w.Updates)
		if len(w.MergeOn) > 0 {
			if err := matchUpserts(ctx, tx, realm, t, w.MergeOn, updates); err != nil {
				return err
			}
		}
		var (
			creates, patches  []map[string]json.RawMessage
			createAt, patchAt []int
			ids               []uuid.UUID
			seen              = map[uuid.UUID]int{}
		)
		for i, u := range updates {
			if u.ID == uuid.Nil {
				creates, createAt = append(creates, u.Cells), append(createAt, i)
				continue
			}
			if j, ok := seen[u.ID]; ok {
				return appdor.Invalid("a row is updated twice in one write", appdor.Detail{Row: &i, Field: "id",
					Message: fmt.Sprintf("the same row as update %d", j)})
			}
			seen[u.ID] = i
			cells := u.Cells
			if w.Replace {
				cells = replacing(t, cells)
			}
			patches, patchAt, ids = append(patches, cells), append(patchAt, i), append(ids, u.ID)
		}
		if len(patches) > 0 {
			written := make([]CellPatch, len(patches))
			for k := range patches {
				written[k] = CellPatch{ID: ids[k], Cells: patches[k]}
			}
			rows, err := PatchRows(ctx, tx, realm, t, written)
			if err != nil {
				return err
			}
			byID := make(map[uuid.UUID]Row, len(rows))
			for _, r := range rows {
				byID[r.ID] = r
			}
			var missing []appdor.Detail
			updated := make([]Row, 0, len(ids))
			for k, id := range ids {
				row, ok := byID[id]
				if !ok {
					i := patchAt[k]
					missing = append(missing, appdor.Detail{Row: &i, Field: "id", Message: "no such row in this table: " + id.String()})
					continue
				}
				res.Rows[patchAt[k]] = row
				updated = append(updated, row)
			}
			if missing != nil {
				return &appdor.Error{Code: appdor.ENotFound, Message: "some rows were not found; nothing was written", Details: missing}
			}
			if err := h.rowsChanged(ctx, tx, realm, t.ID, EventRowUpdated, updated, cellKeys(patches)); err != nil {
				return err
			}
		}
		if len(creates) > 0 {
			b, err := validateBatch(ctx, tx, realm, t, creates, false)
			if err != nil {
				return err
			}
			made, err := insertRows(ctx, tx, realm, t.ID, b)
			if err != nil {
				return err
			}
			for k, row := range made {
				res.Rows[createAt[k]], res.Created[createAt[k]] = row, true
			}
			if err := h.rowsChanged(ctx, tx, realm, t.ID, EventRowCreated, made, nil); err != nil {
				return err
			}
		}
		return nil
	})
	return res, err
}

// replacing is a replacing update's cells: its own, and a null for every
// other field of t.
func replacing(t *Table, cells map[string]json.RawMessage) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(t.Fields))
	for _, f := range t.Fields {
		out[f.ID.String()] = jsonNull
	}
	for k, v := range cells {
		out[k] = v
	}
	return out
}

// cellKeys lists, once each, the field ids a batch of cells sets.
func cellKeys(batch []map[string]json.RawMessage) []string {
	seen := map[string]bool{}
	var out []string
	for _, cells := range batch {
		for id := range cells {
			if !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	return out
}

// matchUpserts gives each update with no ID the id of the one row whose
// cells of the merge fields equal the update's (normalized as a write
// would store them), and leaves it without one when no row does.
func matchUpserts(ctx context.Context, tx pgx.Tx, realm uuid.UUID, t *Table, on []*Field, updates []Update) error {
	for i := range updates {
		u := &updates[i]
		if u.ID != uuid.Nil {
			continue
		}
		norm, details := checkCells(t, i, u.Cells, true)
		if details != nil {
			return appdor.Invalid("some cells are invalid; nothing was written", details...)
		}
		b := &sqlBuilder{}
		conds := []string{"r.realm_id = " + b.arg(realm), "r.table_id = " + b.arg(t.ID)}
		for _, f := range on {
			v, ok := norm[f.ID.String()]
			if !ok || v == nil {
				return appdor.Invalid("an upsert's record needs a value for every field it merges on",
					appdor.Detail{Row: &i, Field: f.ID.String(), Message: "no value for " + f.Name})
			}
			raw, err := json.Marshal(v)
			if err != nil {
				return err
			}
			conds = append(conds, "r.cells -> "+b.arg(f.ID.String())+"::text = "+b.arg(string(raw))+"::jsonb")
		}
		rows, err := tx.Query(ctx, "SELECT r.id FROM rows r WHERE "+strings.Join(conds, " AND ")+" ORDER BY r.id LIMIT 2", b.args...)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return err
		}
		switch len(ids) {
		case 0:
		case 1:
			u.ID = ids[0]
		default:
			return appdor.Invalid("more than one row matches an upsert's record",
				appdor.Detail{Row: &i, Field: "fieldsToMergeOn", Message: "two or more rows have these values"})
		}
	}
	return nil
}

// Delete removes rows of t by id in one transaction, and takes them out of
// the link cells that pointed at them. An id the table does not have
// refuses the whole delete with not_found, its detail naming the row.
func (h *Handler) Delete(ctx context.Context, realm uuid.UUID, t *Table, ids []uuid.UUID) error {
	if err := batchSize(len(ids), "id"); err != nil {
		return err
	}
	return h.writeTx(ctx, realm, func(ctx context.Context, tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `DELETE FROM rows WHERE realm_id = $1 AND table_id = $2 AND id = ANY($3) RETURNING id, version`,
			realm, t.ID, ids)
		if err != nil {
			return err
		}
		var gone []Row
		var r Row
		if _, err := pgx.ForEachRow(rows, []any{&r.ID, &r.Version}, func() error {
			gone = append(gone, r)
			return nil
		}); err != nil {
			return err
		}
		if len(gone) < len(uniqueIDs(ids)) {
			deleted := make(map[uuid.UUID]bool, len(gone))
			for _, r := range gone {
				deleted[r.ID] = true
			}
			var missing []appdor.Detail
			for i, id := range ids {
				if !deleted[id] {
					missing = append(missing, appdor.Detail{Row: &i, Field: "id", Message: "no such row in this table: " + id.String()})
				}
			}
			return &appdor.Error{Code: appdor.ENotFound, Message: "some rows were not found; nothing was deleted", Details: missing}
		}
		deleted := make([]string, len(gone))
		for i, r := range gone {
			deleted[i] = r.ID.String()
		}
		if err := unlink(ctx, tx, realm, t.ID, deleted); err != nil {
			return err
		}
		return h.rowsChanged(ctx, tx, realm, t.ID, EventRowDeleted, gone, nil)
	})
}

func uniqueIDs(ids []uuid.UUID) []uuid.UUID {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	return slices.Compact(out)
}

// Typecast converts a write's cells as Airtable's typecast does: a string
// sent for a number, checkbox, date, datetime or list field is read as that
// field's CSV import reads its text (a list from a comma-separated string),
// a number or a boolean sent for a text-like field becomes its text. What
// cannot be converted is left as it is, for validation to refuse.
func Typecast(t *Table, cells map[string]json.RawMessage) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(cells))
	for id, raw := range cells {
		out[id] = raw
		f := t.field(id)
		if f == nil {
			continue
		}
		var s string
		isString := json.Unmarshal(raw, &s) == nil
		switch f.Type {
		case TypeText, TypeLongText, TypeEmail, TypeURL, TypeSingleSelect:
			if !isString && len(raw) > 0 && (raw[0] == 't' || raw[0] == 'f' || raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')) {
				if b, err := json.Marshal(string(raw)); err == nil {
					out[id] = b
				}
			}
			continue
		}
		if !isString {
			continue
		}
		if strings.TrimSpace(s) == "" {
			out[id] = jsonNull
			continue
		}
		v, err := f.parseText(s)
		if err != nil {
			continue
		}
		if b, err := json.Marshal(v); err == nil {
			out[id] = b
		}
	}
	return out
}
