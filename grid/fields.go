package grid

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/mail"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
)

// FieldType names a column's type. Cells are checked against it in Go before
// they reach SQL.
type FieldType string

const (
	TypeText         FieldType = "text"
	TypeLongText     FieldType = "long_text"
	TypeNumber       FieldType = "number"
	TypeCheckbox     FieldType = "checkbox"
	TypeDate         FieldType = "date"
	TypeDatetime     FieldType = "datetime"
	TypeSingleSelect FieldType = "single_select"
	TypeMultiSelect  FieldType = "multi_select"
	TypeEmail        FieldType = "email"
	TypeURL          FieldType = "url"
	// TypeLink holds rows of another table of the same app: a cell is a list
	// of row ids of options.table, each checked to exist in the realm.
	TypeLink FieldType = "link"
)

var fieldTypes = map[FieldType]bool{
	TypeText: true, TypeLongText: true, TypeNumber: true, TypeCheckbox: true, TypeDate: true,
	TypeDatetime: true, TypeSingleSelect: true, TypeMultiSelect: true, TypeEmail: true, TypeURL: true,
	TypeLink: true,
}

// Limits on what one cell and one table may hold.
const (
	maxTextLen     = 10_000
	maxLongTextLen = 100_000
	maxChoices     = 500
	maxFields      = 500
	maxPrecision   = 10
	maxLinks       = 1000
	maxURLLen      = 2048
)

// Field is a typed column of a table.
type Field struct {
	ID       uuid.UUID    `json:"id"`
	Name     string       `json:"name"`
	Type     FieldType    `json:"type"`
	Options  FieldOptions `json:"options"`
	Position int          `json:"position"`
}

// FieldOptions holds what some types need; the rest leave it empty.
type FieldOptions struct {
	// Precision is the number of decimals a number keeps (number).
	Precision *int `json:"precision,omitempty"`
	// Choices are the allowed values (single_select, multi_select).
	Choices []string `json:"choices,omitempty"`
	// Table is the table whose rows a link field holds (link).
	Table *uuid.UUID `json:"table,omitempty"`
}

// checkField validates a field definition. When it is wrong, it returns which
// member of the definition is ("name", "options.choices[3]") and what is
// wrong with it.
func checkField(name string, t FieldType, o FieldOptions) (member, msg string) {
	if p := appdor.Name.Problem(strings.TrimSpace(name)); p != "" {
		return "name", p
	}
	if !fieldTypes[t] {
		return "type", fmt.Sprintf("unknown field type %q", t)
	}
	switch t {
	case TypeSingleSelect, TypeMultiSelect:
		if len(o.Choices) == 0 || len(o.Choices) > maxChoices {
			return "options.choices", fmt.Sprintf("a %s field needs 1 to %d choices", t, maxChoices)
		}
		seen := map[string]bool{}
		for i, c := range o.Choices {
			member := fmt.Sprintf("options.choices[%d]", i)
			if p := appdor.Name.Problem(c); p != "" {
				return member, p
			}
			if strings.TrimSpace(c) == "" {
				return member, "must not be blank"
			}
			if seen[c] {
				return member, fmt.Sprintf("choice %q is listed twice", c)
			}
			seen[c] = true
		}
	default:
		if len(o.Choices) > 0 {
			return "options.choices", fmt.Sprintf("a %s field takes no choices", t)
		}
	}
	if t == TypeLink && (o.Table == nil || *o.Table == uuid.Nil) {
		return "options.table", "a link field needs options.table, the id of a table of the same app"
	}
	if t != TypeLink && o.Table != nil {
		return "options.table", fmt.Sprintf("a %s field takes no table", t)
	}
	if o.Precision != nil {
		if t != TypeNumber {
			return "options.precision", fmt.Sprintf("a %s field takes no precision", t)
		}
		if *o.Precision < 0 || *o.Precision > maxPrecision {
			return "options.precision", fmt.Sprintf("precision is 0 to %d", maxPrecision)
		}
	}
	return "", ""
}

// fieldInvalid is the error of a wrong field definition.
func fieldInvalid(member, msg string) error {
	return appdor.Invalid(member+" "+msg, appdor.Detail{Field: member, Message: msg})
}

// textRule is what a cell of a text-holding type may hold. Only long_text
// spans lines; text and long_text may hold tabs (pasted from a spreadsheet).
func textRule(t FieldType) appdor.Text {
	switch t {
	case TypeLongText:
		return appdor.Text{Max: maxLongTextLen, Tabs: true, Lines: true}
	case TypeEmail:
		return appdor.Email
	case TypeURL:
		return appdor.Text{Max: maxURLLen}
	}
	return appdor.Text{Max: maxTextLen, Tabs: true}
}

