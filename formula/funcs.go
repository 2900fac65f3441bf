package formula

import (
	"strconv"
	"strings"
)

// arity is how many arguments a function takes: at least min, at most max
// (-1: any number).
var arity = map[string][2]int{
	"AND": {1, -1}, "OR": {1, -1}, "NOT": {1, 1}, "IF": {2, 3},
	"BLANK": {0, 0}, "TRUE": {0, 0}, "FALSE": {0, 0},
	"FIND": {2, 3}, "SEARCH": {2, 3}, "LEN": {1, 1}, "LOWER": {1, 1}, "UPPER": {1, 1}, "TRIM": {1, 1},
	"IS_BEFORE": {2, 2}, "IS_AFTER": {2, 2}, "DATETIME_DIFF": {2, 3}, "TODAY": {0, 0}, "NOW": {0, 0},
}

// Functions lists the functions the language has, for documentation.
func Functions() []string {
	out := make([]string, 0, len(arity))
	for name := range arity {
		out = append(out, name)
	}
	return out
}

// seconds is DATETIME_DIFF's units that are a fixed number of seconds.
var seconds = map[string]string{
	"milliseconds": "0.001", "ms": "0.001",
	"seconds": "1", "s": "1",
	"minutes": "60", "m": "60",
	"hours": "3600", "h": "3600",
	"days": "86400", "d": "86400",
	"weeks": "604800", "w": "604800",
}

// months is DATETIME_DIFF's calendar units, in months.
var months = map[string]string{"months": "1", "M": "1", "quarters": "3", "Q": "3", "years": "12", "y": "12"}

func (c compiler) call(n call) (value, error) {
	ar, ok := arity[n.name]
	if !ok {
		return value{}, errAt(UnknownFunction, n.at, n.name, "unknown function %s", n.name)
	}
	if len(n.args) < ar[0] || ar[1] >= 0 && len(n.args) > ar[1] {
		want := "at least " + itoa(ar[0])
		if ar[0] == ar[1] {
			want = itoa(ar[0])
		} else if ar[1] >= 0 {
			want = itoa(ar[0]) + " to " + itoa(ar[1])
		}
		return value{}, errAt(TypeMismatch, n.at, n.name, "%s takes %s arguments, not %d", n.name, want, len(n.args))
	}
	args := make([]value, len(n.args))
	for i, a := range n.args {
		v, err := c.node(a)
		if err != nil {
			return value{}, err
		}
		args[i] = v
	}
	at := n.at
	switch n.name {
	case "AND", "OR":
		parts := make([]string, len(args))
		for i, a := range args {
			parts[i] = c.truth(a)
		}
		return value{sql: "(" + strings.Join(parts, " "+n.name+" ") + ")", typ: Bool, at: at}, nil
	case "NOT":
		return value{sql: "(NOT " + c.truth(args[0]) + ")", typ: Bool, at: at}, nil
	case "IF":
		return c.ifThen(args, at)
	case "BLANK":
		return value{sql: "NULL", typ: Blank, at: at}, nil
	case "TRUE":
		return value{sql: "TRUE", typ: Bool, at: at}, nil
	case "FALSE":
		return value{sql: "FALSE", typ: Bool, at: at}, nil
	case "FIND", "SEARCH":
		needle, hay := c.text(args[0]), c.text(args[1])
		start := "1"
		if len(args) == 3 {
			s, err := c.number(args[2], n.name)
			if err != nil {
				return value{}, err
			}
			// 0 and 1 both start at the first character; bounded, so the
			// cast to int never overflows.
			start = "LEAST(GREATEST(trunc(" + s + "), 1::float8), 1000000000::float8)::int"
		}
		pos := "strpos(substr(" + hay + ", " + start + "), " + needle + ")"
		found := "(" + pos + " + " + start + " - 1)::float8"
		miss := "0::float8"
		if n.name == "SEARCH" {
			miss = "NULL::float8"
		}
		return value{sql: "(CASE WHEN " + needle + " = '' OR " + pos + " = 0 THEN " + miss + " ELSE " + found + " END)", typ: Number, at: at}, nil
	case "LEN":
		return value{sql: "char_length(" + c.text(args[0]) + ")::float8", typ: Number, at: at}, nil
	case "LOWER":
		return value{sql: "lower(" + c.text(args[0]) + ")", typ: Text, at: at}, nil
	case "UPPER":
		return value{sql: "upper(" + c.text(args[0]) + ")", typ: Text, at: at}, nil
	case "TRIM":
		return value{sql: "btrim(" + c.text(args[0]) + ", E' \\t\\n\\r')", typ: Text, at: at}, nil
	case "IS_BEFORE", "IS_AFTER":
		a, err := c.instant(args[0], n.name)
		if err != nil {
			return value{}, err
		}
		b, err := c.instant(args[1], n.name)
		if err != nil {
			return value{}, err
		}
		op := " < "
		if n.name == "IS_AFTER" {
			op = " > "
		}
		return value{sql: "COALESCE(" + a + op + b + ", FALSE)", typ: Bool, at: at}, nil
	case "DATETIME_DIFF":
		return c.datetimeDiff(args, at)
	case "TODAY":
		return value{sql: "(date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')", typ: Time, at: at}, nil
	case "NOW":
		return value{sql: "now()", typ: Time, at: at}, nil
	}
	return value{}, errAt(UnknownFunction, at, n.name, "unknown function %s", n.name)
}

