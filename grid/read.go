package grid

// The read path: GET /tables/{table}/rows and GET /tables/{table}/count, top
// to bottom. A handler parses its parameters (readparams.go), builds a
// readQuery — checked against the table's fields when it sorts or filters —
// renders it to one statement, runs it in the realm's RLS transaction, scans
// each row with one scanner and encodes the page (encode.go).
//
// Every statement starts from the table's own row, which RLS shows only to
// its realm, and LEFT JOINs the rows it keeps: an invisible table (no row at
// all) is told from an empty one (one row of NULLs) in the same round trip,
// and nothing counts the table unless the client asks /count.

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
)

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
	if len(p.ids) > 0 {
		limit = len(p.ids) // every row named, and no next page
	}
	pg := newPage(limit)
	defer pg.release()
	if err := h.readPage(c, tableID, p, limit, pg); err != nil {
		return err
	}
	return writePage(c, pg)
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
	p.sort = "" // a count does not sort
	ctx, realm := c.Request().Context(), RealmOf(c)
	var n int64
	err = h.withQuery(c, tableID, p, 0, func(q *readQuery) (string, bool, error) {
		sql, args := q.countSQL()
		var sig sigScan
		found := false
		err := h.db.Query(ctx, realm, func(rows pgx.Rows) error {
			for rows.Next() {
				found = true
				if err := rows.Scan(&sig, &n); err != nil {
					return err
				}
			}
			return rows.Err()
		}, sql, args...)
		return sig.s, found, err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]int64{"count": n})
}

// readPage reads one page into out (from newPage) in one round trip, and
// the link display values in one more when the table has link fields.
func (h *Handler) readPage(c echo.Context, tableID uuid.UUID, p readParams, limit int, out *page) error {
	ctx, realm := c.Request().Context(), RealmOf(c)
	var (
		q        *readQuery
		hasLinks bool
		last     []any // the sort values of the page's last row
	)
	err := h.withQuery(c, tableID, p, limit, func(rq *readQuery) (string, bool, error) {
		q, last = rq, nil
		out.Rows, out.scratch.cells.buf = out.Rows[:0], out.scratch.cells.buf[:0]
		sql, args := q.pageSQL()
		sc := newPageScan(limit+1, len(q.keys), &out.scratch.cells)
		found := false
		err := h.db.Query(ctx, realm, func(rows pgx.Rows) error {
			for rows.Next() {
				found = true
				if err := rows.Scan(sc.dest...); err != nil {
					return err
				}
				r, ok := sc.row()
				if !ok {
					continue // the table is there and has no row to show
				}
				out.Rows = append(out.Rows, r)
				if len(out.Rows) == limit && len(sc.values) > 0 {
					last = slices.Clone(sc.values)
				}
			}
			return rows.Err()
		}, sql, args...)
		hasLinks = sc.hasLinks
		return sc.sig.s, found, err
	})
	if err != nil {
		return err
	}
	if len(out.Rows) > limit {
		out.Rows = out.Rows[:limit]
		s, err := q.next(out.Rows[limit-1].ID, last)
		if err != nil {
			return err
		}
		out.NextCursor = &s
	}
	if q.project != nil {
		hasLinks = len(q.projectLinks) > 0
	}
	if hasLinks && len(out.Rows) > 0 {
		if out.Links, err = h.linkDisplays(ctx, realm, tableID, out.Rows, q.projectLinks); err != nil {
			return err
		}
	}
	return nil
}

// next is the cursor of the page after the one whose last row is id, with
// that row's sort values last.
func (q *readQuery) next(id uuid.UUID, last []any) (string, error) {
	k := cursor{Sort: sortSpec(q.keys), After: id}
	for _, v := range last {
		b, err := json.Marshal(v)
		if err != nil {
			return "", err
		}
		k.Values = append(k.Values, b)
	}
	return k.encode(), nil
}

