package grid

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
)

// Limits on one read.
const (
	maxSortKeys = 5
	maxFilters  = 20
	maxQueryLen = 500
	maxCursor   = 8192
)

// Filter operators.
const (
	OpEq       = "eq"
	OpNeq      = "neq"
	OpLt       = "lt"
	OpLte      = "lte"
	OpGt       = "gt"
	OpGte      = "gte"
	OpContains = "contains"
	OpEmpty    = "empty"
	OpNotEmpty = "not_empty"
)

var comparisons = map[string]string{OpLt: "<", OpLte: "<=", OpGt: ">", OpGte: ">="}

// kind is how SQL compares a field's cells: the cast that makes its JSON value
// sortable, and the Go type its parameters take.
type kind int

const (
	kindText kind = iota // text, long_text, email, url, single_select, date (ISO dates sort as text)
	kindNumber
	kindBool
	kindTime
	kindList // multi_select, link: a JSON array of strings
)

func kindOf(t FieldType) kind {
	switch t {
	case TypeNumber:
		return kindNumber
	case TypeCheckbox:
		return kindBool
	case TypeDatetime:
		return kindTime
	case TypeMultiSelect, TypeLink:
		return kindList
	}
	return kindText
}

// badRequest is the error of a malformed read parameter: 400 invalid_request,
// with the parameter named in the details.
func badRequest(param, format string, args ...any) error {
	return &appdor.Error{Code: appdor.EInvalid, Message: fmt.Sprintf(format, args...),
		Details: map[string]string{"parameter": param}}
}

// lookupField finds a field by id or, failing that, by name (case-insensitive).
func lookupField(t *Table, ref string) *Field {
	if f := t.field(ref); f != nil {
		return f
	}
	for i := range t.Fields {
		if strings.EqualFold(t.Fields[i].Name, ref) {
			return &t.Fields[i]
		}
	}
	return nil
}

// sortKey is one term of sort=: a field and its direction. Ties always fall
// to the row id, ascending; empty cells sort last in both directions.
type sortKey struct {
	field *Field
	desc  bool
}

// parseSort reads sort=FIELD,-FIELD2 against the table's fields.
func parseSort(t *Table, s string) ([]sortKey, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) > maxSortKeys {
		return nil, badRequest("sort", "sort by at most %d fields", maxSortKeys)
	}
	keys := make([]sortKey, 0, len(parts))
	seen := map[uuid.UUID]bool{}
	for _, p := range parts {
		p = strings.TrimSpace(p)
		k := sortKey{}
		if strings.HasPrefix(p, "-") {
			k.desc, p = true, p[1:]
		}
		if k.field = lookupField(t, p); k.field == nil {
			return nil, badRequest("sort", "sort: no field %q in this table", truncate(p))
		}
		if seen[k.field.ID] {
			return nil, badRequest("sort", "sort: field %q is listed twice", truncate(p))
		}
		seen[k.field.ID] = true
		keys = append(keys, k)
	}
	return keys, nil
}

// sortSpec is the canonical form of a sort, which a cursor carries so that it
// is never used with another sort.
func sortSpec(keys []sortKey) string {
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		if k.desc {
			b.WriteByte('-')
		}
		b.WriteString(k.field.ID.String())
	}
	return b.String()
}

// filter is one filter=FIELD:OP:VALUE, its value parsed for the field's kind.
type filter struct {
	field *Field
	op    string
	value any // float64, bool, time.Time or string; nil for empty / not_empty
}

