package formula

import (
	"math"
	"time"
)

// value is a compiled part of a formula.
//
// A literal keeps its Go value and becomes a parameter only where it is
// used, and as what it is used as (a text literal can be read as a number
// or a date), so that every parameter the Env adds is used by the SQL.
//
// Its SQL is NULL for two reasons: a blank (an empty cell, BLANK(), an IF
// without its else), which reads as 0 or "" or false where a value is
// needed; and an error (a division by zero, a date difference of a blank
// date), which stays NULL through every operation, so that no comparison
// with it holds and it is not truthy, as an error keeps no record in
// Airtable. null and fail say which a value's NULL can be; fail wins.
//
// An IF is kept as its parts, and each use converts its branches one by
// one, so that a blank branch and an error branch each behave as
// themselves.
type value struct {
	typ Type
	sql string // the SQL in typ's SQL type; unset for literals and IFs

	str   *string  // a text literal
	num   *float64 // a number literal
	cases *cases   // an IF

	null  bool // NULL is a blank
	fail  bool // NULL is an error
	mag   int  // a Number's bound on its digits before the point (see magOf)
	whole bool // a Number that is always a whole number
	pos   int
}

// cases are an IF's parts: its condition, as a SQL boolean that is NULL
// only when condFail and the condition is an error, and its branches.
type cases struct {
	cond        string
	condFail    bool
	then, other value
}

// split converts each branch of the IF v with conv.
func split(v value, conv func(value) (string, error)) (string, error) {
	a, err := conv(v.cases.then)
	if err != nil {
		return "", err
	}
	b, err := conv(v.cases.other)
	if err != nil {
		return "", err
	}
	if v.cases.condFail {
		// Neither branch when the condition is an error.
		return "(CASE " + v.cases.cond + " WHEN TRUE THEN " + a + " WHEN FALSE THEN " + b + " END)", nil
	}
	return "(CASE WHEN " + v.cases.cond + " THEN " + a + " ELSE " + b + " END)", nil
}

// splitSQL is split for conversions that cannot fail.
func splitSQL(v value, conv func(value) string) string {
	s, _ := split(v, func(b value) (string, error) { return conv(b), nil })
	return s
}

// blank is whether v's NULL is a blank to read as 0, "" or false.
func blank(v value) bool { return v.null && !v.fail }

// param is a new parameter of value v, cast to SQL type cast.
func (c *compiler) param(v any, cast string) string { return c.env.Arg(v) + "::" + cast }

// numParam is a number literal's parameter, as numeric.
func (c *compiler) numParam(f float64) string { return c.param(f, "float8") + "::numeric" }

// own is the SQL of a value that is not an IF, in its own type.
func (c *compiler) own(v value) string {
	switch {
	case v.str != nil:
		return c.param(*v.str, "text")
	case v.num != nil:
		return c.numParam(*v.num)
	case v.typ == Blank:
		return "NULL"
	}
	return v.sql
}

// as is v's SQL in type t's SQL type (v's own type or one IF mixes into
// it), NULL when blank or an error.
func (c *compiler) as(v value, t Type) string {
	if v.cases != nil {
		return splitSQL(v, func(b value) string { return c.as(b, t) })
	}
	switch {
	case v.typ == Blank:
		if t == Blank {
			return "NULL"
		}
		return "NULL::" + t.sqlType()
	case t == Text:
		return c.textOrNull(v)
	case t == Number && v.typ == Bool:
		return "(CASE " + v.sql + " WHEN TRUE THEN 1 WHEN FALSE THEN 0 END)::numeric"
	}
	return c.own(v)
}

// textOrNull is v as SQL text, NULL when blank (but a checkbox, which is 1
// or 0) or an error: a number is its decimal digits, a date its ISO 8601
// form in UTC.
func (c *compiler) textOrNull(v value) string {
	if v.cases != nil {
		return splitSQL(v, c.textOrNull)
	}
	switch v.typ {
	case Text:
		return c.own(v)
	case Number:
		return "trim_scale(" + c.own(v) + ")::text"
	case Bool:
		if v.fail {
			return "(CASE " + v.sql + " WHEN TRUE THEN '1' WHEN FALSE THEN '0' END)"
		}
		return "(CASE WHEN " + v.sql + " THEN '1' ELSE '0' END)"
	case Time:
		return "to_char((" + v.sql + ") AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
	}
	return "NULL::text"
}

// text is v as SQL text, a blank as "": NULL only for an error.
func (c *compiler) text(v value) string {
	if v.cases != nil {
		return splitSQL(v, c.text)
	}
	switch {
	case v.typ == Blank:
		return "''"
	case blank(v) && v.typ != Bool:
		return "COALESCE(" + c.textOrNull(v) + ", '')"
	}
	return c.textOrNull(v)
}