// withQuery builds the read's query and runs it with run, which reports the
// fields signature its statement saw and whether the table was there. A
// read that neither sorts nor filters needs no fields and runs once. One
// that does runs on the table's remembered fields (schema.go), so that it
// too takes one round trip; on a stale signature, or a parameter the
// remembered fields refuse, it runs once more on fresh fields (two more
// round trips, once per change of the table's fields).
func (h *Handler) withQuery(c echo.Context, tableID uuid.UUID, p readParams, limit int, run func(*readQuery) (sig string, found bool, err error)) error {
	realm := RealmOf(c)
	if !p.needsFields() {
		q, err := p.query(realm, tableID, nil, limit)
		if err != nil {
			return err
		}
		if _, found, err := run(q); err != nil || found {
			return err
		}
		return appdor.Errorf(appdor.ENotFound, "table not found")
	}
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
		var (
			sig   string
			found bool
		)
		q, err := p.query(realm, tableID, e.table, limit)
		if err == nil {
			sig, found, err = run(q)
		}
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
// CheckTable returns a not_found error unless the request's realm has the
// table; RLS decides.
func (h *Handler) CheckTable(c echo.Context, id uuid.UUID) error {
	_, err := h.loadTableForRead(c, id)
	return err
}

func (h *Handler) loadTableForRead(c echo.Context, tableID uuid.UUID) (*Table, error) {
	var t *Table
	err := h.db.Query(c.Request().Context(), RealmOf(c), func(rows pgx.Rows) (err error) {
		t, err = scanTable(rows)
		return err
	}, tableSQL, RealmOf(c), tableID)
	return t, err
}

// readQuery is one read, checked against the table's fields: the rows of
// realm's table that the filters and the search keep, in the sort keys'
// order, after the cursor, at most limit+1 of them (one more than a page,
// to know whether a next one exists).
type readQuery struct {
	realm, table uuid.UUID
	filters      []filter
	q            string    // the search, if any
	keys         []sortKey // ties fall to the row id
	after        *cursor   // where the page starts; nil for the first page
	values       []any     // the cursor's sort values, typed as keys need
	limit        int
	// fields is whether the statement reports the fields signature, which
	// a read built on remembered fields checks.
	fields bool
	// project is the fields= projection, field ids (nil: every cell);
	// drop the table's other fields, whose cells the page leaves out; and
	// projectLinks the link fields among the projected.
	project, drop []string
	projectLinks  []uuid.UUID
	ids           []uuid.UUID // ids=: only these rows
	// where are conditions of another front end's own (records.go), on
	// the row r.
	where []Condition
}

// query checks the parameters against t's fields; t is nil for a read
// that needs none (needsFields).
func (p readParams) query(realm, tableID uuid.UUID, t *Table, limit int) (*readQuery, error) {
	q := &readQuery{realm: realm, table: tableID, q: p.q, after: p.cursor, limit: limit, fields: t != nil, ids: p.ids}
	if t == nil {
		if p.cursor != nil && (p.cursor.Sort != "" || len(p.cursor.Values) > 0) {
			return nil, errCursor()
		}
		return q, nil
	}
	var err error
	if q.keys, err = parseSort(t, p.sort); err != nil {
		return nil, err
	}
	for _, s := range p.filters {
		f, err := parseFilter(t, s)
		if err != nil {
			return nil, err
		}
		q.filters = append(q.filters, f)
	}
	if q.after != nil {
		if q.values, err = cursorValues(*q.after, q.keys); err != nil {
			return nil, err
		}
	}
	if len(p.fields) > 0 {
		if q.project, q.drop, q.projectLinks, err = parseProjection(t, p.fields); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// pageSQL renders the page's statement. Its columns are the fields
// signature (” unless q.fields), whether the table has link fields, the
// row's id, version, cells, created_at and updated_at, then the row's value
// of each sort key (for the next cursor); a table with no row to show gives
// one row of NULLs after the first two.
//
// The first two are the table's, computed once in the subquery m (OFFSET 0
// keeps the planner from pulling them up into every row of the page). The
// order is the sort keys', empty cells last, then the row id; a cursor
// keeps the rows that come after its row in that order.
func (q *readQuery) pageSQL() (string, []any) {
	plain := len(q.keys) == 0 && len(q.filters) == 0 && q.project == nil && q.ids == nil && q.where == nil
	var shape uint8
	if plain {
		shape = boolBit(q.q != "", 1) | boolBit(q.after != nil, 2) | boolBit(q.fields, 4)
		if st, ok := plainStatements.Load(shape); ok {
			return st.(*statement).with(q)
		}
	}
	b := &sqlBuilder{q: q}
	realm, table := b.named("realm"), b.named("table")
	conds := append([]string{"r.realm_id = t.realm_id", "r.table_id = t.id"}, q.conditions(b)...)
	var cols, order, outer []string
	exprs := make([]string, len(q.keys))
	for i, k := range q.keys {
		exprs[i] = b.expr(k.field)
		dir := " ASC"
		if k.desc {
			dir = " DESC"
		}
		alias := "s" + strconv.Itoa(i)
		cols = append(cols, ", "+exprs[i]+" AS "+alias)
		order = append(order, "("+exprs[i]+") IS NULL", exprs[i]+dir)
		outer = append(outer, "p."+alias+" IS NULL", "p."+alias+dir)
	}
	order = append(order, "r.id")
	outer = append(outer, "p.id")
	if q.after != nil {
		conds = append(conds, q.afterCursor(b, exprs))
	}
	sig := "''::text"
	if q.fields {
		sig = fieldsSigSQL
	}
	sql := `SELECT m.sig, m.has_links, p.id, p.version, p.cells, p.created_at, p.updated_at`
	for i := range q.keys {
		sql += ", p.s" + strconv.Itoa(i)
	}
	cells := "r.cells"
	if q.project != nil {
		// The other fields' cells taken out by the database, so the page's
		// bytes pass through as they do unprojected. A row's cells hold
		// only its table's fields (deleting a field deletes its cells), and
		// the statement reports the fields signature: a read on fields that
		// changed since is read again on fresh ones.
		cells = "r.cells - " + b.arg(q.drop) + "::text[] AS cells"
	}
	sql += `
FROM tables t
CROSS JOIN LATERAL (SELECT ` + sig + ` AS sig,
    EXISTS (SELECT 1 FROM fields f WHERE f.realm_id = t.realm_id AND f.table_id = t.id AND f.type = 'link') AS has_links
    OFFSET 0) m
LEFT JOIN LATERAL (
    SELECT r.id, r.version, ` + cells + `, r.created_at, r.updated_at` + strings.Join(cols, "") + `
    FROM rows r
    WHERE ` + strings.Join(conds, " AND ") + `
    ORDER BY ` + strings.Join(order, ", ") + `
    LIMIT ` + b.named("limit") + `
) p ON true
WHERE t.realm_id = ` + realm + ` AND t.id = ` + table + `
ORDER BY ` + strings.Join(outer, ", ")
	if plain {
		plainStatements.Store(shape, &statement{sql: sql, names: b.names})
	}
	return sql, b.args
}

// plainStatements keeps the statement of each plain read (no sort, no
// filter) by its shape: whether it searches, has a cursor and reports the
// fields signature. Every parameter of such a statement is named, so its
// text depends on its shape alone; rendering it each time took ten
// allocations of a page read's 78.
var plainStatements sync.Map // shape (uint8) → *statement

// statement is a rendered statement whose parameters are all named.
type statement struct {
	sql   string
	names []string
}

// with returns the statement and its parameters for q.
func (st *statement) with(q *readQuery) (string, []any) {
	args := make([]any, len(st.names))
	for i, n := range st.names {
		args[i] = q.param(n)
	}
	return st.sql, args
}

func boolBit(b bool, bit uint8) uint8 {
	if b {
		return bit
	}
	return 0
}

// afterCursor renders the keyset condition of a page after the cursor, with
// the keys' expressions exprs: (k1 after v1) OR (k1 = v1 AND k2 after v2)
// OR … OR (every key equal AND id after the cursor's row).
func (q *readQuery) afterCursor(b *sqlBuilder, exprs []string) string {
	var ors, eqs []string
	for i, k := range q.keys {
		x, v := exprs[i], q.values[i]
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
	id := "r.id > " + b.named("after")
	if len(eqs) == 0 && len(ors) == 0 {
		return id
	}
	ors = append(ors, "("+strings.Join(append(eqs, id), " AND ")+")")
	return "(" + strings.Join(ors, " OR ") + ")"
}

// countSQL renders the count of the rows the filters and the search keep,
// with the fields signature (” unless q.fields); no row means no such
// table.
func (q *readQuery) countSQL() (string, []any) {
	b := &sqlBuilder{q: q}
	realm, table := b.named("realm"), b.named("table")
	conds := append([]string{"r.realm_id = t.realm_id", "r.table_id = t.id"}, q.conditions(b)...)
	sig := "''::text"
	if q.fields {
		sig = fieldsSigSQL
	}
	return `SELECT ` + sig + `, (SELECT count(*) FROM rows r WHERE ` + strings.Join(conds, " AND ") + `)
FROM tables t WHERE t.realm_id = ` + realm + ` AND t.id = ` + table, b.args
}

// conditions renders the filters and the search as SQL conditions on r. A
// search has its own condition on the search column, so that the planner
// may take the (realm_id, table_id, search) GIN index.
func (q *readQuery) conditions(b *sqlBuilder) []string {
	var conds []string
	for _, f := range q.filters {
		conds = append(conds, b.where(f))
	}
	if q.q != "" {
		conds = append(conds, "r.search @@ websearch_to_tsquery('simple', "+b.named("q")+"::text)")
	}
	if q.ids != nil {
		conds = append(conds, "r.id = ANY("+b.named("ids")+"::uuid[])")
	}
	for _, w := range q.where {
		conds = append(conds, "("+w(b)+")")
	}
	return conds
}

// param is the value of the read's parameter called name: the realm, the
// table, the search q, the cursor's row (after) or the row limit.
func (q *readQuery) param(name string) any {
	switch name {
	case "realm":
		return pgUUID(q.realm)
	case "table":
		return pgUUID(q.table)
	case "q":
		return q.q
	case "after":
		return pgUUID(q.after.After)
	case "limit":
		return q.limit + 1
	case "ids":
		return q.ids
	}
	panic("grid: a read has no parameter " + name)
}

// sqlBuilder collects a statement's parameters; values never enter the SQL
// text. A named parameter (readQuery.param) is passed once however often
// the SQL names it; the others are a filter's or a cursor's values.
type sqlBuilder struct {
	q     *readQuery
	args  []any
	names []string // names[i] names args[i]; "" for an anonymous one
}

// named returns the placeholder of the read's parameter called name.
func (b *sqlBuilder) named(name string) string {
	if i := slices.Index(b.names, name); i >= 0 {
		return "$" + strconv.Itoa(i+1)
	}
	return b.add(name, b.q.param(name))
}

// arg returns the placeholder of a new anonymous parameter v.
func (b *sqlBuilder) arg(v any) string { return b.add("", v) }

func (b *sqlBuilder) add(name string, v any) string {
	b.args, b.names = append(b.args, v), append(b.names, name)
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

// pgUUID is id as the driver's own UUID type, which goes to the database in
// binary; a uuid.UUID goes as a driver.Valuer, through a string of its own.
func pgUUID(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

// pageScan is where a page read scans each row, in pageSQL's columns. The
// row's columns are NULL when the table has no row to show, so they are
// pgtype values, which scan without an allocation where pointers took one or
// more a column a row; the cells go into a cellArena, the signature into a
// sigScan.
type pageScan struct {
	sig      sigScan
	hasLinks bool
	id       pgtype.UUID
	version  pgtype.Int8
	cells    *cellArena
	created  pgtype.Timestamptz
	updated  pgtype.Timestamptz
	values   []any // the row's sort values
	dest     []any // rows.Scan's destinations
}

// newPageScan returns a pageScan for about n rows with keys sort keys,
// whose cells go into cells.
func newPageScan(n, keys int, cells *cellArena) *pageScan {
	cells.left = n
	s := &pageScan{cells: cells, values: make([]any, keys)}
	s.dest = append(make([]any, 0, 7+keys), &s.sig, &s.hasLinks, &s.id, &s.version, s.cells, &s.created, &s.updated)
	for i := range s.values {
		s.dest = append(s.dest, &s.values[i])
	}
	return s
}

// row is the row last scanned, and false when it was the NULL row of a
// table with no row to show.
func (s *pageScan) row() (Row, bool) {
	if !s.id.Valid {
		return Row{}, false
	}
	return Row{
		ID:        s.id.Bytes,
		Version:   s.version.Int64,
		Cells:     s.cells.last,
		CreatedAt: s.created.Time,
		UpdatedAt: s.updated.Time,
	}, true
}

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
