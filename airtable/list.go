package airtable

// Listing records: GET /v0/{base}/{table} with its options in the query
// string (fields[]=…, sort[0][field]=…), and POST …/listRecords with the
// same options in a JSON body, for queries too long for a URL.

import (
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor/grid"
)

// listOptions are a list's options, as Airtable names them.
type listOptions struct {
	PageSize              *int         `json:"pageSize"`
	MaxRecords            *int         `json:"maxRecords"`
	Offset                string       `json:"offset"`
	Fields                []string     `json:"fields"`
	Sort                  []sortOption `json:"sort"`
	FilterByFormula       string       `json:"filterByFormula"`
	CellFormat            string       `json:"cellFormat"`
	TimeZone              string       `json:"timeZone"`
	UserLocale            string       `json:"userLocale"`
	View                  string       `json:"view"`
	ReturnFieldsByFieldID bool         `json:"returnFieldsByFieldId"`
	RecordMetadata        []string     `json:"recordMetadata"`
	// Method is what Airtable's npm client sends along when told to list
	// by POST; it changes nothing.
	Method string `json:"method"`
}

type sortOption struct {
	Field     string `json:"field"`
	Direction string `json:"direction"`
}

// maxSort bounds a list's sort keys, as the grid API's sort= does.
const maxSort = 5

var sortParam = regexp.MustCompile(`^sort\[(\d{1,2})\]\[(field|direction)\]$`)