var jsonNull = []byte("null")

// normalize checks one cell value, as JSON, against its field and returns
// the value to store (numbers rounded to their precision, datetimes in UTC).
// A JSON null clears the cell and is returned as nil. JSON is strict about
// kinds: a number is a JSON number, a checkbox a JSON boolean, a list a JSON
// array; every other type is a JSON string, read by parseText.
func (f *Field) normalize(raw json.RawMessage) (any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, jsonNull) {
		return nil, nil
	}
	switch f.Type {
	case TypeNumber:
		var n json.Number
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&n); err != nil {
			return nil, fmt.Errorf("expected a number")
		}
		v, err := parseNumber(n.String())
		if err != nil {
			return nil, err
		}
		return f.round(v), nil
	case TypeCheckbox:
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, fmt.Errorf("expected true or false")
		}
		return b, nil
	case TypeMultiSelect, TypeLink:
		var ss []string
		if err := json.Unmarshal(raw, &ss); err != nil {
			if f.Type == TypeLink {
				return nil, fmt.Errorf("expected a list of row ids")
			}
			return nil, fmt.Errorf("expected a list of choices")
		}
		return f.list(ss)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("expected a string")
	}
	return f.parseText(s)
}

// parseText reads a cell from its text form: a JSON string, a CSV cell, for
// any type. It is the one cell parser of each type; normalize and the CSV
// import both end here.
func (f *Field) parseText(s string) (any, error) {
	switch f.Type {
	case TypeText, TypeLongText:
		if f.Type == TypeText && strings.ContainsAny(s, "\r\n") {
			return nil, fmt.Errorf("text is one line; use a long_text field for several")
		}
		if p := textRule(f.Type).Problem(s); p != "" {
			return nil, fmt.Errorf("text %s", p)
		}
		return s, nil
	case TypeNumber:
		v, err := parseNumber(s)
		if err != nil {
			return nil, err
		}
		return f.round(v), nil
	case TypeCheckbox:
		return parseCheckbox(s)
	case TypeDate:
		return parseDate(s)
	case TypeDatetime:
		t, err := parseDatetime(s)
		if err != nil {
			return nil, err
		}
		return t.Format(time.RFC3339Nano), nil
	case TypeSingleSelect:
		if !f.hasChoice(s) {
			return nil, fmt.Errorf("%q is not one of the choices", s)
		}
		return s, nil
	case TypeMultiSelect, TypeLink:
		// A JSON list keeps choices that hold commas whole; otherwise the
		// items are separated by commas.
		if strings.HasPrefix(strings.TrimSpace(s), "[") {
			return f.normalize(json.RawMessage(s))
		}
		var list []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				list = append(list, p)
			}
		}
		return f.list(list)
	case TypeEmail:
		if p := textRule(f.Type).Problem(s); p != "" {
			return nil, fmt.Errorf("an email address %s", p)
		}
		a, err := mail.ParseAddress(s)
		if err != nil || a.Address != s {
			return nil, fmt.Errorf("%q is not an email address", s)
		}
		return s, nil
	case TypeURL:
		if p := textRule(f.Type).Problem(s); p != "" {
			return nil, fmt.Errorf("an address %s", p)
		}
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%q is not an http or https address", s)
		}
		return s, nil
	}
	return nil, fmt.Errorf("field type %q holds no values", f.Type)
}

// round keeps the decimals a number field's precision allows.
func (f *Field) round(v float64) float64 {
	if f.Options.Precision != nil {
		p := math.Pow10(*f.Options.Precision)
		// Past 2^53 a float has no decimals to round, and v*p may overflow.
		if r := math.Round(v*p) / p; !math.IsInf(r, 0) && !math.IsNaN(r) {
			v = r
		}
	}
	return v
}

// list checks the items of a multi_select (each one of the choices) or a
// link (each a row id) and drops repeats, keeping the first.
func (f *Field) list(ss []string) (any, error) {
	if f.Type == TypeLink && len(ss) > maxLinks {
		return nil, fmt.Errorf("a link holds at most %d rows", maxLinks)
	}
	seen := make(map[string]bool, len(ss))
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		if f.Type == TypeLink {
			id, err := uuid.Parse(s)
			if err != nil || len(s) != 36 {
				return nil, fmt.Errorf("%q is not a row id", s)
			}
			s = id.String()
		} else if !f.hasChoice(s) {
			return nil, fmt.Errorf("%q is not one of the choices", s)
		}
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out, nil
}