// parseFilter reads FIELD:OP:VALUE; the value is everything after the second
// colon, so it may hold colons itself.
func parseFilter(t *Table, s string) (filter, error) {
	ref, rest, ok := strings.Cut(s, ":")
	if !ok {
		return filter{}, badRequest("filter", "a filter is FIELD:OP:VALUE")
	}
	op, val, hasVal := strings.Cut(rest, ":")
	f := filter{field: lookupField(t, ref), op: op}
	if f.field == nil {
		return filter{}, badRequest("filter", "filter: no field %q in this table", truncate(ref))
	}
	k := kindOf(f.field.Type)
	switch op {
	case OpEmpty, OpNotEmpty:
		if val != "" {
			return filter{}, badRequest("filter", "filter: %s takes no value", op)
		}
		return f, nil
	case OpEq, OpNeq:
	case OpLt, OpLte, OpGt, OpGte:
		if k == kindList || k == kindBool {
			return filter{}, badRequest("filter", "filter: a %s field has no order; use eq, neq, contains, empty or not_empty", f.field.Type)
		}
	case OpContains:
		if k != kindText && k != kindList {
			return filter{}, badRequest("filter", "filter: contains applies to text and list fields, not %s", f.field.Type)
		}
	default:
		return filter{}, badRequest("filter", "filter: unknown operator %q; use one of eq neq lt lte gt gte contains empty not_empty", truncate(op))
	}
	if !hasVal {
		return filter{}, badRequest("filter", "filter: %s needs a value (FIELD:%s:VALUE)", op, op)
	}
	v, err := filterValue(f.field.Type, val)
	if err != nil {
		return filter{}, badRequest("filter", "filter on %q: %v", f.field.Name, err)
	}
	f.value = v
	return f, nil
}

// filterValue parses a filter value as the field's type would hold it, with
// the cells' own parsers; a datetime filter also takes a bare date
// (midnight UTC). Other values are text as a cell may hold it, up to a text
// cell's length (filterText).
func filterValue(t FieldType, s string) (any, error) {
	switch t {
	case TypeNumber:
		return parseNumber(s)
	case TypeCheckbox:
		return parseCheckbox(s)
	case TypeDate:
		return parseDate(s)
	case TypeDatetime:
		if d, err := time.Parse(time.DateOnly, s); err == nil {
			return d, nil
		}
		return parseDatetime(s)
	}
	if p := filterText.Problem(s); p != "" {
		return nil, fmt.Errorf("the value %s", p)
	}
	return s, nil
}

// filterText is what a filter value on a text-like or list field, and a
// cursor's text value, may hold.
var filterText = appdor.Text{Max: maxTextLen, Tabs: true, Lines: true}

func truncate(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}

// cursor is what next_cursor encodes: the sort it belongs to, the sort values
// of the last row of the page, and that row's id.
type cursor struct {
	Sort   string            `json:"s,omitempty"`
	Values []json.RawMessage `json:"v,omitempty"`
	After  uuid.UUID         `json:"a"`
}

func (k cursor) encode() string {
	b, _ := json.Marshal(k)
	return base64.RawURLEncoding.EncodeToString(b)
}

func errCursor() error {
	return badRequest("cursor", "cursor is not one this server gave out for this sort")
}

// parseCursor decodes a cursor. Its values are checked against the sort by
// cursorValues.
func parseCursor(s string) (cursor, error) {
	var k cursor
	if len(s) > maxCursor {
		return cursor{}, errCursor()
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &k)
	}
	if err != nil {
		return cursor{}, errCursor()
	}
	return k, nil
}

// cursorValues turns a cursor's values into typed parameters for keys; nil is
// an empty cell.
func cursorValues(k cursor, keys []sortKey) ([]any, error) {
	if k.Sort != sortSpec(keys) || len(k.Values) != len(keys) {
		return nil, errCursor()
	}
	out := make([]any, len(keys))
	for i, key := range keys {
		raw := k.Values[i]
		if string(raw) == "null" {
			continue
		}
		var err error
		switch kindOf(key.field.Type) {
		case kindNumber:
			var v float64
			err = json.Unmarshal(raw, &v)
			out[i] = v
		case kindBool:
			var v bool
			err = json.Unmarshal(raw, &v)
			out[i] = v
		case kindTime:
			var v time.Time
			err = json.Unmarshal(raw, &v)
			out[i] = v
		default:
			var v string
			err = json.Unmarshal(raw, &v)
			if filterText.Problem(v) != "" {
				err = errCursor()
			}
			out[i] = v
		}
		if err != nil {
			return nil, errCursor()
		}
	}
	return out, nil
}