// ifThen is IF(cond, then[, else]): the branches' common type, a blank one
// taking the other's, numbers and text mixed as text.
func (c compiler) ifThen(args []value, at int) (value, error) {
	then := args[0+1]
	other := value{sql: "NULL", typ: Blank, at: at}
	if len(args) == 3 {
		other = args[2]
	}
	t := then.typ
	switch {
	case t == Blank:
		t = other.typ
	case other.typ == Blank || other.typ == t:
	default:
		t = Text
	}
	branch := func(v value) (string, error) {
		switch {
		case v.typ == Blank:
			return "NULL", nil
		case t == Text && v.typ != Text:
			return c.text(v), nil
		}
		return c.sql(v), nil
	}
	a, err := branch(then)
	if err != nil {
		return value{}, err
	}
	b, err := branch(other)
	if err != nil {
		return value{}, err
	}
	cast := map[Type]string{Blank: "", Text: "::text", Number: "::float8", Bool: "::boolean", Time: "::timestamptz"}[t]
	if a == "NULL" {
		a += cast
	}
	if b == "NULL" {
		b += cast
	}
	return value{sql: "(CASE WHEN " + c.truth(args[0]) + " THEN " + a + " ELSE " + b + " END)", typ: t, at: at}, nil
}

// datetimeDiff is DATETIME_DIFF(a, b[, unit]): a - b in whole units
// (seconds by default), truncated toward zero; blank when either is.
func (c compiler) datetimeDiff(args []value, at int) (value, error) {
	a, err := c.instant(args[0], "DATETIME_DIFF")
	if err != nil {
		return value{}, err
	}
	b, err := c.instant(args[1], "DATETIME_DIFF")
	if err != nil {
		return value{}, err
	}
	unit := "seconds"
	if len(args) == 3 {
		if args[2].lit == nil {
			return value{}, errAt(TypeMismatch, args[2].at, "DATETIME_DIFF", "DATETIME_DIFF's unit is a string such as 'days'")
		}
		unit = strings.TrimSpace(*args[2].lit)
	}
	// Exact names first: "M" is months, "m" minutes.
	for _, u := range []string{unit, strings.ToLower(unit)} {
		if k, ok := seconds[u]; ok {
			return value{sql: "trunc(EXTRACT(EPOCH FROM (" + a + " - " + b + ")) / " + k + ")::float8", typ: Number, at: at, failed: true}, nil
		}
		if k, ok := months[u]; ok {
			age := "age(" + a + ", " + b + ")"
			return value{sql: "trunc((EXTRACT(YEAR FROM " + age + ") * 12 + EXTRACT(MONTH FROM " + age + ")) / " + k + ")::float8", typ: Number, at: at, failed: true}, nil
		}
	}
	return value{}, errAt(TypeMismatch, args[2].at, "DATETIME_DIFF", "DATETIME_DIFF does not know the unit %q", unit)
}

func itoa(i int) string { return strconv.Itoa(i) }
