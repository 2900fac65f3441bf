package formula

import "strconv"

// Type is the type of a formula's value, and of the SQL it compiles to.
type Type int

// The types.
const (
	// Text is SQL text.
	Text Type = iota
	// Number is SQL numeric. A Field's SQL may be of any numeric type
	// (float8, as Appdor stores numbers, or numeric or an integer).
	Number
	// Bool is SQL boolean: a checkbox, or the result of a comparison.
	Bool
	// Time is SQL timestamptz: a date (midnight UTC) or a date and time.
	Time
	// Blank is BLANK() before it meets a type: an untyped SQL NULL.
	Blank
)

// String names the type.
func (t Type) String() string {
	switch t {
	case Text:
		return "Text"
	case Number:
		return "Number"
	case Bool:
		return "Bool"
	case Time:
		return "Time"
	case Blank:
		return "Blank"
	}
	return "Type(" + strconv.Itoa(int(t)) + ")"
}

// sqlType is the SQL type of a Type's values.
func (t Type) sqlType() string {
	switch t {
	case Number:
		return "numeric"
	case Bool:
		return "boolean"
	case Time:
		return "timestamptz"
	}
	return "text"
}

// Field is a field a formula refers to: its type, and the SQL expression of
// its value in the row at hand, which is NULL when the cell is empty.
type Field struct {
	Type Type
	SQL  string
}

// Env is what a formula is compiled against: its fields and its parameters.
type Env interface {
	// Field resolves a field reference, {Name} or a bare Name. It may call
	// Arg for parameters of the field's own SQL, which must then use them.
	// That SQL must not refer to a table named formula_let, which the
	// compiled SQL names in subqueries of its own.
	Field(name string) (Field, bool)
	// Arg adds a parameter of value v (a string, float64, bool or
	// time.Time) and returns its placeholder, such as "$3". The compiled
	// SQL uses every parameter it adds, with a cast to its SQL type.
	Arg(v any) string
}

// Expr is a compiled formula: a SQL expression of its value, and its type
// (which says the SQL type: see Type). The SQL is NULL when the value is
// blank, or an error such as a division by zero.
type Expr struct {
	SQL  string
	Type Type
}

// Compile compiles a parsed formula to a SQL expression of its value. Its
// errors are *Error: UnknownField or TypeMismatch.
func Compile(n Node, env Env) (Expr, error) {
	c := &compiler{env: env}
	v, err := c.node(n)
	if err != nil {
		return Expr{}, err
	}
	return Expr{SQL: c.as(v, v.typ), Type: v.typ}, nil
}

// Condition compiles a parsed formula to a SQL boolean that is never NULL:
// whether the formula's value is truthy, which is how Airtable's
// filterByFormula decides to keep a record. True is truthy, a number other
// than 0, text other than "", and any date; a blank or an error is not.
func Condition(n Node, env Env) (string, error) {
	c := &compiler{env: env}
	v, err := c.node(n)
	if err != nil {
		return "", err
	}
	return c.truth(v), nil
}

// compiler compiles one formula against one Env.
type compiler struct {
	env Env
}

// Numbers are numeric, which holds up to 131072 digits before the point
// and fails beyond. To keep far inside, every Number knows a bound on its
// digits (value.mag), and an operand of * or / whose bound is over
// clampAbove, such as a field's (of no known bound), is clamped to
// ±maxMagnitude first; a divisor nearer 0 than 1/maxMagnitude counts as 0.
// So no product or quotient has more than about 2*clampAbove digits.
const (
	maxMagnitude = "1e308"
	magMax       = 309 // digits of maxMagnitude
	clampAbove   = 10_000
	unknownMag   = 1 << 20 // no known bound
)

func (c *compiler) node(n Node) (value, error) {
	switch n := n.(type) {
	case *numberLit:
		v := n.v
		return value{typ: Number, num: &v, pos: n.pos}, nil
	case *textLit:
		s := n.v
		return value{typ: Text, str: &s, pos: n.pos}, nil
	case *boolLit:
		return value{typ: Bool, sql: boolSQL(n.v), pos: n.pos}, nil
	case *fieldRef:
		return c.field(n)
	case *negate:
		x, err := c.node(n.x)
		if err != nil {
			return value{}, err
		}
		if x.num != nil {
			v := -*x.num
			return value{typ: Number, num: &v, pos: n.pos}, nil
		}
		num, err := c.number(x, "-")
		if err != nil {
			return value{}, err
		}
		return value{typ: Number, sql: "(-" + num + ")", fail: x.fail, mag: magOf(x), whole: isWhole(x), pos: n.pos}, nil
	case *binary:
		return c.binary(n)
	case *call:
		return c.call(n)
	case nil:
		return value{}, errorf(Syntax, 0, "", "no formula")
	}
	return value{}, errorf(Syntax, n.Pos(), "", "unknown formula part")
}

func (c *compiler) field(n *fieldRef) (value, error) {
	f, ok := c.env.Field(n.name)
	if !ok {
		return value{}, errorf(UnknownField, n.pos, n.name, "unknown field {%s}", n.name)
	}
	if f.SQL == "" {
		return value{}, errorf(UnknownField, n.pos, n.name, "field {%s} cannot be used in a formula", n.name)
	}
	v := value{typ: f.Type, sql: "(" + f.SQL + ")", null: true, mag: unknownMag, pos: n.pos}
	switch f.Type {
	case Number:
		v.sql += "::numeric"
	case Text, Bool, Time:
	default:
		return value{}, errorf(TypeMismatch, n.pos, n.name, "field {%s} has a type formulas cannot use", n.name)
	}
	return v, nil
}