// sqlBuilder collects a statement's parameters; values never enter the SQL text.
type sqlBuilder struct {
	args []any
}

func (b *sqlBuilder) arg(v any) string {
	b.args = append(b.args, v)
	return "$" + strconv.Itoa(len(b.args))
}

// cell is the raw JSON of a field's cell in row r.
func (b *sqlBuilder) cell(f *Field) string {
	return "(r.cells -> " + b.arg(f.ID.String()) + "::text)"
}

// expr is a field's cell cast for comparison and sorting. A value of another
// JSON type than the field's (which validation never writes) reads as empty.
func (b *sqlBuilder) expr(f *Field) string {
	c := b.cell(f)
	switch kindOf(f.Type) {
	case kindNumber:
		return "(CASE WHEN jsonb_typeof(" + c + ") = 'number' THEN (" + c + ")::float8 END)"
	case kindBool:
		return "(CASE WHEN jsonb_typeof(" + c + ") = 'boolean' THEN (" + c + ")::boolean END)"
	case kindTime:
		return "(CASE WHEN jsonb_typeof(" + c + ") = 'string' THEN (" + c + " #>> '{}')::timestamptz END)"
	case kindList:
		return "(" + c + ")::text"
	}
	return "(CASE WHEN jsonb_typeof(" + c + ") = 'string' THEN " + c + " #>> '{}' END)"
}

// param is a typed parameter for comparing with a field's expr.
func (b *sqlBuilder) param(f *Field, v any) string {
	p := b.arg(v)
	switch kindOf(f.Type) {
	case kindNumber:
		return p + "::float8"
	case kindBool:
		return p + "::boolean"
	case kindTime:
		return p + "::timestamptz"
	}
	return p + "::text"
}

// likeEscape makes s match itself literally in ILIKE.
var likeEscape = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// where renders one filter as a boolean SQL expression.
func (b *sqlBuilder) where(f filter) string {
	switch f.op {
	case OpEmpty, OpNotEmpty:
		// Every parameter must appear in the SQL, or PostgreSQL cannot type it.
		empty := "coalesce(" + b.cell(f.field) + ` IN ('""'::jsonb, '[]'::jsonb, 'null'::jsonb), true)`
		if f.op == OpNotEmpty {
			return "NOT " + empty
		}
		return empty
	}
	if kindOf(f.field.Type) == kindList {
		has := "coalesce(" + b.cell(f.field) + " ? " + b.arg(f.value) + "::text, false)"
		if f.op == OpNeq {
			return "NOT " + has
		}
		return has
	}
	x := b.expr(f.field)
	switch f.op {
	case OpEq:
		return x + " = " + b.param(f.field, f.value)
	case OpNeq:
		return x + " IS DISTINCT FROM " + b.param(f.field, f.value)
	case OpContains:
		return x + " ILIKE " + b.arg("%"+likeEscape.Replace(f.value.(string))+"%") + "::text"
	}
	return x + " " + comparisons[f.op] + " " + b.param(f.field, f.value)
}

// readPlan is a parsed read: what to keep, in which order, from where.
type readPlan struct {
	keys    []sortKey
	filters []filter
	q       string
	after   *cursor
	values  []any
}

// conditions renders the filters and the search as SQL conditions on r.
func (b *sqlBuilder) conditions(p *readPlan) []string {
	var conds []string
	for _, f := range p.filters {
		conds = append(conds, b.where(f))
	}
	if p.q != "" {
		conds = append(conds, "r.search @@ websearch_to_tsquery('simple', "+b.arg(p.q)+"::text)")
	}
	return conds
}

