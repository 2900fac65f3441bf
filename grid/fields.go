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
	"unicode/utf8"

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

// checkField validates a field definition and returns a message when it is wrong.
func checkField(name string, t FieldType, o FieldOptions) string {
	name = strings.TrimSpace(name)
	if name == "" || utf8.RuneCountInString(name) > 200 {
		return "a field name has 1 to 200 characters"
	}
	if !fieldTypes[t] {
		return fmt.Sprintf("unknown field type %q", t)
	}
	switch t {
	case TypeSingleSelect, TypeMultiSelect:
		if len(o.Choices) == 0 || len(o.Choices) > maxChoices {
			return fmt.Sprintf("a %s field needs 1 to %d choices", t, maxChoices)
		}
		seen := map[string]bool{}
		for _, c := range o.Choices {
			if strings.TrimSpace(c) == "" || utf8.RuneCountInString(c) > 200 {
				return "a choice has 1 to 200 characters"
			}
			if seen[c] {
				return fmt.Sprintf("choice %q is listed twice", c)
			}
			seen[c] = true
		}
	default:
		if len(o.Choices) > 0 {
			return fmt.Sprintf("a %s field takes no choices", t)
		}
	}
	if t == TypeLink && (o.Table == nil || *o.Table == uuid.Nil) {
		return "a link field needs options.table, the id of a table of the same app"
	}
	if t != TypeLink && o.Table != nil {
		return fmt.Sprintf("a %s field takes no table", t)
	}
	if o.Precision != nil {
		if t != TypeNumber {
			return fmt.Sprintf("a %s field takes no precision", t)
		}
		if *o.Precision < 0 || *o.Precision > maxPrecision {
			return fmt.Sprintf("precision is 0 to %d", maxPrecision)
		}
	}
	return ""
}

var jsonNull = []byte("null")

// normalize checks one cell value against its field and returns the value to
// store (numbers rounded to their precision, datetimes in UTC). A JSON null
// clears the cell and is returned as nil.
func (f *Field) normalize(raw json.RawMessage) (any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, jsonNull) {
		return nil, nil
	}
	switch f.Type {
	case TypeText, TypeLongText:
		s, err := asString(raw)
		if err != nil {
			return nil, err
		}
		limit := maxTextLen
		if f.Type == TypeLongText {
			limit = maxLongTextLen
		}
		if f.Type == TypeText && strings.ContainsAny(s, "\r\n") {
			return nil, fmt.Errorf("text is one line; use a long_text field for several")
		}
		if utf8.RuneCountInString(s) > limit {
			return nil, fmt.Errorf("text is longer than %d characters", limit)
		}
		return s, nil
	case TypeNumber:
		var n json.Number
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&n); err != nil {
			return nil, fmt.Errorf("expected a number")
		}
		v, err := strconv.ParseFloat(n.String(), 64)
		if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, fmt.Errorf("expected a finite number")
		}
		if f.Options.Precision != nil {
			p := math.Pow10(*f.Options.Precision)
			// Past 2^53 a float has no decimals to round, and v*p may overflow.
			if r := math.Round(v*p) / p; !math.IsInf(r, 0) && !math.IsNaN(r) {
				v = r
			}
		}
		return v, nil
	case TypeCheckbox:
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, fmt.Errorf("expected true or false")
		}
		return b, nil
	case TypeDate:
		s, err := asString(raw)
		if err != nil {
			return nil, err
		}
		d, err := time.Parse(time.DateOnly, s)
		if err != nil {
			return nil, fmt.Errorf("expected a date as YYYY-MM-DD")
		}
		return d.Format(time.DateOnly), nil
	case TypeDatetime:
		s, err := asString(raw)
		if err != nil {
			return nil, err
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, fmt.Errorf("expected a date and time as RFC 3339, such as 2026-01-02T15:04:05Z")
		}
		return t.UTC().Format(time.RFC3339Nano), nil
	case TypeSingleSelect:
		s, err := asString(raw)
		if err != nil {
			return nil, err
		}
		if !f.hasChoice(s) {
			return nil, fmt.Errorf("%q is not one of the choices", s)
		}
		return s, nil
	case TypeMultiSelect:
		var ss []string
		if err := json.Unmarshal(raw, &ss); err != nil {
			return nil, fmt.Errorf("expected a list of choices")
		}
		seen := map[string]bool{}
		out := make([]string, 0, len(ss))
		for _, s := range ss {
			if !f.hasChoice(s) {
				return nil, fmt.Errorf("%q is not one of the choices", s)
			}
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
		return out, nil
	case TypeEmail:
		s, err := asString(raw)
		if err != nil {
			return nil, err
		}
		a, err := mail.ParseAddress(s)
		if err != nil || a.Address != s || len(s) > 320 {
			return nil, fmt.Errorf("%q is not an email address", s)
		}
		return s, nil
	case TypeURL:
		s, err := asString(raw)
		if err != nil {
			return nil, err
		}
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(s) > 2048 {
			return nil, fmt.Errorf("%q is not an http or https address", s)
		}
		return s, nil
	case TypeLink:
		var ss []string
		if err := json.Unmarshal(raw, &ss); err != nil {
			return nil, fmt.Errorf("expected a list of row ids")
		}
		if len(ss) > maxLinks {
			return nil, fmt.Errorf("a link holds at most %d rows", maxLinks)
		}
		seen := make(map[uuid.UUID]bool, len(ss))
		out := make([]string, 0, len(ss))
		for _, s := range ss {
			id, err := uuid.Parse(s)
			if err != nil || len(s) != 36 {
				return nil, fmt.Errorf("%q is not a row id", s)
			}
			if !seen[id] {
				seen[id] = true
				out = append(out, id.String())
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("field type %q holds no values", f.Type)
}

func (f *Field) hasChoice(s string) bool {
	for _, c := range f.Options.Choices {
		if c == s {
			return true
		}
	}
	return false
}

func asString(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("expected a string")
	}
	return s, nil
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
		return validationFailed("the link's table is not a table of this app",
			[]Detail{{Field: "options.table", Message: "no such table in this app"}})
	}
	return nil
}

