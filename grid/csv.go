package grid

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

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
	// csvStep is the rows an import inserts per statement, with a Rest of
	// its realm's background work after each: a 1,000-row statement keeps a
	// core busy for 50-250 ms, and the reads beside it pay for that in
	// their tail (see fairness.Controller.Rest).
	csvStep = 32
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

// csvCell turns CSV text into a normalized cell value for f, with the
// field's own parser (parseText). "" is an empty cell (nil), and so is a
// blank cell of a type whose values have no spaces. A text-like cell that the
// export neutralized (neutralize) is read back as it was.
func csvCell(f *Field, s string) (any, error) {
	if s == "" {
		return nil, nil
	}
	switch f.Type {
	case TypeNumber, TypeCheckbox, TypeDate, TypeDatetime:
		if strings.TrimSpace(s) == "" {
			return nil, nil
		}
	}
	if f.Type != TypeNumber {
		s = unneutralize(s)
	}
	return f.parseText(s)
}

// formulaTriggers are the first characters that make a spreadsheet read a
// cell as a formula (OWASP, "CSV Injection"): = + - @, and the tab and
// carriage return some spreadsheets skip before looking for one.
const formulaTriggers = "=+-@\t\r"

// formulaLike tells whether s, after any apostrophes it starts with, starts
// with a formula trigger. Counting the apostrophes makes neutralize
// reversible: a value that itself starts with an apostrophe and a trigger
// gets one more apostrophe, which unneutralize takes off again.
func formulaLike(s string) bool {
	t := strings.TrimLeft(s, "'")
	return t != "" && strings.IndexByte(formulaTriggers, t[0]) >= 0
}

// neutralize prefixes a formula-like cell with an apostrophe, which
// spreadsheets take as "this is text" (OWASP's recommendation).
func neutralize(s string) string {
	if formulaLike(s) {
		return "'" + s
	}
	return s
}

// unneutralize undoes neutralize.
func unneutralize(s string) string {
	if strings.HasPrefix(s, "'") && formulaLike(s) {
		return s[1:]
	}
	return s
}

// csvWriter writes CSV records as encoding/csv does (RFC 4180, "\n" line
// ends), and can also quote a field that does not need it, which
// encoding/csv cannot.
type csvWriter struct{ w *bufio.Writer }

// write writes one record; the fields whose quote is true are quoted
// whatever they hold. A record of one empty field is written as "", not as
// the empty line readers skip (encoding/csv's writer loses such a row).
func (cw csvWriter) write(record []string, quote []bool) error {
	lone := len(record) == 1 && record[0] == ""
	for i, field := range record {
		if i > 0 {
			cw.w.WriteByte(',')
		}
		if !quote[i] && !lone && !csvNeedsQuotes(field) {
			cw.w.WriteString(field)
			continue
		}
		cw.w.WriteByte('"')
		cw.w.WriteString(strings.ReplaceAll(field, `"`, `""`))
		cw.w.WriteByte('"')
	}
	return cw.w.WriteByte('\n')
}

// csvNeedsQuotes is encoding/csv's rule: a field with a comma, a quote or a
// line break, one that starts with a space, and \. (which some readers take
// for an end of data) are quoted.
func csvNeedsQuotes(field string) bool {
	if field == "" {
		return false
	}
	if field == `\.` || strings.ContainsAny(field, ",\"\r\n") {
		return true
	}
	r, _ := utf8.DecodeRuneInString(field)
	return unicode.IsSpace(r)
}

// Values of the formulas parameter of an export.
const (
	formulasEscape = "escape"
	formulasRaw    = "raw"
)

