package formula

import (
	"strconv"
	"strings"
	"time"
)

// Type is the type of a formula's value.
type Type int

// The types. Blank is BLANK() before it meets a type.
const (
	Blank Type = iota
	Text
	Number
	Bool
	Time // a timestamptz
)

func (t Type) String() string {
	return [...]string{"blank", "text", "number", "checkbox", "date"}[t]
}

// Field is a field a formula refers to: its type and the SQL expression of
// its value, NULL when the cell is empty.
type Field struct {
	Type Type
	SQL  string
}

// Env is what a formula is compiled against.
type Env interface {
	// Field resolves a field reference ({Name}, or a bare name); it may
	// call Arg for the field's own parameters.
	Field(name string) (Field, bool)
	// Arg is the placeholder of a new parameter v: a string, a float64, a
	// bool or a time.Time.
	Arg(v any) string
}

// Expr is a compiled formula: a SQL expression and its type.
type Expr struct {
	SQL  string
	Type Type
}

// Compile compiles a parsed formula to a SQL expression of its value.
func Compile(n Node, env Env) (Expr, error) {
	c := compiler{env: env}
	v, err := c.node(n)
	if err != nil {
		return Expr{}, err
	}
	return Expr{SQL: c.sql(v), Type: v.typ}, nil
}

// Condition compiles a parsed formula to a SQL boolean that is never NULL:
// whether its value is truthy, as Airtable's filterByFormula keeps a record
// (true, a number not 0, text not empty, a date).
func Condition(n Node, env Env) (string, error) {
	c := compiler{env: env}
	v, err := c.node(n)
	if err != nil {
		return "", err
	}
	return c.truth(v), nil
}

type compiler struct{ env Env }

// value is a compiled part: its SQL, its type, and for a text literal its
// text, which a number or a date may be read from.
type value struct {
	sql string
	typ Type
	lit *string
	at  int
	// failed is whether NULL means an error (a division by zero, a date
	// difference with a blank date) rather than blank: Airtable's #ERROR,
	// which no comparison keeps.
	failed bool
}

func (c compiler) arg(v any) string {
	p := c.env.Arg(v)
	switch v.(type) {
	case float64:
		return p + "::float8"
	case bool:
		return p + "::boolean"
	case time.Time:
		return p + "::timestamptz"
	}
	return p + "::text"
}

func (c compiler) node(n Node) (value, error) {
	switch n := n.(type) {
	case numLit:
		return value{sql: c.arg(n.v), typ: Number, at: n.at}, nil
	case strLit:
		// Its parameter is made where it is used as text (sql): a literal
		// read as a number, a date or a unit makes none, and PostgreSQL
		// cannot type a parameter no statement uses.
		s := n.v
		return value{typ: Text, lit: &s, at: n.at}, nil
	case boolLit:
		if n.v {
			return value{sql: "TRUE", typ: Bool, at: n.at}, nil
		}
		return value{sql: "FALSE", typ: Bool, at: n.at}, nil
	case fieldRef:
		f, ok := c.env.Field(n.name)
		if !ok {
			return value{}, errAt(UnknownField, n.at, n.name, "unknown field %q", n.name)
		}
		return value{sql: f.SQL, typ: f.Type, at: n.at}, nil
	case unary:
		x, err := c.node(n.x)
		if err != nil {
			return value{}, err
		}
		num, err := c.number(x, "-")
		if err != nil {
			return value{}, err
		}
		return value{sql: "(-" + num + ")", typ: Number, at: n.at}, nil
	case binary:
		return c.binary(n)
	case call:
		return c.call(n)
	}
	return value{}, errAt(Syntax, n.pos(), "", "unknown formula part")
}

// sql is v's SQL, a text literal's parameter made now.
func (c compiler) sql(v value) string {
	if v.sql == "" && v.lit != nil {
		return c.arg(*v.lit)
	}
	return v.sql
}

// number is v as a float8 that is never NULL (blank reads as 0).
func (c compiler) number(v value, what string) (string, error) {
	switch v.typ {
	case Number:
		if v.failed {
			return v.sql, nil
		}
		return "COALESCE(" + v.sql + ", 0::float8)", nil
	case Bool:
		return "(CASE WHEN " + v.sql + " THEN 1::float8 ELSE 0::float8 END)", nil
	case Blank:
		return "0::float8", nil
	case Text:
		if v.lit != nil {
			if f, err := strconv.ParseFloat(strings.TrimSpace(*v.lit), 64); err == nil {
				return c.arg(f), nil
			}
		}
	}
	return "", errAt(TypeMismatch, v.at, "", "%s needs a number, got %s", what, v.typ)
}

// text is v as text that is never NULL (blank reads as "").
func (c compiler) text(v value) string {
	switch v.typ {
	case Number:
		return "COALESCE((" + v.sql + ")::text, '')"
	case Bool:
		return "(CASE WHEN " + v.sql + " THEN '1' ELSE '0' END)"
	case Time:
		return "COALESCE(to_char((" + v.sql + ") AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), '')"
	case Blank:
		return "''::text"
	}
	return "COALESCE(" + c.sql(v) + ", '')"
}

