package airtable

// Cells in Airtable's shapes: what each Appdor field type is called in
// Airtable's metadata, how a stored cell is answered, and how a record's
// fields, keyed by name (or id), become the grid's cells, keyed by id.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/grid"
)

// airtableType names each Appdor field type as Airtable's metadata does.
var airtableType = map[grid.FieldType]string{
	grid.TypeText:         "singleLineText",
	grid.TypeLongText:     "multilineText",
	grid.TypeNumber:       "number",
	grid.TypeCheckbox:     "checkbox",
	grid.TypeDate:         "date",
	grid.TypeDatetime:     "dateTime",
	grid.TypeSingleSelect: "singleSelect",
	grid.TypeMultiSelect:  "multipleSelects",
	grid.TypeEmail:        "email",
	grid.TypeURL:          "url",
	grid.TypeLink:         "multipleRecordLinks",
}

// fieldOptions is a field's options as Airtable's metadata shows them.
func fieldOptions(f *grid.Field) map[string]any {
	switch f.Type {
	case grid.TypeNumber:
		p := 0
		if f.Options.Precision != nil {
			p = *f.Options.Precision
		}
		return map[string]any{"precision": p}
	case grid.TypeCheckbox:
		return map[string]any{"icon": "check", "color": "greenBright"}
	case grid.TypeDate:
		return map[string]any{"dateFormat": map[string]string{"name": "iso", "format": "YYYY-MM-DD"}}
	case grid.TypeDatetime:
		return map[string]any{"timeZone": "utc",
			"dateFormat": map[string]string{"name": "iso", "format": "YYYY-MM-DD"},
			"timeFormat": map[string]string{"name": "24hour", "format": "HH:mm"}}
	case grid.TypeSingleSelect, grid.TypeMultiSelect:
		choices := make([]map[string]string, len(f.Options.Choices))
		for i, c := range f.Options.Choices {
			choices[i] = map[string]string{"id": choiceID(f, i), "name": c}
		}
		return map[string]any{"choices": choices}
	case grid.TypeLink:
		if f.Options.Table != nil {
			return map[string]any{"linkedTableId": f.Options.Table.String(), "prefersSingleRecordLink": false}
		}
	}
	return nil
}

// choiceID is a stable id for a choice: its field and its place.
func choiceID(f *grid.Field, i int) string {
	return fmt.Sprintf("sel%s%03d", f.ID.String()[:8], i)
}

// cellValue is a stored cell as Airtable answers it, and false when Airtable
// leaves it out: empty text, an empty list, an unchecked checkbox. A
// datetime is an ISO string in UTC with milliseconds, as Airtable writes
// them; every other value is as the grid stores it (numbers, date strings,
// choice names, lists of choice names or record ids).
func cellValue(f *grid.Field, raw json.RawMessage) (json.RawMessage, bool) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0, string(raw) == "null", string(raw) == `""`, string(raw) == "[]", string(raw) == "false":
		return nil, false
	}
	if f.Type == grid.TypeDatetime {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
				b, _ := json.Marshal(t.UTC().Format("2006-01-02T15:04:05.000Z"))
				return b, true
			}
		}
	}
	return raw, true
}

// record is one record as Airtable answers it.
type record struct {
	ID          string                     `json:"id"`
	CreatedTime string                     `json:"createdTime"`
	Fields      map[string]json.RawMessage `json:"fields"`
}

// recordOf turns a grid row into a record, its fields keyed by name (or by
// id, byID); only the fields keep names (nil: all of t's fields).
func recordOf(t *grid.Table, r grid.Row, byID bool, keep map[uuid.UUID]bool) (record, error) {
	out := record{ID: r.ID.String(), CreatedTime: r.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z"),
		Fields: map[string]json.RawMessage{}}
	var cells map[string]json.RawMessage
	if len(r.Cells) > 0 {
		if err := json.Unmarshal(r.Cells, &cells); err != nil {
			return out, err
		}
	}
	for i := range t.Fields {
		f := &t.Fields[i]
		if keep != nil && !keep[f.ID] {
			continue
		}
		v, ok := cellValue(f, cells[f.ID.String()])
		if !ok {
			continue
		}
		key := f.Name
		if byID {
			key = f.ID.String()
		}
		out.Fields[key] = v
	}
	return out, nil
}

// fieldRef finds the field a record's key names: by name first, then by id.
func fieldRef(t *grid.Table, key string) *grid.Field {
	if f := t.FieldByName(key); f != nil {
		return f
	}
	return t.Field(key)
}

// cellsOf turns a record's fields into grid cells keyed by field id, with
// Airtable's typecast when asked. A key that names no field is
// UNKNOWN_FIELD_NAME.
func cellsOf(t *grid.Table, fields map[string]json.RawMessage, typecast bool) (map[string]json.RawMessage, error) {
	cells := make(map[string]json.RawMessage, len(fields))
	for key, v := range fields {
		f := fieldRef(t, key)
		if f == nil {
			return nil, fail(TUnknownField, "Unknown field name: %q", truncate(key))
		}
		if f.Type == grid.TypeCheckbox && string(bytes.TrimSpace(v)) == "false" {
			v = json.RawMessage("null") // Airtable keeps no unchecked value
		}
		cells[f.ID.String()] = v
	}
	if typecast {
		cells = grid.Typecast(t, cells)
	}
	return cells, nil
}

// writeError turns a grid write's validation error into Airtable's: a cell
// a field cannot hold is INVALID_VALUE_FOR_COLUMN naming the field, a choice
// the field lacks INVALID_MULTIPLE_CHOICE_OPTIONS (Appdor adds no choice on
// a write, with typecast or without).
func writeError(t *grid.Table, err error) error {
	ae := asError(err)
	if ae == nil || ae.Code != appdor.EValidation {
		return err
	}
	details, _ := ae.Details.([]appdor.Detail)
	for _, d := range details {
		f := t.Field(d.Field)
		if f == nil {
			continue
		}
		if (f.Type == grid.TypeSingleSelect || f.Type == grid.TypeMultiSelect) && bytes.Contains([]byte(d.Message), []byte("is not one of the choices")) {
			return fail(TInvalidChoice, "Field %q cannot accept the provided value: %s; add the choice to the field first", f.Name, d.Message)
		}
		return fail(TInvalidValue, "Field %q cannot accept the provided value: %s", f.Name, d.Message)
	}
	return fail(TInvalidValue, "%s", ae.Message)
}

// truncate keeps what an error message quotes short.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