func (h *Handler) createField(c echo.Context) error {
	tableID, err := idParam(c, "table")
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
	if msg := checkField(in.Name, in.Type, in.Options); msg != "" {
		return validationFailed(msg, []Detail{{Message: msg}})
	}
	ctx, realm := c.Request().Context(), realmOf(c)
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
	return c.JSON(http.StatusCreated, out)
}

func (h *Handler) updateField(c echo.Context) error {
	tableID, err := idParam(c, "table")
	if err != nil {
		return err
	}
	fieldID, err := idParam(c, "field")
	if err != nil {
		return err
	}
	var in fieldPatch
	if err := decode(c, &in); err != nil {
		return err
	}
	ctx, realm := c.Request().Context(), realmOf(c)
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
			return validationFailed("a field's type cannot change; add a new field instead",
				[]Detail{{Field: "type", Message: "a field's type cannot change"}})
		}
		if in.Name != nil {
			out.Name = strings.TrimSpace(*in.Name)
		}
		if in.Options != nil {
			if f.Type == TypeLink && (in.Options.Table == nil || *in.Options.Table != *f.Options.Table) {
				return validationFailed("a link's table cannot change; add a new field instead",
					[]Detail{{Field: "options.table", Message: "a link's table cannot change"}})
			}
			out.Options = *in.Options
		}
		if msg := checkField(out.Name, out.Type, out.Options); msg != "" {
			return validationFailed(msg, []Detail{{Message: msg}})
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
	return c.JSON(http.StatusOK, out)
}

// deleteField removes a field and its key from every cell of the table.
func (h *Handler) deleteField(c echo.Context) error {
	tableID, err := idParam(c, "table")
	if err != nil {
		return err
	}
	fieldID, err := idParam(c, "field")
	if err != nil {
		return err
	}
	ctx, realm := c.Request().Context(), realmOf(c)
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
	return c.NoContent(http.StatusNoContent)
}