// instant is v as a timestamptz, NULL when blank; a text literal is read as
// a date here, so the SQL never casts text.
func (c compiler) instant(v value, what string) (string, error) {
	switch v.typ {
	case Time:
		return v.sql, nil
	case Blank:
		return "NULL::timestamptz", nil
	case Text:
		if v.lit != nil {
			if t, ok := parseTime(*v.lit); ok {
				return c.arg(t), nil
			}
			return "", errAt(TypeMismatch, v.at, "", "%s needs a date; %q is not one (use YYYY-MM-DD or an ISO date and time)", what, *v.lit)
		}
	}
	return "", errAt(TypeMismatch, v.at, "", "%s needs a date, got %s", what, v.typ)
}

var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04", time.DateOnly}

func parseTime(s string) (time.Time, bool) {
	s = strings.TrimSpace(s)
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}

// truth is whether v is truthy, never NULL.
func (c compiler) truth(v value) string {
	switch v.typ {
	case Bool:
		return "COALESCE(" + v.sql + ", FALSE)"
	case Number:
		return "(COALESCE(" + v.sql + ", 0::float8) <> 0)"
	case Text:
		return "(COALESCE(" + c.sql(v) + ", '') <> '')"
	case Time:
		return "((" + v.sql + ") IS NOT NULL)"
	}
	return "FALSE"
}

var sqlOp = map[string]string{"=": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}

func (c compiler) binary(n binary) (value, error) {
	l, err := c.node(n.l)
	if err != nil {
		return value{}, err
	}
	r, err := c.node(n.r)
	if err != nil {
		return value{}, err
	}
	switch n.op {
	case "&":
		return value{sql: "(" + c.text(l) + " || " + c.text(r) + ")", typ: Text, at: n.at}, nil
	case "+", "-", "*", "/":
		a, err := c.number(l, n.op)
		if err != nil {
			return value{}, err
		}
		b, err := c.number(r, n.op)
		if err != nil {
			return value{}, err
		}
		if n.op == "/" {
			return value{sql: "(" + a + " / NULLIF(" + b + ", 0::float8))", typ: Number, at: n.at, failed: true}, nil
		}
		return value{sql: "(" + a + " " + n.op + " " + b + ")", typ: Number, at: n.at, failed: l.failed || r.failed}, nil
	}
	return c.compare(n, l, r)
}

// compare renders a comparison as a boolean that is never NULL.
func (c compiler) compare(n binary, l, r value) (value, error) {
	op := sqlOp[n.op]
	eq := n.op == "=" || n.op == "!="
	out := func(sql string) (value, error) {
		return value{sql: "COALESCE(" + sql + ", FALSE)", typ: Bool, at: n.at}, nil
	}
	t := l.typ
	if t == Blank {
		t = r.typ
	}
	// A text literal beside a number or a date is read as one.
	if l.typ == Text && l.lit != nil && (r.typ == Number || r.typ == Time) {
		t = r.typ
	} else if r.typ == Text && r.lit != nil && (l.typ == Number || l.typ == Time) {
		t = l.typ
	}
	switch {
	case t == Blank:
		return out(strings.ToUpper(strconv.FormatBool(eq == (n.op == "="))))
	case t == Time:
		if l.typ != Time && l.typ != Blank && l.lit == nil || r.typ != Time && r.typ != Blank && r.lit == nil {
			return value{}, errAt(TypeMismatch, n.at, "", "%s compares a date with %s", n.op, otherType(l, r, Time))
		}
		a, err := c.instant(l, n.op)
		if err != nil {
			return value{}, err
		}
		b, err := c.instant(r, n.op)
		if err != nil {
			return value{}, err
		}
		if eq {
			if l.typ == Blank || r.typ == Blank {
				x := a
				if l.typ == Blank {
					x = b
				}
				sql := "(" + x + ") IS NULL"
				if n.op == "!=" {
					sql = "(" + x + ") IS NOT NULL"
				}
				return out(sql)
			}
		}
		return out("(" + a + " " + op + " " + b + ")")
	case t == Number || t == Bool && (l.typ == Number || r.typ == Number):
		if l.typ == Text && l.lit == nil || r.typ == Text && r.lit == nil {
			return out("(" + c.text(l) + " " + op + " " + c.text(r) + ")")
		}
		a, err := c.number(l, n.op)
		if err != nil {
			return value{}, err
		}
		b, err := c.number(r, n.op)
		if err != nil {
			return value{}, err
		}
		return out("(" + a + " " + op + " " + b + ")")
	case t == Bool:
		if l.typ != Bool && l.typ != Blank || r.typ != Bool && r.typ != Blank {
			return out("(" + c.text(l) + " " + op + " " + c.text(r) + ")")
		}
		return out("(" + c.truth(l) + " " + op + " " + c.truth(r) + ")")
	}
	return out("(" + c.text(l) + " " + op + " " + c.text(r) + ")")
}

func otherType(l, r value, t Type) Type {
	if l.typ == t {
		return r.typ
	}
	return l.typ
}