func (f *Field) hasChoice(s string) bool {
	for _, c := range f.Options.Choices {
		if c == s {
			return true
		}
	}
	return false
}

// The parsers of the text forms of numbers, checkboxes, dates and datetimes,
// shared by cells (parseText) and filter values (filterValue).

func parseNumber(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("expected a finite number")
	}
	return v, nil
}

func parseCheckbox(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "t", "yes", "y", "1", "x", "checked":
		return true, nil
	case "false", "f", "no", "n", "0":
		return false, nil
	}
	return false, fmt.Errorf("expected true or false")
}

func parseDate(s string) (string, error) {
	d, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return "", fmt.Errorf("expected a date as YYYY-MM-DD")
	}
	return d.Format(time.DateOnly), nil
}

func parseDatetime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("expected a date and time as RFC 3339, such as 2026-01-02T15:04:05Z")
	}
	return t.UTC(), nil
}

// fieldPatch is what PATCH /tables/{table}/fields/{field} may change. A
// field's type never changes: its cells were validated as that type.
type fieldPatch struct {
	Name     *string       `json:"name"`
	Type     *FieldType    `json:"type"`
	Options  *FieldOptions `json:"options"`
	Position *int          `json:"position"`
}

// fieldIDs returns the table's field ids in position order.
func (t *Table) fieldIDs() []uuid.UUID {
	ids := make([]uuid.UUID, len(t.Fields))
	for i, f := range t.Fields {
		ids[i] = f.ID
	}
	return ids
}

// moveTo returns ids with id moved to position pos (clamped to the list).
func moveTo(ids []uuid.UUID, id uuid.UUID, pos int) []uuid.UUID {
	out := make([]uuid.UUID, 0, len(ids))
	for _, x := range ids {
		if x != id {
			out = append(out, x)
		}
	}
	pos = max(0, min(pos, len(out)))
	out = append(out[:pos], append([]uuid.UUID{id}, out[pos:]...)...)
	return out
}

// renumber stores the given order as positions 0..n-1.
func renumber(ctx context.Context, tx pgx.Tx, realm, tableID uuid.UUID, ids []uuid.UUID) error {
	_, err := tx.Exec(ctx,
		`UPDATE fields f SET position = u.p - 1
		 FROM unnest($3::uuid[]) WITH ORDINALITY AS u(id, p)
		 WHERE f.realm_id = $1 AND f.table_id = $2 AND f.id = u.id AND f.position <> u.p - 1`,
		realm, tableID, ids)
	return err
}

