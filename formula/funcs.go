package formula

import (
	"math"
	"strconv"
	"strings"
)

// arity is how many arguments a function takes: at least min, and at most
// max, or any number when max is -1.
type arity struct{ min, max int }

// functions are the functions the language has, by upper-case name.
var functions = map[string]arity{
	"AND":           {1, -1},
	"OR":            {1, -1},
	"NOT":           {1, 1},
	"IF":            {2, 3},
	"BLANK":         {0, 0},
	"TRUE":          {0, 0},
	"FALSE":         {0, 0},
	"FIND":          {2, 3},
	"SEARCH":        {2, 3},
	"LEN":           {1, 1},
	"LOWER":         {1, 1},
	"UPPER":         {1, 1},
	"TRIM":          {1, 1},
	"IS_BEFORE":     {2, 2},
	"IS_AFTER":      {2, 2},
	"DATETIME_DIFF": {2, 3},
	"TODAY":         {0, 0},
	"NOW":           {0, 0},
}

// IsFunction reports whether the language has a function of that name, in
// any case.
func IsFunction(name string) bool {
	_, ok := functions[strings.ToUpper(name)]
	return ok
}

// checkArity checks a call's number of arguments.
func checkArity(n *call) error {
	a, ok := functions[n.name]
	if !ok {
		return errorf(UnknownFunction, n.pos, n.name, "unknown function %s", n.name)
	}
	got := len(n.args)
	if got >= a.min && (a.max < 0 || got <= a.max) {
		return nil
	}
	var want string
	switch {
	case a.max == 0:
		want = "no arguments"
	case a.max < 0:
		want = "at least " + plural(a.min, "argument")
	case a.min == a.max:
		want = plural(a.min, "argument")
	default:
		want = strconv.Itoa(a.min) + " or " + strconv.Itoa(a.max) + " arguments"
	}
	return errorf(TypeMismatch, n.pos, n.name, "%s takes %s, got %d", n.name, want, got)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

func (c *compiler) call(n *call) (value, error) {
	if err := checkArity(n); err != nil {
		return value{}, err
	}
	args := make([]value, len(n.args))
	fail := false
	for i, a := range n.args {
		v, err := c.node(a)
		if err != nil {
			return value{}, err
		}
		args[i] = v
		fail = fail || v.fail
	}
	out := value{fail: fail, pos: n.pos}
	switch n.name {
	case "AND", "OR":
		parts := make([]string, len(args))
		for i, a := range args {
			parts[i] = c.truth3(a)
		}
		out.typ, out.sql = Bool, "("+strings.Join(parts, " "+n.name+" ")+")"
	case "NOT":
		out.typ, out.sql = Bool, "(NOT "+c.truth3(args[0])+")"
	case "IF":
		return c.ifThen(n, args)
	case "BLANK":
		out.typ = Blank
	case "TRUE", "FALSE":
		out.typ, out.sql = Bool, boolSQL(n.name == "TRUE")
	case "FIND", "SEARCH":
		return c.find(n, args)
	case "LEN":
		out.typ, out.sql = Number, "char_length("+c.text(args[0])+")::numeric"
		out.mag, out.whole = 10, true
	case "LOWER":
		out.typ, out.sql = Text, "lower("+c.text(args[0])+")"
	case "UPPER":
		out.typ, out.sql = Text, "upper("+c.text(args[0])+")"
	case "TRIM":
		out.typ, out.sql = Text, "btrim("+c.text(args[0])+", E' \\t\\n\\x0B\\f\\r')"
	case "IS_BEFORE", "IS_AFTER":
		a, err := c.timeOf(args[0], n.name)
		if err != nil {
			return value{}, err
		}
		b, err := c.timeOf(args[1], n.name)
		if err != nil {
			return value{}, err
		}
		op := " < "
		if n.name == "IS_AFTER" {
			op = " > "
		}
		out.typ, out.sql, out.fail = Bool, "COALESCE("+a+op+b+", FALSE)", false
	case "DATETIME_DIFF":
		return c.datetimeDiff(n, args)
	case "TODAY":
		out.typ, out.sql = Time, "(date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')"
	case "NOW":
		out.typ, out.sql = Time, "now()"
	default:
		return value{}, errorf(UnknownFunction, n.pos, n.name, "unknown function %s", n.name)
	}
	return out, nil
}

// ifThen is IF(cond, then[, else]): then when cond is truthy, else
// otherwise (blank without one), and an error when cond is one. Its type
// is the branches' type when they have one (a blank branch takes the
// other's), a number when one is a checkbox and the other a number, and
// text otherwise.
func (c *compiler) ifThen(n *call, args []value) (value, error) {
	then, other := args[1], value{typ: Blank, pos: n.pos}
	if len(args) == 3 {
		other = args[2]
	}
	t := then.typ
	switch {
	case then.typ == Blank && other.typ == Blank:
		// Text, so that the CASE, and the parameters of its condition,
		// stay in the SQL.
		t = Text
	case then.typ == other.typ:
	case then.typ == Blank:
		t = other.typ
	case other.typ == Blank:
	case then.typ == Number && other.typ == Bool || then.typ == Bool && other.typ == Number:
		t = Number
	default:
		t = Text
	}
	out := value{
		typ:   t,
		cases: &cases{cond: c.truth3(args[0]), condFail: args[0].fail, then: then, other: other},
		null:  true,
		fail:  args[0].fail || then.fail || other.fail,
		pos:   n.pos,
	}
	if t == Number {
		out.mag = max(magOf(then), magOf(other))
		out.whole = isWhole(then) && isWhole(other)
	}
	return out, nil
}

// inline is how long a SQL expression may be and still be written twice in
// the SQL; a longer one is computed once, in a subquery.
const inline = 300

// let is body applied to the SQL expressions xs: written in place when they
// are short, or else computed once in a subquery that body refers to by
// column name, so that no expression's SQL is copied twice over (which,
// nested, would grow without bound).
func let(body func(xs ...string) string, xs ...string) string {
	short := true
	for _, x := range xs {
		short = short && len(x) <= inline
	}
	if short {
		return body(xs...)
	}
	names := make([]string, len(xs))
	cols := make([]string, len(xs))
	for i, x := range xs {
		names[i] = "formula_let.formula_" + string(rune('a'+i))
		cols[i] = x + " AS formula_" + string(rune('a'+i))
	}
	// OFFSET 0 keeps PostgreSQL from folding the subquery into its
	// parent, which would copy each expression back in.
	return "(SELECT " + body(names...) + " FROM (SELECT " + strings.Join(cols, ", ") + " OFFSET 0) AS formula_let)"
}

// orNull is body, but NULL when any of its arguments is.
func orNull(body func(xs ...string) string) func(xs ...string) string {
	return func(xs ...string) string {
		var b strings.Builder
		b.WriteString("(CASE WHEN ")
		for i, x := range xs {
			if i > 0 {
				b.WriteString(" OR ")
			}
			b.WriteString(x + " IS NULL")
		}
		b.WriteString(" THEN NULL ELSE " + body(xs...) + " END)")
		return b.String()
	}
}

// find is FIND(needle, haystack[, start]) and SEARCH(…): the 1-based
// position of the first needle in haystack after its first start
// characters (start is 0 by default), and when there is none, 0 for FIND
// and blank for SEARCH. Both are case-sensitive.
func (c *compiler) find(n *call, args []value) (value, error) {
	out := value{typ: Number, mag: 10, whole: true, pos: n.pos}
	xs := []string{c.text(args[1]), c.text(args[0])}
	for _, a := range args {
		out.fail = out.fail || a.fail
	}
	literal := false // the start is an int parameter, clamped here
	if len(args) == 3 {
		if s := args[2]; s.num != nil || s.str != nil {
			f := 0.0
			if s.num != nil {
				f = *s.num
			} else if v, ok := numberText(*s.str); ok {
				f = v
			} else {
				return value{}, errorf(TypeMismatch, s.pos, n.name, "%s needs a number, and %s is not one", n.name, quote(*s.str))
			}
			xs = append(xs, c.param(math.Min(math.Max(math.Trunc(f), 0), 1e9), "float8")+"::int")
			literal = true
		} else {
			s, err := c.number(args[2], n.name)
			if err != nil {
				return value{}, err
			}
			xs = append(xs, s)
		}
	}
	body := func(p ...string) string {
		hay, needle := p[0], p[1]
		if len(p) == 2 {
			return "strpos(" + hay + ", " + needle + ")::numeric"
		}
		start := p[2]
		if !literal {
			start = "LEAST(GREATEST(trunc(" + start + "), 0), 1000000000)::int"
		}
		return "COALESCE(NULLIF(strpos(substr(" + hay + ", " + start + " + 1), " + needle + "), 0)::numeric + " + start + ", 0)"
	}
	switch {
	case out.fail:
		out.sql = let(orNull(body), xs...)
	case len(xs) == 2:
		out.sql = body(xs...)
	case literal:
		out.sql = body(xs...)
	default:
		// Only the start is written twice.
		out.sql = let(func(s ...string) string { return body(xs[0], xs[1], s[0]) }, xs[2])
	}
	if n.name == "SEARCH" {
		out.sql = "NULLIF(" + out.sql + ", 0)"
		out.null = true
	}
	return out, nil
}

// fixedUnits are DATETIME_DIFF's units of a fixed length, in seconds, by
// the names and abbreviations Airtable gives them.
var fixedUnits = map[string]string{
	"milliseconds": "0.001", "ms": "0.001",
	"seconds": "1", "s": "1",
	"minutes": "60", "m": "60",
	"hours": "3600", "h": "3600",
	"days": "86400", "d": "86400",
	"weeks": "604800", "w": "604800",
}

// calendarUnits are DATETIME_DIFF's units of months.
var calendarUnits = map[string]string{
	"months": "1", "M": "1",
	"quarters": "3", "Q": "3",
	"years": "12", "y": "12",
}

// unit looks up a DATETIME_DIFF unit: an abbreviation exactly (M is months,
// m minutes), a name in any case, singular or plural.
func unit(s string) (fixed, calendar string) {
	names := []string{s, strings.ToLower(s)}
	if len(s) > 2 {
		names = append(names, strings.ToLower(s)+"s")
	}
	for _, u := range names {
		if f, ok := fixedUnits[u]; ok {
			return f, ""
		}
		if m, ok := calendarUnits[u]; ok {
			return "", m
		}
	}
	return "", ""
}

// datetimeDiff is DATETIME_DIFF(date1, date2[, unit]): date1 - date2 in
// whole units (seconds by default), truncated toward zero, so negative when
// date2 is later; an error when either is blank. Months, quarters and
// years count calendar months in UTC.
func (c *compiler) datetimeDiff(n *call, args []value) (value, error) {
	a, err := c.timeOf(args[0], n.name)
	if err != nil {
		return value{}, err
	}
	b, err := c.timeOf(args[1], n.name)
	if err != nil {
		return value{}, err
	}
	fixed, calendar := "1", ""
	if len(args) == 3 {
		u := args[2]
		if u.str == nil {
			return value{}, errorf(TypeMismatch, u.pos, n.name, "%s needs its unit as a string such as 'days'", n.name)
		}
		if fixed, calendar = unit(strings.TrimSpace(*u.str)); fixed == "" && calendar == "" {
			return value{}, errorf(TypeMismatch, u.pos, n.name, "%s does not know the unit %s", n.name, quote(*u.str))
		}
	}
	// A blank date makes an error, as in Airtable.
	out := value{typ: Number, fail: true, mag: 20, whole: true, pos: n.pos}
	if fixed != "" {
		diff := "(EXTRACT(EPOCH FROM " + a + ") - EXTRACT(EPOCH FROM " + b + "))"
		switch fixed {
		case "1":
		case "0.001":
			diff = "(" + diff + " * 1000)"
		default:
			diff = "(" + diff + " / " + fixed + ")"
		}
		out.sql = "trunc(" + diff + ")"
		return out, nil
	}
	months := func(xs ...string) string {
		age := "age((" + xs[0] + ") AT TIME ZONE 'UTC', (" + xs[1] + ") AT TIME ZONE 'UTC')"
		m := "(EXTRACT(YEAR FROM " + age + ") * 12 + EXTRACT(MONTH FROM " + age + "))"
		if calendar != "1" {
			m = "(" + m + " / " + calendar + ")"
		}
		return "trunc(" + m + ")"
	}
	out.sql = let(months, a, b)
	return out, nil
}