// buildPage renders the keyset page query of a sorted or filtered read: the
// rows after the cursor in (sort keys, id) order, empty cells last, with the
// sort values of each row as extra columns for the next cursor. Like the
// plain read, it reads from the table's row so that an invisible table is
// told from an empty one, and it returns the table's fields signature.
func buildPage(realm, tableID uuid.UUID, p *readPlan, limit int) (string, []any) {
	b := &sqlBuilder{}
	conds := []string{"r.realm_id = " + b.arg(realm), "r.table_id = " + b.arg(tableID)}
	conds = append(conds, b.conditions(p)...)
	var cols, order, outer []string
	exprs := make([]string, len(p.keys))
	for i, k := range p.keys {
		exprs[i] = b.expr(k.field)
		dir := " ASC"
		if k.desc {
			dir = " DESC"
		}
		alias := "s" + strconv.Itoa(i)
		cols = append(cols, exprs[i]+" AS "+alias)
		order = append(order, "("+exprs[i]+") IS NULL", exprs[i]+dir)
		outer = append(outer, "p."+alias+" IS NULL", "p."+alias+dir)
	}
	order = append(order, "r.id")
	outer = append(outer, "p.id")
	if p.after != nil {
		// (k1 after v1) OR (k1 = v1 AND k2 after v2) OR … OR (all equal AND id > after)
		var ors []string
		var eqs []string
		for i, k := range p.keys {
			x, v := exprs[i], p.values[i]
			if v == nil {
				// Empty cells sort last: after an empty one come only empty
				// ones, which tie on this key.
				eqs = append(eqs, x+" IS NULL")
				continue
			}
			pv := b.param(k.field, v)
			cmp := " > "
			if k.desc {
				cmp = " < "
			}
			after := "(" + x + cmp + pv + " OR " + x + " IS NULL)"
			ors = append(ors, "("+strings.Join(append(slices.Clone(eqs), after), " AND ")+")")
			eqs = append(eqs, x+" = "+pv)
		}
		ors = append(ors, "("+strings.Join(append(slices.Clone(eqs), "r.id > "+b.arg(p.after.After)), " AND ")+")")
		conds = append(conds, "("+strings.Join(ors, " OR ")+")")
	}
	sel := "r.id, r.version, r.cells, r.created_at, r.updated_at"
	if len(cols) > 0 {
		sel += ", " + strings.Join(cols, ", ")
	}
	inner := "SELECT " + sel + " FROM rows r WHERE " + strings.Join(conds, " AND ") +
		" ORDER BY " + strings.Join(order, ", ") + " LIMIT " + b.arg(limit+1)
	sql := "SELECT " + fieldsSigSQL + ", p.* FROM tables t LEFT JOIN LATERAL (" + inner + ") p ON true" +
		" WHERE t.realm_id = $1 AND t.id = $2 ORDER BY " + strings.Join(outer, ", ")
	return sql, b.args
}

// buildCount renders the count of the rows a read's filters and search keep,
// with the table's fields signature; no row means no such table.
func buildCount(realm, tableID uuid.UUID, p *readPlan) (string, []any) {
	b := &sqlBuilder{}
	conds := []string{"r.realm_id = " + b.arg(realm), "r.table_id = " + b.arg(tableID)}
	conds = append(conds, b.conditions(p)...)
	return "SELECT " + fieldsSigSQL + ", (SELECT count(*) FROM rows r WHERE " + strings.Join(conds, " AND ") +
		") FROM tables t WHERE t.realm_id = $1 AND t.id = $2", b.args
}

// queryText is what a search (q=) may hold.
var queryText = appdor.Text{Max: maxQueryLen, Tabs: true}

// readParams are a read's query parameters before the table is known.
type readParams struct {
	sort    string
	filters []string
	q       string
	cursor  *cursor
}

func parseReadParams(c echo.Context, withCursor bool) (readParams, error) {
	qp := c.QueryParams()
	p := readParams{sort: qp.Get("sort"), filters: qp["filter"], q: strings.TrimSpace(qp.Get("q"))}
	if len(p.filters) > maxFilters {
		return p, badRequest("filter", "at most %d filters", maxFilters)
	}
	if msg := queryText.Problem(p.q); msg != "" {
		return p, badRequest("q", "q %s", msg)
	}
	if s := qp.Get("cursor"); withCursor && s != "" {
		k, err := parseCursor(s)
		if err != nil {
			return p, err
		}
		p.cursor = &k
	}
	return p, nil
}

