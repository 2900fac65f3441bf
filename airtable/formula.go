package airtable

// filterByFormula: Airtable's formula, parsed and compiled to one SQL
// condition on the rows' cells by package formula, with every value a
// parameter. The formula is compiled once to check it (an error is
// INVALID_FILTER_BY_FORMULA naming what is wrong) and again, identically,
// when the grid renders the page's statement.

import (
	"errors"

	"github.com/appdor/appdor/formula"
	"github.com/appdor/appdor/grid"
)

// maxFormula bounds a filterByFormula's length in bytes.
const maxFormula = 10_000

// whereFormula compiles src against t's fields into a grid condition.
func whereFormula(t *grid.Table, src string) (grid.Condition, error) {
	if len(src) > maxFormula {
		return nil, fail(TInvalidFormula, "The formula for filtering records is longer than %d bytes", maxFormula)
	}
	node, err := formula.Parse(src)
	if err != nil {
		return nil, formulaError(err)
	}
	if _, err := formula.Condition(node, env{t: t, b: &probe{}}); err != nil {
		return nil, formulaError(err)
	}
	return func(b grid.Binder) string {
		sql, err := formula.Condition(node, env{t: t, b: b})
		if err != nil {
			return "false" // cannot happen: the probe compiled the same formula on the same fields
		}
		return sql
	}, nil
}

// formulaError is a formula's error as Airtable names it.
func formulaError(err error) error {
	var fe *formula.Error
	if errors.As(err, &fe) {
		return fail(TInvalidFormula, "The formula for filtering records is invalid: %s", fe.Error())
	}
	return fail(TInvalidFormula, "The formula for filtering records is invalid: %v", err)
}

// env resolves a formula's field references against a table: {Name} is
// the field of that name (in any case) or id, typed for the formula engine.
type env struct {
	t *grid.Table
	b grid.Binder
}

func (e env) Arg(v any) string { return e.b.Arg(v) }

func (e env) Field(name string) (formula.Field, bool) {
	f := fieldRef(e.t, name)
	if f == nil {
		return formula.Field{}, false
	}
	switch f.Type {
	case grid.TypeNumber:
		return formula.Field{Type: formula.Number, SQL: e.b.Value(f)}, true
	case grid.TypeCheckbox:
		return formula.Field{Type: formula.Bool, SQL: e.b.Value(f)}, true
	case grid.TypeDatetime:
		return formula.Field{Type: formula.Time, SQL: e.b.Value(f)}, true
	case grid.TypeDate:
		// A date cell is an ISO date, checked when written: midnight UTC.
		c := e.b.Cell(f)
		return formula.Field{Type: formula.Time,
			SQL: "(CASE WHEN jsonb_typeof(" + c + ") = 'string' THEN ((" + c + " #>> '{}')::date)::timestamp AT TIME ZONE 'UTC' END)"}, true
	case grid.TypeMultiSelect, grid.TypeLink:
		// A list reads as its items joined by ", ", as Airtable shows a
		// multiple select (a link's items are record ids).
		c := e.b.Cell(f)
		return formula.Field{Type: formula.Text,
			SQL: "(CASE WHEN jsonb_typeof(" + c + ") = 'array' AND jsonb_array_length(" + c + ") > 0 THEN " +
				"(SELECT string_agg(x, ', ' ORDER BY n) FROM jsonb_array_elements_text(" + c + ") WITH ORDINALITY AS a(x, n)) END)"}, true
	}
	return formula.Field{Type: formula.Text, SQL: e.b.Value(f)}, true
}

// probe is a binder that renders nothing usable, for checking a formula.
type probe struct{ n int }

func (p *probe) Arg(any) string             { p.n++; return "$0" }
func (p *probe) Cell(*grid.Field) string    { return "NULL::jsonb" }
func (p *probe) Value(f *grid.Field) string { return "NULL" }