// checkLinkTarget makes sure a link field points at a table of the same app.
func checkLinkTarget(ctx context.Context, tx pgx.Tx, realm, appID uuid.UUID, o FieldOptions) error {
	if o.Table == nil {
		return nil
	}
	var ok bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tables WHERE realm_id = $1 AND id = $2 AND app_id = $3)`,
		realm, *o.Table, appID).Scan(&ok)
	if err != nil {
		return err
	}
	if !ok {
		return appdor.Invalid("the link's table is not a table of this app",
			appdor.Detail{Field: "options.table", Message: "no such table in this app"})
	}
	return nil
}

func (h *Handler) createField(c echo.Context) error {
	tableID, err := IDParam(c, "table")
	if err != nil {
		return err
	}
	var in struct {
		FieldInput
		Position *int `json:"position"`
	}
	if err := decode(c, &in); err != nil {
		return err
	}
	if member, msg := checkField(in.Name, in.Type, in.Options); msg != "" {
		return fieldInvalid(member, msg)
	}
	ctx, realm := c.Request().Context(), RealmOf(c)
	var out *Field
	err = h.db.Tx(ctx, realm, func(tx pgx.Tx) error {
		t, err := loadTable(ctx, tx, realm, tableID)
		if err != nil {
			return err
		}
		if len(t.Fields) >= maxFields {
			return appdor.Errorf(appdor.EValidation, "a table has at most %d fields", maxFields)
		}
		if err := checkLinkTarget(ctx, tx, realm, t.AppID, in.Options); err != nil {
			return err
		}
		opts, _ := json.Marshal(in.Options)
		var id uuid.UUID
		err = tx.QueryRow(ctx,
			`INSERT INTO fields (realm_id, table_id, name, type, options, position)
			 VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`,
			realm, tableID, strings.TrimSpace(in.Name), string(in.Type), opts, len(t.Fields)).Scan(&id)
		if err != nil {
			return err
		}
		pos := len(t.Fields)
		if in.Position != nil {
			pos = max(0, min(*in.Position, len(t.Fields)))
			if err := renumber(ctx, tx, realm, tableID, moveTo(append(t.fieldIDs(), id), id, pos)); err != nil {
				return err
			}
		}
		out = &Field{ID: id, Name: strings.TrimSpace(in.Name), Type: in.Type, Options: in.Options, Position: pos}
		return nil
	})
	if err != nil {
		return err
	}
	h.schemas.drop(realm, tableID)
	h.fieldsChanged(realm, tableID)
	return c.JSON(http.StatusCreated, out)
}

func (h *Handler) updateField(c echo.Context) error {
	tableID, err := IDParam(c, "table")
	if err != nil {
		return err
	}
	fieldID, err := IDParam(c, "field")
	if err != nil {
		return err
	}
	var in fieldPatch
	if err := decode(c, &in); err != nil {
		return err
	}
	ctx, realm := c.Request().Context(), RealmOf(c)
	var out Field
	err = h.db.Tx(ctx, realm, func(tx pgx.Tx) error {
		t, err := loadTable(ctx, tx, realm, tableID)
		if err != nil {
			return err
		}
		f := t.field(fieldID.String())
		if f == nil {
			return appdor.Errorf(appdor.ENotFound, "field not found")
		}
		out = *f
		if in.Type != nil && *in.Type != f.Type {
			return appdor.Invalid("a field's type cannot change; add a new field instead",
				appdor.Detail{Field: "type", Message: "a field's type cannot change"})
		}
		if in.Name != nil {
			out.Name = strings.TrimSpace(*in.Name)
		}
		if in.Options != nil {
			if f.Type == TypeLink && (in.Options.Table == nil || *in.Options.Table != *f.Options.Table) {
				return appdor.Invalid("a link's table cannot change; add a new field instead",
					appdor.Detail{Field: "options.table", Message: "a link's table cannot change"})
			}
			out.Options = *in.Options
		}
		if member, msg := checkField(out.Name, out.Type, out.Options); msg != "" {
			return fieldInvalid(member, msg)
		}
		opts, _ := json.Marshal(out.Options)
		if _, err := tx.Exec(ctx,
			`UPDATE fields SET name = $4, options = $5 WHERE realm_id = $1 AND table_id = $2 AND id = $3`,
			realm, tableID, fieldID, out.Name, opts); err != nil {
			return err
		}
		if in.Position != nil {
			ids := moveTo(t.fieldIDs(), fieldID, *in.Position)
			for i, id := range ids {
				if id == fieldID {
					out.Position = i
				}
			}
			return renumber(ctx, tx, realm, tableID, ids)
		}
		return nil
	})
	if err != nil {
		return err
	}
	h.schemas.drop(realm, tableID)
	h.fieldsChanged(realm, tableID)
	return c.JSON(http.StatusOK, out)
}

// deleteField removes a field and its key from every cell of the table.
func (h *Handler) deleteField(c echo.Context) error {
	tableID, err := IDParam(c, "table")
	if err != nil {
		return err
	}
	fieldID, err := IDParam(c, "field")
	if err != nil {
		return err
	}
	ctx, realm := c.Request().Context(), RealmOf(c)
	err = h.db.Tx(ctx, realm, func(tx pgx.Tx) error {
		t, err := loadTable(ctx, tx, realm, tableID)
		if err != nil {
			return err
		}
		if t.field(fieldID.String()) == nil {
			return appdor.Errorf(appdor.ENotFound, "field not found")
		}
		if _, err := tx.Exec(ctx, `DELETE FROM fields WHERE realm_id = $1 AND table_id = $2 AND id = $3`,
			realm, tableID, fieldID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx,
			`UPDATE rows SET cells = cells - $3::text WHERE realm_id = $1 AND table_id = $2 AND cells ? $3::text`,
			realm, tableID, fieldID.String()); err != nil {
			return err
		}
		return renumber(ctx, tx, realm, tableID, moveTo(t.fieldIDs(), fieldID, len(t.Fields))[:len(t.Fields)-1])
	})
	if err != nil {
		return err
	}
	h.schemas.drop(realm, tableID)
	h.fieldsChanged(realm, tableID)
	return c.NoContent(http.StatusNoContent)
}