// plan checks the parameters against the table's fields.
func (p readParams) plan(t *Table) (*readPlan, error) {
	rp := &readPlan{q: p.q, after: p.cursor}
	var err error
	if rp.keys, err = parseSort(t, p.sort); err != nil {
		return nil, err
	}
	for _, s := range p.filters {
		f, err := parseFilter(t, s)
		if err != nil {
			return nil, err
		}
		rp.filters = append(rp.filters, f)
	}
	if rp.after != nil {
		if rp.values, err = cursorValues(*rp.after, rp.keys); err != nil {
			return nil, err
		}
	}
	return rp, nil
}

// needsFields tells whether a read must know the table's fields: sorting and
// filtering do; a plain read or a search does not.
func (p readParams) needsFields() bool { return p.sort != "" || len(p.filters) > 0 }

// withFields runs a read that depends on the table's fields, on the
// remembered fields when there are some, so that it takes one round trip. run
// reports the fields signature its statement saw and whether the table was
// there. On a stale signature, or a parameter the remembered fields refuse,
// the read runs once more on fresh fields (two more round trips, once per
// change of the table's fields).
func (h *Handler) withFields(c echo.Context, tableID uuid.UUID, run func(t *Table) (sig string, found bool, err error)) error {
	realm := RealmOf(c)
	e, cached := h.schemas.get(realm, tableID)
	for {
		if !cached {
			t, err := h.loadTableForRead(c, tableID)
			if err != nil {
				h.schemas.drop(realm, tableID)
				return err
			}
			e = h.schemas.put(realm, t)
		}
		sig, found, err := run(e.table)
		switch {
		case err != nil && cached && appdor.ErrorCode(err) == appdor.EInvalid:
			cached = false // perhaps a field the remembered ones lack
		case err != nil:
			return err
		case !found:
			h.schemas.drop(realm, tableID)
			return appdor.Errorf(appdor.ENotFound, "table not found")
		case sig != e.sig && cached:
			h.schemas.drop(realm, tableID)
			cached = false
		default:
			// Fresh fields that changed again since they were read: a race
			// any read has; the page matches the fields it was built on.
			return nil
		}
	}
}

// loadTableForRead reads a table's definition in its own round trip.
func (h *Handler) loadTableForRead(c echo.Context, tableID uuid.UUID) (*Table, error) {
	var t *Table
	err := h.db.Query(c.Request().Context(), RealmOf(c), func(rows pgx.Rows) (err error) {
		t, err = scanTable(rows)
		return err
	}, tableSQL, RealmOf(c), tableID)
	return t, err
}

// plainPageSQL reads one keyset page by id, optionally searched, in one
// statement: the table's existence and its rows travel together, so an
// invisible table is told from an empty one without a second round trip, and
// nothing counts the table. has_links says whether a second query for link
// display values is worth making.
const plainPageSQL = `
SELECT r.id, r.version, r.cells, r.created_at, r.updated_at,
       EXISTS (SELECT 1 FROM fields f WHERE f.realm_id = t.realm_id AND f.table_id = t.id AND f.type = 'link')
FROM tables t
LEFT JOIN LATERAL (
    SELECT id, version, cells, created_at, updated_at FROM rows
    WHERE realm_id = t.realm_id AND table_id = t.id AND id > $3
    ORDER BY id LIMIT $4
) r ON true
WHERE t.realm_id = $1 AND t.id = $2
ORDER BY r.id`

// searchPageSQL is plainPageSQL with q=: its own statement, so that the
// planner may take the (realm_id, table_id, search) GIN index.
const searchPageSQL = `
SELECT r.id, r.version, r.cells, r.created_at, r.updated_at,
       EXISTS (SELECT 1 FROM fields f WHERE f.realm_id = t.realm_id AND f.table_id = t.id AND f.type = 'link')
FROM tables t
LEFT JOIN LATERAL (
    SELECT id, version, cells, created_at, updated_at FROM rows
    WHERE realm_id = t.realm_id AND table_id = t.id AND id > $3
      AND search @@ websearch_to_tsquery('simple', $5::text)
    ORDER BY id LIMIT $4
) r ON true
WHERE t.realm_id = $1 AND t.id = $2
ORDER BY r.id`