// number is v as SQL numeric, a blank as 0, for the operator or function
// what: NULL only for an error. A checkbox is 1 or 0; a text literal must
// read as a number.
func (c *compiler) number(v value, what string) (string, error) {
	switch v.typ {
	case Number, Bool, Blank:
	case Text:
		if v.str != nil {
			if f, ok := numberText(*v.str); ok {
				return c.numParam(f), nil
			}
			return "", errorf(TypeMismatch, v.pos, funcName(what), "%s needs a number, and %s is not one", what, quote(*v.str))
		}
		fallthrough
	default:
		return "", errorf(TypeMismatch, v.pos, funcName(what), "%s needs a number, got %s", what, v.typ)
	}
	if v.cases != nil {
		return split(v, func(b value) (string, error) { return c.number(b, what) })
	}
	switch {
	case v.typ == Blank:
		return "0::numeric", nil
	case v.typ == Bool && v.fail:
		return "(CASE " + v.sql + " WHEN TRUE THEN 1 WHEN FALSE THEN 0 END)::numeric", nil
	case v.typ == Bool:
		return "(CASE WHEN " + v.sql + " THEN 1 ELSE 0 END)::numeric", nil
	case blank(v):
		return "COALESCE(" + v.sql + ", 0)", nil
	}
	return c.own(v), nil
}

// timeOf is v as SQL timestamptz, NULL when blank, for the operator or
// function what. A text literal must read as a date (see parseTime); it is
// read here, so the SQL never casts text to a date.
func (c *compiler) timeOf(v value, what string) (string, error) {
	switch v.typ {
	case Time:
		if v.cases != nil {
			return split(v, func(b value) (string, error) { return c.timeOf(b, what) })
		}
		return v.sql, nil
	case Blank:
		return "NULL::timestamptz", nil
	case Text:
		if v.str != nil {
			if t, ok := parseTime(*v.str); ok {
				return c.param(t, "timestamptz"), nil
			}
			return "", errorf(TypeMismatch, v.pos, funcName(what), "%s needs a date, and %s is not one (write YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ)", what, quote(*v.str))
		}
	}
	return "", errorf(TypeMismatch, v.pos, funcName(what), "%s needs a date, got %s", what, v.typ)
}

// truth3 is whether v is truthy, as a SQL boolean that is NULL only for an
// error.
func (c *compiler) truth3(v value) string {
	if v.cases != nil {
		return splitSQL(v, c.truth3)
	}
	switch v.typ {
	case Bool:
		if blank(v) {
			return "COALESCE(" + v.sql + ", FALSE)"
		}
		return v.sql
	case Number:
		switch {
		case v.num != nil:
			return boolSQL(*v.num != 0)
		case blank(v):
			return "(COALESCE(" + v.sql + ", 0) <> 0)"
		}
		return "(" + v.sql + " <> 0)"
	case Text:
		switch {
		case v.str != nil:
			return boolSQL(*v.str != "")
		case blank(v):
			return "(COALESCE(" + v.sql + ", '') <> '')"
		}
		return "(" + v.sql + " <> '')"
	case Time:
		return "(" + v.sql + " IS NOT NULL)"
	}
	return "FALSE"
}

// truth is whether v is truthy, as a SQL boolean that is never NULL: an
// error is not.
func (c *compiler) truth(v value) string {
	if v.fail {
		return "COALESCE(" + c.truth3(v) + ", FALSE)"
	}
	return c.truth3(v)
}

func boolSQL(b bool) string {
	if b {
		return "TRUE"
	}
	return "FALSE"
}

// funcName is what, when it is a function's name, for Error.Name.
func funcName(what string) string {
	if _, ok := functions[what]; ok {
		return what
	}
	return ""
}

// magOf is a bound on the digits before the point of v as a number.
func magOf(v value) int {
	f := 0.0
	switch {
	case v.num != nil:
		f = *v.num
	case v.str != nil:
		f, _ = numberText(*v.str)
	case v.typ == Number:
		return v.mag
	}
	return 1 + int(math.Log10(math.Abs(f)+1))
}

// isWhole reports whether v as a number is known to be a whole number.
func isWhole(v value) bool {
	return v.whole || v.typ == Bool || v.typ == Blank || v.num != nil && *v.num == math.Trunc(*v.num)
}

// nearZero reports whether v as a number may be nearer 0 than 1e-308
// without being 0.
func nearZero(v value) bool {
	if v.num != nil {
		return *v.num != 0 && math.Abs(*v.num) < 1e-308
	}
	if v.str != nil {
		f, _ := numberText(*v.str)
		return f != 0 && math.Abs(f) < 1e-308
	}
	return !isWhole(v)
}

// timeLayouts are the forms a text literal can give a date in: RFC 3339, or
// without a zone (then UTC), or a date alone (midnight UTC).
var timeLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05.999999999",
	"2006-01-02T15:04",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02 15:04",
	time.DateOnly,
}

// parseTime reads s as a date, in UTC.
func parseTime(s string) (time.Time, bool) {
	for _, layout := range timeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}