func (c *compiler) binary(n *binary) (value, error) {
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
		return value{typ: Text, sql: "(" + c.text(l) + " || " + c.text(r) + ")", fail: l.fail || r.fail, pos: n.pos}, nil
	case "+", "-", "*", "/":
		return c.arithmetic(n, l, r)
	case "=", "!=", "<", "<=", ">", ">=":
		return c.compare(n, l, r)
	}
	return value{}, errorf(Syntax, n.pos, "", "unknown operator %s", n.op)
}

// arithmetic is + - * / on numbers; a blank reads as 0 and a checkbox as 1
// or 0. A division by zero is an error.
func (c *compiler) arithmetic(n *binary, l, r value) (value, error) {
	a, err := c.number(l, n.op)
	if err != nil {
		return value{}, err
	}
	b, err := c.number(r, n.op)
	if err != nil {
		return value{}, err
	}
	out := value{typ: Number, fail: l.fail || r.fail, pos: n.pos}
	switch n.op {
	case "+", "-":
		out.sql = "(" + a + " " + n.op + " " + b + ")"
		out.whole = isWhole(l) && isWhole(r)
		out.mag = min(max(magOf(l), magOf(r))+1, unknownMag)
	case "*":
		a, ma := clamp(a, l)
		b, mb := clamp(b, r)
		out.sql = "(" + a + " * " + b + ")"
		out.whole = isWhole(l) && isWhole(r)
		out.mag = ma + mb
	case "/":
		a, ma := clamp(a, l)
		switch {
		case isWhole(r):
			// A whole divisor other than 0 is at least 1.
		case nearZero(r):
			b = "round(" + b + ", " + strconv.Itoa(magMax-1) + ")"
			ma += magMax
		default:
			ma += magMax // a literal at least 1e-308
		}
		out.sql = "(" + a + " / NULLIF(" + b + ", 0))"
		out.fail = true
		out.mag = ma
	}
	return out, nil
}

// clamp is the numeric SQL x of the operand v, limited to ±maxMagnitude
// when its bound is over clampAbove; and its bound then.
func clamp(x string, v value) (string, int) {
	if m := magOf(v); m <= clampAbove {
		return x, m
	}
	if !v.fail {
		return "LEAST(GREATEST(" + x + ", -" + maxMagnitude + "), " + maxMagnitude + ")", magMax
	}
	// GREATEST and LEAST pass over a NULL, which here is an error to keep.
	return let(func(xs ...string) string {
		return "(CASE WHEN " + xs[0] + " IS NULL THEN NULL ELSE LEAST(GREATEST(" + xs[0] + ", -" + maxMagnitude + "), " + maxMagnitude + ") END)"
	}, x), magMax
}

var sqlCompare = map[string]string{"=": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}

// compare is a comparison, as a SQL boolean that is NULL only for an
// error. The two sides are compared as numbers, text, checkboxes or dates:
// a blank takes the other side's type; a number and a checkbox compare as
// numbers; a text literal beside a number or a date is read as one, and ""
// beside one is a blank. A blank number is 0, a blank text "", a blank
// checkbox false, and a blank date is equal only to a blank and neither
// before nor after anything.
func (c *compiler) compare(n *binary, l, r value) (value, error) {
	if l.str != nil && *l.str == "" && r.typ != Text {
		l = value{typ: Blank, pos: l.pos}
	}
	if r.str != nil && *r.str == "" && l.typ != Text {
		r = value{typ: Blank, pos: r.pos}
	}
	lt, rt := l.typ, r.typ
	switch {
	case lt == Blank && rt == Blank:
		lt, rt = Text, Text
	case lt == Blank:
		lt = rt
	case rt == Blank:
		rt = lt
	}
	t := lt
	switch {
	case lt == rt:
	case lt == Number && rt == Bool || lt == Bool && rt == Number:
		t = Number
	case (lt == Number || lt == Time) && r.str != nil:
		t = lt
	case (rt == Number || rt == Time) && l.str != nil:
		t = rt
	default:
		return value{}, errorf(TypeMismatch, n.pos, "", "%s cannot compare %s with %s", n.op, lt, rt)
	}
	op := sqlCompare[n.op]
	out := value{typ: Bool, fail: l.fail || r.fail, pos: n.pos}
	switch t {
	case Number:
		a, err := c.number(l, n.op)
		if err != nil {
			return value{}, err
		}
		b, err := c.number(r, n.op)
		if err != nil {
			return value{}, err
		}
		out.sql = "(" + a + " " + op + " " + b + ")"
	case Text:
		out.sql = "(" + c.text(l) + " " + op + " " + c.text(r) + ")"
	case Bool:
		out.sql = "(" + c.truth3(l) + " " + op + " " + c.truth3(r) + ")"
	case Time:
		a, err := c.timeOf(l, n.op)
		if err != nil {
			return value{}, err
		}
		b, err := c.timeOf(r, n.op)
		if err != nil {
			return value{}, err
		}
		switch n.op {
		case "=":
			out.sql = "(" + a + " IS NOT DISTINCT FROM " + b + ")"
		case "!=":
			out.sql = "(" + a + " IS DISTINCT FROM " + b + ")"
		default:
			out.sql = "COALESCE(" + a + " " + op + " " + b + ", FALSE)"
		}
	}
	return out, nil
}