// page is one read's answer.
type page struct {
	Rows       []Row              `json:"rows"`
	NextCursor *string            `json:"next_cursor"`
	Links      map[string]*string `json:"links"`

	scratch *pageScratch // where Rows and their cells live, until release
}

// newPage returns an empty page with room for limit+1 rows, on memory from
// scratchPool; release gives it back.
func newPage(limit int) *page {
	s := scratchPool.Get().(*pageScratch)
	s.cells.buf = s.cells.buf[:0]
	return &page{Rows: slices.Grow(s.rows[:0], limit+1), Links: map[string]*string{}, scratch: s}
}

// release hands the page's memory back to scratchPool. Nothing may read the
// page's rows after it.
func (p *page) release() {
	s := p.scratch
	if s == nil {
		return
	}
	rows := p.Rows[:cap(p.Rows)]
	p.Rows, p.scratch = nil, nil
	if cap(rows) > MaxLimit+1 || cap(s.cells.buf) > maxArenaBuffer {
		return // an outsized page is left to the collector
	}
	clear(rows) // no stale cells from an older buffer stay reachable
	s.rows, s.cells.buf, s.cells.last = rows[:0], s.cells.buf[:0], nil
	scratchPool.Put(s)
}

// readPage reads one page into out (from newPage): the plain path in one
// round trip, the sorted or filtered path after reading the fields, and link
// display values in one more query when the table has links.
func (h *Handler) readPage(c echo.Context, tableID uuid.UUID, p readParams, limit int, out *page) error {
	ctx, realm := c.Request().Context(), RealmOf(c)
	var hasLinks bool
	var lastValues []any
	var spec string
	if !p.needsFields() {
		after := uuid.Nil
		if p.cursor != nil {
			if p.cursor.Sort != "" || len(p.cursor.Values) > 0 {
				return errCursor()
			}
			after = p.cursor.After
		}
		// pgtype.UUID goes to the driver in binary; a uuid.UUID goes as a
		// driver.Valuer, through a string of its own, three times a read.
		sql, args := plainPageSQL, []any{pgUUID(realm), pgUUID(tableID), pgUUID(after), limit + 1}
		if p.q != "" {
			sql, args = searchPageSQL, append(args, p.q)
		}
		found := false
		sc := newRowScan(limit+1, &out.scratch.cells)
		err := h.db.Query(ctx, realm, func(rows pgx.Rows) error {
			dest := append(sc.dest(), &hasLinks)
			for rows.Next() {
				found = true
				if err := rows.Scan(dest...); err != nil {
					return err
				}
				if r, ok := sc.row(); ok {
					out.Rows = append(out.Rows, r)
				}
			}
			return rows.Err()
		}, sql, args...)
		if err != nil {
			return err
		}
		if !found {
			return appdor.Errorf(appdor.ENotFound, "table not found")
		}
	} else {
		err := h.withFields(c, tableID, func(t *Table) (string, bool, error) {
			plan, err := p.plan(t)
			if err != nil {
				return "", false, err
			}
			spec, hasLinks, lastValues = sortSpec(plan.keys), false, nil
			for _, f := range t.Fields {
				hasLinks = hasLinks || f.Type == TypeLink
			}
			out.Rows, out.scratch.cells.buf = out.Rows[:0], out.scratch.cells.buf[:0]
			sql, args := buildPage(realm, tableID, plan, limit)
			n := len(plan.keys)
			var sig sigScan
			found := false
			sc := newRowScan(limit+1, &out.scratch.cells)
			err = h.db.Query(ctx, realm, func(rows pgx.Rows) error {
				vals := make([]any, n)
				dest := append([]any{&sig}, sc.dest()...)
				for i := range vals {
					dest = append(dest, &vals[i])
				}
				for rows.Next() {
					found = true
					if err := rows.Scan(dest...); err != nil {
						return err
					}
					r, ok := sc.row()
					if !ok {
						continue // the table exists and has no row to show
					}
					out.Rows = append(out.Rows, r)
					if len(out.Rows) == limit {
						lastValues = slices.Clone(vals)
					}
				}
				return rows.Err()
			}, sql, args...)
			return sig.s, found, err
		})
		if err != nil {
			return err
		}
	}
	if len(out.Rows) > limit {
		out.Rows = out.Rows[:limit]
		k := cursor{Sort: spec, After: out.Rows[limit-1].ID}
		for _, v := range lastValues {
			b, err := json.Marshal(v)
			if err != nil {
				return err
			}
			k.Values = append(k.Values, b)
		}
		s := k.encode()
		out.NextCursor = &s
	}
	if hasLinks && len(out.Rows) > 0 {
		var err error
		if out.Links, err = h.linkDisplays(ctx, realm, tableID, out.Rows); err != nil {
			return err
		}
	}
	return nil
}

