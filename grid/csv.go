package grid

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
)

// CSV import and export bounds.
const (
	// DefaultCSVBodyLimit bounds an import's body when the Handler sets none.
	DefaultCSVBodyLimit = 1 << 30
	// csvBatch is the rows an import writes per transaction, and an export
	// reads per query.
	csvBatch = 1000
	// maxCSVErrors caps the per-row errors an import answers with.
	maxCSVErrors = 100
)

// OwnsBodyLimit tells the server's general body limit to let the CSV import
// through: the import streams its body in bounded memory and applies its own,
// larger limit (Handler.CSVBodyLimit).
func OwnsBodyLimit(c echo.Context) bool {
	return c.Request().Method == http.MethodPost && strings.HasSuffix(c.Path(), "/tables/:table/csv")
}

// csvValue renders a stored cell as CSV text, in the form importCSV reads back.
func csvValue(f *Field, raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	switch f.Type {
	case TypeNumber, TypeCheckbox:
		return string(raw)
	case TypeMultiSelect, TypeLink:
		var ss []string
		if json.Unmarshal(raw, &ss) != nil {
			return ""
		}
		for _, s := range ss {
			if strings.Contains(s, ",") || strings.TrimSpace(s) != s {
				return string(raw) // a JSON list keeps such choices whole
			}
		}
		return strings.Join(ss, ", ")
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// csvCell turns CSV text into a normalized cell value for f; "" is an empty
// cell (nil).
func csvCell(f *Field, s string) (any, error) {
	if s == "" {
		return nil, nil
	}
	var v any = s
	switch f.Type {
	case TypeNumber:
		n, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || math.IsInf(n, 0) || math.IsNaN(n) {
			return nil, fmt.Errorf("expected a number")
		}
		v = n
	case TypeCheckbox:
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "true", "yes", "1", "x", "checked":
			v = true
		case "false", "no", "0", "":
			v = false
		default:
			return nil, fmt.Errorf("expected true or false")
		}
	case TypeMultiSelect, TypeLink:
		if strings.HasPrefix(strings.TrimSpace(s), "[") {
			return f.normalize(json.RawMessage(s))
		}
		var list []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				list = append(list, p)
			}
		}
		v = list
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("unreadable value")
	}
	return f.normalize(b)
}

// exportCSV streams the table as CSV, a header of field names then one line a
// row, reading a page at a time by id: memory stays bounded whatever the
// table's size, and each page is its own short read.
func (h *Handler) exportCSV(c echo.Context) error {
	tableID, err := idParam(c, "table")
	if err != nil {
		return err
	}
	t, err := h.loadTableForRead(c, tableID)
	if err != nil {
		return err
	}
	ctx, realm := c.Request().Context(), realmOf(c)
	res := c.Response()
	res.Header().Set(echo.HeaderContentType, "text/csv; charset=utf-8")
	res.Header().Set(echo.HeaderContentDisposition, mime.FormatMediaType("attachment", map[string]string{"filename": t.Name + ".csv"}))
	res.WriteHeader(http.StatusOK)
	w := csv.NewWriter(res)
	record := make([]string, len(t.Fields))
	for i, f := range t.Fields {
		record[i] = f.Name
	}
	if err := w.Write(record); err != nil {
		return err
	}
	keys := make([]string, len(t.Fields))
	for i, f := range t.Fields {
		keys[i] = f.ID.String()
	}
	after := uuid.Nil
	for {
		n := 0
		err := h.db.Query(ctx, realm, func(rows pgx.Rows) error {
			var id uuid.UUID
			var cells []byte
			_, err := pgx.ForEachRow(rows, []any{&id, &cells}, func() error {
				n++
				after = id
				var m map[string]json.RawMessage
				if err := json.Unmarshal(cells, &m); err != nil {
					return err
				}
				for i := range t.Fields {
					record[i] = csvValue(&t.Fields[i], m[keys[i]])
				}
				return w.Write(record)
			})
			return err
		}, `SELECT id, cells FROM rows WHERE realm_id = $1 AND table_id = $2 AND id > $3 ORDER BY id LIMIT $4`,
			realm, tableID, after, csvBatch)
		if err != nil {
			return err
		}
		w.Flush()
		if err := w.Error(); err != nil {
			return err
		}
		res.Flush()
		if n < csvBatch {
			return nil
		}
	}
}