// queryOptions reads a list's options from its query string, in the forms
// Airtable's clients write them: fields[]=A&fields[]=B (or fields[0]=A),
// sort[0][field]=A&sort[0][direction]=desc.
func queryOptions(c echo.Context) (listOptions, error) {
	var o listOptions
	qp := c.QueryParams()
	keys := make([]string, 0, len(qp))
	for k := range qp {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	sorts := map[int]*sortOption{}
	fieldsAt := map[int]string{}
	for _, k := range keys {
		v := qp.Get(k)
		switch {
		case k == "pageSize" || k == "maxRecords" || k == "limit":
			n, err := strconv.Atoi(v)
			if err != nil {
				typ := TInvalidPageSize
				if k == "maxRecords" {
					typ = TInvalidMaxRecords
				}
				return o, fail(typ, "%s must be a whole number, not %q", k, truncate(v))
			}
			if k == "pageSize" || k == "limit" && o.PageSize == nil {
				o.PageSize = &n // limit is the old name Airtable's npm client still sends
			} else {
				o.MaxRecords = &n
			}
		case k == "offset":
			o.Offset = v
		case k == "fields[]" || k == "fields":
			o.Fields = append(o.Fields, qp[k]...)
		case strings.HasPrefix(k, "fields[") && strings.HasSuffix(k, "]"):
			i, err := strconv.Atoi(k[len("fields[") : len(k)-1])
			if err != nil || i < 0 || i > 500 {
				return o, fail(TInvalidRequest, "%s is not a parameter; use fields[]=NAME", truncate(k))
			}
			fieldsAt[i] = v
		case sortParam.MatchString(k):
			m := sortParam.FindStringSubmatch(k)
			i, _ := strconv.Atoi(m[1])
			s := sorts[i]
			if s == nil {
				s = &sortOption{}
				sorts[i] = s
			}
			if m[2] == "field" {
				s.Field = v
			} else {
				s.Direction = v
			}
		case strings.HasPrefix(k, "sort"):
			return o, fail(TInvalidSort, "%s is not a sort parameter; use sort[0][field]=NAME&sort[0][direction]=asc", truncate(k))
		case k == "filterByFormula":
			o.FilterByFormula = v
		case k == "cellFormat":
			o.CellFormat = v
		case k == "timeZone":
			o.TimeZone = v
		case k == "userLocale":
			o.UserLocale = v
		case k == "view":
			o.View = v
		case k == "returnFieldsByFieldId":
			o.ReturnFieldsByFieldID = boolParam(v)
		case k == "recordMetadata[]" || k == "recordMetadata":
			o.RecordMetadata = append(o.RecordMetadata, qp[k]...)
		}
	}
	if len(fieldsAt) > 0 {
		idx := make([]int, 0, len(fieldsAt))
		for i := range fieldsAt {
			idx = append(idx, i)
		}
		sort.Ints(idx)
		for _, i := range idx {
			o.Fields = append(o.Fields, fieldsAt[i])
		}
	}
	if len(sorts) > 0 {
		idx := make([]int, 0, len(sorts))
		for i := range sorts {
			idx = append(idx, i)
		}
		sort.Ints(idx)
		for _, i := range idx {
			o.Sort = append(o.Sort, *sorts[i])
		}
	}
	return o, nil
}

// listRecords serves GET /v0/{base}/{table}.
func (h *Handler) listRecords(c echo.Context) error {
	o, err := queryOptions(c)
	if err != nil {
		return err
	}
	return h.list(c, o)
}

// listRecordsPost serves POST /v0/{base}/{table}/listRecords.
func (h *Handler) listRecordsPost(c echo.Context) error {
	var o listOptions
	if err := decodeBody(c, &o); err != nil {
		return err
	}
	return h.list(c, o)
}

// list answers one page of a list: {"records":[…],"offset":…}, offset
// only when more records follow.
func (h *Handler) list(c echo.Context, o listOptions) error {
	t, err := h.table(c)
	if err != nil {
		return err
	}
	if o.CellFormat != "" && o.CellFormat != "json" {
		return fail(TCellFormat, "cellFormat %q is not supported; Appdor answers cellFormat=json", truncate(o.CellFormat))
	}
	q := grid.Query{Limit: MaxPageSize}
	if o.PageSize != nil {
		if *o.PageSize < 1 || *o.PageSize > MaxPageSize {
			return fail(TInvalidPageSize, "pageSize is between 1 and %d, not %d", MaxPageSize, *o.PageSize)
		}
		q.Limit = *o.PageSize
	}
	left := -1 // records maxRecords still allows; -1 for no bound
	if o.MaxRecords != nil {
		if *o.MaxRecords < 1 {
			return fail(TInvalidMaxRecords, "maxRecords is at least 1, not %d", *o.MaxRecords)
		}
		left = *o.MaxRecords
	}
	if o.Offset != "" {
		cur, n, err := parseOffset(o.Offset)
		if err != nil {
			return err
		}
		q.Cursor = cur
		if n >= 0 {
			left = n
		}
	}
	if left >= 0 {
		q.Limit = min(q.Limit, left)
	}
	if len(o.Sort) > maxSort {
		return fail(TInvalidSort, "sort by at most %d fields", maxSort)
	}
	seen := map[uuid.UUID]bool{}
	for i, s := range o.Sort {
		f := fieldRef(t, s.Field)
		if f == nil {
			return fail(TUnknownField, "Unknown field name: %q", truncate(s.Field))
		}
		if seen[f.ID] {
			return fail(TInvalidSort, "sort[%d] sorts by %q again", i, f.Name)
		}
		seen[f.ID] = true
		var desc bool
		switch strings.ToLower(s.Direction) {
		case "", "asc":
		case "desc":
			desc = true
		default:
			return fail(TInvalidSort, "sort[%d][direction] is asc or desc, not %q", i, truncate(s.Direction))
		}
		q.Sort = append(q.Sort, grid.Sort{Field: f, Desc: desc})
	}
	var keep map[uuid.UUID]bool
	if o.Fields != nil {
		keep = map[uuid.UUID]bool{}
		q.Fields = []uuid.UUID{}
		for _, name := range o.Fields {
			f := fieldRef(t, name)
			if f == nil {
				return fail(TUnknownField, "Unknown field name: %q", truncate(name))
			}
			if !keep[f.ID] {
				keep[f.ID] = true
				q.Fields = append(q.Fields, f.ID)
			}
		}
	}
	if strings.TrimSpace(o.FilterByFormula) != "" {
		if q.Where, err = whereFormula(t, o.FilterByFormula); err != nil {
			return err
		}
	}
	rows, next, err := h.grid.Select(c.Request().Context(), realmOf(c), t, q)
	if err != nil {
		if isCursorError(err) {
			return fail(TInvalidOffset, "The offset %q is not one this server gave out for this list (its sort and filter must stay the same)", truncate(o.Offset))
		}
		return err
	}
	out := struct {
		Records []record `json:"records"`
		Offset  string   `json:"offset,omitempty"`
	}{Records: make([]record, 0, len(rows))}
	for _, r := range rows {
		rec, err := recordOf(t, r, o.ReturnFieldsByFieldID, keep)
		if err != nil {
			return err
		}
		out.Records = append(out.Records, rec)
	}
	if left >= 0 {
		left -= len(rows)
	}
	if next != "" && left != 0 {
		out.Offset = formatOffset(next, left)
	}
	return c.JSON(http.StatusOK, out)
}

// An offset is the grid's keyset cursor, then, under maxRecords, a dot and
// the number of records still to give.
func formatOffset(cursor string, left int) string {
	if left < 0 {
		return cursor
	}
	return cursor + "." + strconv.Itoa(left)
}

func parseOffset(s string) (cursor string, left int, err error) {
	cursor, n, ok := strings.Cut(s, ".")
	if !ok {
		return cursor, -1, nil
	}
	left, err = strconv.Atoi(n)
	if err != nil || left < 1 || cursor == "" {
		return "", 0, fail(TInvalidOffset, "The offset %q is not one this server gave out", truncate(s))
	}
	return cursor, left, nil
}

// isCursorError tells a cursor the grid refused.
func isCursorError(err error) bool {
	ae := asError(err)
	if ae == nil {
		return false
	}
	d, ok := ae.Details.(map[string]string)
	return ok && d["parameter"] == "cursor"
}
