package grid

// The parameters of a read (rows and count): sort, filter, search, cursor
// and limit, parsed and checked against the table's fields. read.go turns
// them into SQL.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
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

// queryText is what a search (q=) may hold.
var queryText = appdor.Text{Max: maxQueryLen, Tabs: true}

// readParams are a read's query parameters before the table is known.
type readParams struct {
	sort    string
	filters []string
	q       string
	cursor  *cursor
	fields  []string    // the fields= projection: field ids or names, as given
	ids     []uuid.UUID // ids=: just these rows, for a client refreshing the ones it was told changed
}

// maxIDs bounds an ids= read, as a page's limit does.
const maxIDs = 100

// parseReadParams reads a read's parameters; page is whether it reads a page,
// which takes cursor= and fields= (a count takes neither).
func parseReadParams(c echo.Context, page bool) (readParams, error) {
	qp := c.QueryParams()
	p := readParams{sort: qp.Get("sort"), filters: qp["filter"], q: strings.TrimSpace(qp.Get("q"))}
	if len(p.filters) > maxFilters {
		return p, badRequest("filter", "at most %d filters", maxFilters)
	}
	if msg := queryText.Problem(p.q); msg != "" {
		return p, badRequest("q", "q %s", msg)
	}
	if s := qp.Get("fields"); page && s != "" {
		p.fields = strings.Split(s, ",")
		if len(p.fields) > maxProjected {
			return p, badRequest("fields", "fields= names at most %d fields", maxProjected)
		}
	}
	if s := qp.Get("ids"); page && s != "" {
		parts := strings.Split(s, ",")
		if len(parts) > maxIDs {
			return p, badRequest("ids", "ids= names at most %d rows", maxIDs)
		}
		p.ids = make([]uuid.UUID, len(parts))
		for i, part := range parts {
			id, err := uuid.Parse(strings.TrimSpace(part))
			if err != nil {
				return p, badRequest("ids", "ids= holds row ids separated by commas; %q is not one", truncate(part))
			}
			p.ids[i] = id
		}
		if qp.Get("cursor") != "" {
			return p, badRequest("ids", "an ids= read is one page; it takes no cursor")
		}
	}
	if s := qp.Get("cursor"); page && s != "" {
		k, err := parseCursor(s)
		if err != nil {
			return p, err
		}
		p.cursor = &k
	}
	return p, nil
}

// needsFields tells whether a read must know the table's fields: sorting,
// filtering and a projection do; a plain read or a search does not.
func (p readParams) needsFields() bool {
	return p.sort != "" || len(p.filters) > 0 || len(p.fields) > 0
}

// maxProjected bounds a fields= projection, as a table's fields are bounded.
const maxProjected = 500

// parseProjection checks a fields= projection against t: each a field of
// t by id or name (as sort= names them), none twice. It returns their ids,
// the ids of t's other fields, and the ids of the link fields it keeps.
func parseProjection(t *Table, refs []string) (keep, drop []string, links []uuid.UUID, err error) {
	seen := make(map[uuid.UUID]bool, len(refs))
	for _, ref := range refs {
		ref = strings.TrimSpace(ref)
		f := lookupField(t, ref)
		if f == nil {
			return nil, nil, nil, badRequest("fields", "fields: no field %q in this table", truncate(ref))
		}
		if seen[f.ID] {
			return nil, nil, nil, badRequest("fields", "fields: field %q is listed twice", truncate(ref))
		}
		seen[f.ID] = true
		keep = append(keep, f.ID.String())
		if f.Type == TypeLink {
			links = append(links, f.ID)
		}
	}
	drop = make([]string, 0, len(t.Fields)-len(keep))
	for _, f := range t.Fields {
		if !seen[f.ID] {
			drop = append(drop, f.ID.String())
		}
	}
	return keep, drop, links, nil
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