// csvError is one refused line of an import.
type csvError struct {
	Line    int    `json:"line"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// csvImport is an import's answer.
type csvImport struct {
	Inserted        int        `json:"inserted"`
	Failed          int        `json:"failed"`
	Errors          []csvError `json:"errors"`
	ErrorsTruncated bool       `json:"errors_truncated"`
}

func (r *csvImport) fail(e csvError) {
	r.Failed++
	if len(r.Errors) < maxCSVErrors {
		r.Errors = append(r.Errors, e)
	} else {
		r.ErrorsTruncated = true
	}
}

// importCSV reads a CSV body (a header of field names, then rows) as a
// stream and writes it in batches of csvBatch rows, each its own transaction
// under a background seat of the Gate. A row with an invalid cell is skipped and reported
// with its line; the others are written. Memory holds one batch, never the file.
func (h *Handler) importCSV(c echo.Context) error {
	tableID, err := idParam(c, "table")
	if err != nil {
		return err
	}
	if mt, _, _ := mime.ParseMediaType(c.Request().Header.Get(echo.HeaderContentType)); mt != "text/csv" {
		return appdor.Errorf(appdor.EInvalid, "send the CSV with Content-Type: text/csv")
	}
	limit := h.CSVBodyLimit
	if limit <= 0 {
		limit = DefaultCSVBodyLimit
	}
	body := http.MaxBytesReader(c.Response(), c.Request().Body, limit)
	t, err := h.loadTableForRead(c, tableID)
	if err != nil {
		return err
	}
	if h.Gate != nil {
		// From here on the import is background work: its batches take
		// background seats, and the request's seat is free for others.
		h.Gate.Yield(c.Request().Context())
	}
	r := csv.NewReader(body)
	r.ReuseRecord = true
	header, err := r.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return appdor.Errorf(appdor.EValidation, "the CSV is empty; its first line names the fields")
		}
		return csvReadError(err)
	}
	cols, err := csvColumns(t, header)
	if err != nil {
		return err
	}
	ctx, realm := c.Request().Context(), realmOf(c)
	res := &csvImport{Errors: []csvError{}}
	batch := make([]map[string]any, 0, csvBatch)
	lines := make([]int, 0, csvBatch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := h.importBatch(ctx, realm, t, batch, lines, res)
		batch, lines = batch[:0], lines[:0]
		return err
	}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		line, _ := r.FieldPos(0)
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrFieldCount) {
				res.fail(csvError{Line: line, Message: fmt.Sprintf("expected %d values, found %d", len(header), len(rec))})
				continue
			}
			if ferr := flush(); ferr != nil {
				return partial(ferr, res)
			}
			if errors.As(err, &pe) {
				res.fail(csvError{Line: pe.Line, Message: "the CSV is malformed here; the import stopped: " + pe.Err.Error()})
				return c.JSON(http.StatusCreated, res)
			}
			return partial(csvReadError(err), res)
		}
		cells := make(map[string]any, len(cols))
		bad := false
		for i, f := range cols {
			v, err := csvCell(f, rec[i])
			if err != nil {
				res.fail(csvError{Line: line, Field: f.Name, Message: err.Error()})
				bad = true
				break
			}
			if v != nil {
				cells[f.ID.String()] = v
			}
		}
		if bad {
			continue
		}
		batch = append(batch, cells)
		lines = append(lines, line)
		if len(batch) == csvBatch {
			if err := flush(); err != nil {
				return partial(err, res)
			}
		}
	}
	if err := flush(); err != nil {
		return partial(err, res)
	}
	return c.JSON(http.StatusCreated, res)
}

// csvColumns maps a header to the table's fields, by name (case-insensitive)
// or id.
func csvColumns(t *Table, header []string) ([]*Field, error) {
	cols := make([]*Field, len(header))
	seen := map[uuid.UUID]bool{}
	var details []Detail
	for i, name := range header {
		if i == 0 {
			name = strings.TrimPrefix(name, "\ufeff")
		}
		f := lookupField(t, strings.TrimSpace(name))
		switch {
		case f == nil:
			details = append(details, Detail{Field: truncate(name), Message: "no field of this name in the table"})
		case seen[f.ID]:
			details = append(details, Detail{Field: truncate(name), Message: "this column is given twice"})
		default:
			seen[f.ID] = true
			cols[i] = f
		}
	}
	if details != nil {
		return nil, validationFailed("the CSV header names columns the table does not have; nothing was imported", details)
	}
	return cols, nil
}

func csvReadError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return appdor.Errorf(appdor.ETooLarge, "the CSV is larger than %d bytes", mbe.Limit)
	}
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return appdor.Errorf(appdor.EInvalid, "the CSV is malformed at line %d: %v", pe.Line, pe.Err)
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	return appdor.Errorf(appdor.EInvalid, "reading the CSV: %v", err)
}

// partial adds what an import had done to the error that stopped it.
func partial(err error, res *csvImport) error {
	var ae *appdor.Error
	if errors.As(err, &ae) {
		return &appdor.Error{Code: ae.Code, Message: ae.Message + fmt.Sprintf(" (the import stopped after inserting %d rows)", res.Inserted),
			Details: res, RetryAfter: ae.RetryAfter}
	}
	return err
}

// importBatch writes one batch in its own transaction once the Gate admits
// it. Rows whose links name missing rows are reported and left out.
func (h *Handler) importBatch(ctx context.Context, realm uuid.UUID, t *Table, batch []map[string]any, lines []int, res *csvImport) error {
	if h.Gate != nil {
		release, err := h.Gate.Acquire(ctx, realm.String())
		if err != nil {
			return err
		}
		defer release()
	}
	return h.db.Tx(ctx, realm, func(tx pgx.Tx) error {
		details, err := checkLinks(ctx, tx, realm, t, batch, lines)
		if err != nil {
			return err
		}
		skip := map[int]bool{}
		for _, d := range details {
			if !skip[*d.Row] {
				skip[*d.Row] = true
				name := d.Field
				if f := t.field(d.Field); f != nil {
					name = f.Name
				}
				res.fail(csvError{Line: *d.Row, Field: name, Message: d.Message})
			}
		}
		cells := make([][]byte, 0, len(batch))
		for i, m := range batch {
			if skip[lines[i]] {
				continue
			}
			b, err := json.Marshal(m)
			if err != nil {
				return err
			}
			cells = append(cells, b)
		}
		if len(cells) == 0 {
			return nil
		}
		out, err := insertRows(ctx, tx, realm, t.ID, cells)
		if err != nil {
			return err
		}
		if err := h.rowsChanged(ctx, tx, realm, t.ID, EventRowCreated, out, nil); err != nil {
			return err
		}
		res.Inserted += len(cells)
		return nil
	})
}