// pgUUID is id as the driver's own UUID type.
func pgUUID(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

// listRows serves GET /tables/{table}/rows.
func (h *Handler) listRows(c echo.Context) error {
	tableID, err := IDParam(c, "table")
	if err != nil {
		return err
	}
	limit, err := parseLimit(c.QueryParam("limit"))
	if err != nil {
		return err
	}
	p, err := parseReadParams(c, true)
	if err != nil {
		return err
	}
	pg := newPage(limit)
	defer pg.release()
	if err := h.readPage(c, tableID, p, limit, pg); err != nil {
		return err
	}
	return writePage(c, pg)
}

func parseLimit(s string) (int, error) {
	if s == "" {
		return DefaultLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxLimit {
		return 0, badRequest("limit", "limit is a whole number from 1 to %d", MaxLimit)
	}
	return n, nil
}

// countSQL counts a table's rows, or those matching q, in one statement that
// also tells an invisible table (no row) from an empty one.
func countSQL(search bool) string {
	match := ""
	if search {
		match = " AND r.search @@ websearch_to_tsquery('simple', $3::text)"
	}
	return `SELECT (SELECT count(*) FROM rows r WHERE r.realm_id = t.realm_id AND r.table_id = t.id` + match + `)
	        FROM tables t WHERE t.realm_id = $1 AND t.id = $2`
}

func qArg(q string) []any {
	if q == "" {
		return nil
	}
	return []any{q}
}

// countRows serves GET /tables/{table}/count: the rows a read with the same
// filters and search would walk. It is the only place that counts.
func (h *Handler) countRows(c echo.Context) error {
	tableID, err := IDParam(c, "table")
	if err != nil {
		return err
	}
	p, err := parseReadParams(c, false)
	if err != nil {
		return err
	}
	ctx, realm := c.Request().Context(), RealmOf(c)
	var n *int64
	if len(p.filters) == 0 {
		found := false
		err = h.db.Query(ctx, realm, func(rows pgx.Rows) error {
			for rows.Next() {
				found = true
				if err := rows.Scan(&n); err != nil {
					return err
				}
			}
			return rows.Err()
		}, countSQL(p.q != ""), append([]any{realm, tableID}, qArg(p.q)...)...)
		if err == nil && !found {
			err = appdor.Errorf(appdor.ENotFound, "table not found")
		}
	} else {
		p.sort = ""
		err = h.withFields(c, tableID, func(t *Table) (string, bool, error) {
			plan, err := p.plan(t)
			if err != nil {
				return "", false, err
			}
			sql, args := buildCount(realm, tableID, plan)
			var sig string
			found := false
			err = h.db.Query(ctx, realm, func(rows pgx.Rows) error {
				for rows.Next() {
					found = true
					if err := rows.Scan(&sig, &n); err != nil {
						return err
					}
				}
				return rows.Err()
			}, sql, args...)
			return sig, found, err
		})
	}
	if err != nil {
		return err
	}
	var count int64
	if n != nil {
		count = *n
	}
	return c.JSON(http.StatusOK, map[string]int64{"count": count})
}