// exportCSV streams the table as CSV, a header of field names then one line a
// row, reading a page at a time by id: memory stays bounded whatever the
// table's size, and each page is its own short read.
//
// By default (formulas=escape) the export is safe to open in a spreadsheet:
// a cell a spreadsheet would run as a formula (=, +, -, @, tab or carriage
// return first) is prefixed with an apostrophe, and every text cell is
// quoted, so that no separator a spreadsheet might assume (a semicolon in
// some locales) splits it into a cell that starts a formula. Number cells are
// left as they are: a number field's negative values start with "-" and must
// stay numbers, and a number cannot hold a formula. Every other type is text
// to a spreadsheet; dates, checkboxes and links never start with a trigger,
// so treating them as text changes nothing for them. The import takes the
// apostrophe off again, so an export imports back to the same cells.
// formulas=raw writes every cell exactly as stored, for programs that read
// CSV as data.
func (h *Handler) exportCSV(c echo.Context) error {
	tableID, err := IDParam(c, "table")
	if err != nil {
		return err
	}
	escape := true
	switch c.QueryParam("formulas") {
	case "", formulasEscape:
	case formulasRaw:
		escape = false
	default:
		return badRequest("formulas", "formulas is %s (the default) or %s", formulasEscape, formulasRaw)
	}
	t, err := h.loadTableForRead(c, tableID)
	if err != nil {
		return err
	}
	ctx, realm := c.Request().Context(), RealmOf(c)
	res := c.Response()
	res.Header().Set(echo.HeaderContentType, "text/csv; charset=utf-8")
	res.Header().Set(echo.HeaderContentDisposition, mime.FormatMediaType("attachment", map[string]string{"filename": t.Name + ".csv"}))
	res.WriteHeader(http.StatusOK)
	w := csvWriter{bufio.NewWriter(res)}
	record := make([]string, len(t.Fields))
	quote := make([]bool, len(t.Fields))
	text := make([]bool, len(t.Fields)) // the columns whose cells are neutralized and quoted
	keys := make([]string, len(t.Fields))
	for i, f := range t.Fields {
		record[i], quote[i] = f.Name, escape // names are text
		if escape {
			record[i] = neutralize(f.Name)
		}
		text[i] = escape && f.Type != TypeNumber
		keys[i] = f.ID.String()
	}
	if err := w.write(record, quote); err != nil {
		return err
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
					if text[i] {
						record[i] = neutralize(record[i])
					}
					quote[i] = text[i] && record[i] != ""
				}
				return w.write(record, quote)
			})
			return err
		}, `SELECT id, cells FROM rows WHERE realm_id = $1 AND table_id = $2 AND id > $3 ORDER BY id LIMIT $4`,
			realm, tableID, after, csvBatch)
		if err != nil {
			return err
		}
		if err := w.w.Flush(); err != nil {
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

// csvImport is an import's answer, and the details of the error that
// stopped one: Inserted counts the rows that landed either way.
type csvImport struct {
	Inserted        int        `json:"inserted"`
	Failed          int        `json:"failed"`
	Errors          []csvError `json:"errors"`
	ErrorsTruncated bool       `json:"errors_truncated"`
	// StoppedAtLine is the malformed line that stopped the import: the rows
	// before it were imported (or are listed in Errors), none from it on.
	StoppedAtLine int `json:"stopped_at_line,omitempty"`
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
	tableID, err := IDParam(c, "table")
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
	ctx, realm := c.Request().Context(), RealmOf(c)
	res := &csvImport{Errors: []csvError{}}
	// Only reading the body's records happens outside a seat; converting
	// the cells, encoding and writing a batch all run under its background
	// seat, so an import's CPU is background work as much as its writes.
	batch := make([]csvRecord, 0, csvBatch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := h.importBatch(ctx, realm, t, cols, batch, res)
		batch = batch[:0]
		return err
	}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		var pe *csv.ParseError
		if errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrFieldCount) {
			// The line was read whole; only its length is wrong.
			batch = append(batch, csvRecord{line: pe.StartLine, failed: &csvError{Line: pe.StartLine,
				Message: fmt.Sprintf("expected %d values, found %d", len(header), len(rec))}})
		} else if err != nil {
			// A malformed line (a bare or unclosed quote) or a failed read
			// stops the import: past it, lines cannot be told apart. The
			// valid rows before it are written, and the error says how many
			// rows landed in all and where to resume.
			if ferr := flush(); ferr != nil {
				return partial(ferr, res)
			}
			if errors.As(err, &pe) {
				res.fail(csvError{Line: pe.Line, Message: fmt.Sprintf("the CSV is malformed here (column %d): %v", pe.Column, pe.Err)})
				res.StoppedAtLine = pe.Line
			}
			return partial(csvReadError(err), res)
		} else {
			// Only a record read whole has field positions: asking for one
			// after a parse error panics.
			line, _ := r.FieldPos(0)
			batch = append(batch, csvRecord{line: line, values: slices.Clone(rec)})
		}
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

// csvRecord is one line of an import as read: its values, or why it failed.
type csvRecord struct {
	line   int
	values []string
	failed *csvError
}

// csvRow converts a record's values to a row's cells, or says which cell is
// invalid.
func csvRow(cols []*Field, rec csvRecord) (map[string]any, *csvError) {
	cells := make(map[string]any, len(cols))
	for i, f := range cols {
		v, err := csvCell(f, rec.values[i])
		if err != nil {
			return nil, &csvError{Line: rec.line, Field: f.Name, Message: err.Error()}
		}
		if v != nil {
			cells[f.ID.String()] = v
		}
	}
	return cells, nil
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
		f := lookupField(t, strings.TrimSpace(unneutralize(name)))
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
		return nil, appdor.Invalid("the CSV header names columns the table does not have; nothing was imported", details...)
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
		return &appdor.Error{Code: appdor.EValidation, Message: fmt.Sprintf("the CSV is malformed at line %d, column %d: %v", pe.Line, pe.Column, pe.Err),
			Details: []csvError{{Line: pe.Line, Message: pe.Err.Error()}}}
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	return appdor.Errorf(appdor.EInvalid, "reading the CSV: %v", err)
}

// partial adds what an import had done to the error that stopped it, coded
// or not: the rows of committed batches stay, and the answer says how many.
func partial(err error, res *csvImport) error {
	var ae *appdor.Error
	if errors.As(err, &ae) {
		return &appdor.Error{Code: ae.Code, Message: ae.Message + fmt.Sprintf(" (the import stopped after inserting %d rows)", res.Inserted),
			Details: res, RetryAfter: ae.RetryAfter}
	}
	return appdor.WithDetails(err, res)
}

// yieldEvery is how many rows a batch converts or encodes between yields of
// its processor. Go's scheduler has no priorities: a goroutine in a loop that
// neither blocks nor calls into the scheduler keeps its processor until the
// runtime preempts it after 10 ms, and an interactive request's goroutine
// readied meanwhile waits behind it when the other processors are busy too.
// Yielding every few dozen rows (well under a millisecond of work) bounds
// that wait; it costs the import a fraction of a microsecond a time.
const yieldEvery = 16

func yieldSometimes(i int) {
	if i%yieldEvery == yieldEvery-1 {
		runtime.Gosched()
	}
}

// importBatch converts one batch's records and writes their rows in one
// transaction, under a background seat of the Gate. Rows with an invalid cell,
// or whose links name missing rows, are reported and left out.
func (h *Handler) importBatch(ctx context.Context, realm uuid.UUID, t *Table, cols []*Field, recs []csvRecord, res *csvImport) error {
	if h.Gate != nil {
		release, err := h.Gate.Acquire(ctx, realm.String())
		if err != nil {
			return err
		}
		defer release()
	}
	batch := make([]map[string]any, 0, len(recs))
	lines := make([]int, 0, len(recs))
	for i, rec := range recs {
		yieldSometimes(i)
		if rec.failed != nil {
			res.fail(*rec.failed)
			continue
		}
		cells, failed := csvRow(cols, rec)
		if failed != nil {
			res.fail(*failed)
			continue
		}
		batch = append(batch, cells)
		lines = append(lines, rec.line)
	}
	if len(batch) == 0 {
		return nil
	}
	return h.writeTx(ctx, realm, func(ctx context.Context, tx pgx.Tx) error {
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
			yieldSometimes(i)
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
		out := make([]RowRef, 0, len(cells))
		for i := 0; i < len(cells); i += csvStep {
			if i > 0 && h.Gate != nil {
				if err := h.Gate.Rest(ctx, realm.String()); err != nil {
					return err
				}
			}
			step, err := insertRowRefs(ctx, tx, realm, t.ID, cells[i:min(i+csvStep, len(cells))])
			if err != nil {
				return err
			}
			out = append(out, step...)
		}
		sortRefs(out)
		if err := h.refsChanged(ctx, tx, realm, t.ID, EventRowCreated, out, nil); err != nil {
			return err
		}
		res.Inserted += len(cells)
		return nil
	})
}
