package grid

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/mail"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
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
)

var fieldTypes = map[FieldType]bool{
	TypeText: true, TypeLongText: true, TypeNumber: true, TypeCheckbox: true, TypeDate: true,
	TypeDatetime: true, TypeSingleSelect: true, TypeMultiSelect: true, TypeEmail: true, TypeURL: true,
}

// Limits on what one cell and one table may hold.
const (
	maxTextLen     = 10_000
	maxLongTextLen = 100_000
	maxChoices     = 500
	maxFields      = 500
	maxPrecision   = 10
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
			v = math.Round(v*p) / p
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
