// Package formula is Airtable's formula language for Appdor: a parser, and
// a compiler of a parsed formula to one typed SQL expression over a row's
// cells. The Airtable-compatible API uses it for filterByFormula
// (Condition), and a formula field can use Compile for its value.
//
// Rows are never evaluated in Go. Every literal of a formula becomes a
// parameter through Env.Arg, so no user value is ever part of the SQL text,
// and the SQL is built never to fail at run time, whatever the cells hold:
// no text is cast to a number or a date in SQL (a text literal that must be
// a number or a date is read when compiling, and a bad one is an error), a
// division by zero is NULL, and numbers are numeric with the operands of *
// and / kept within bounds, so that nothing overflows. It needs PostgreSQL
// 14 or later.
//
// # Language
//
// Field references are {Field name} (the name is everything up to the
// first '}') or, for a one-word name, the bare name (Status = 'Done'); a
// bare name followed by '(' is a function call. TRUE and FALSE are
// booleans. Numbers are written 12, 1.5, .5 or 1e3; strings in double or
// single quotes, with the escapes \n, \t, and a backslash before any other
// character for that character (\" \' \\).
//
// Operators, from lowest precedence to highest: the comparisons = != <> <
// <= > >=; & (joins text); + and -; * and /; unary minus. All are
// left-associative, and parentheses group.
//
// Functions, in any case: AND(a, …), OR(a, …), NOT(x), IF(cond, then[,
// else]), BLANK(), TRUE(), FALSE(), FIND(needle, haystack[, start]),
// SEARCH(needle, haystack[, start]), LEN(s), LOWER(s), UPPER(s), TRIM(s),
// IS_BEFORE(a, b), IS_AFTER(a, b), DATETIME_DIFF(date1, date2[, unit]),
// TODAY() and NOW().
//
// # Values
//
// A value is Text, a Number, a Bool (a checkbox), a Time (a date, or a date
// and time), blank, or an error. Blanks follow Airtable: in comparisons and
// arithmetic an empty number reads as 0 and empty text as "", so {Count} = 0
// and {Name} = "" and {Name} = BLANK() hold for empty cells; an empty
// checkbox is false; an empty date is equal to BLANK() (and to "") and is
// neither before nor after any date. BLANK() takes the type of what it
// meets. An error is Airtable's #ERROR: a division by zero, or a
// DATETIME_DIFF of an empty date. It is SQL NULL too, but it stays NULL
// through arithmetic, text, comparisons, NOT and IF (an IF whose condition
// is an error is one), so that no comparison with it holds and it is not
// truthy: {Count} / 0 = BLANK() keeps no record. AND and OR follow SQL's
// logic there: OR(error, TRUE) is true.
//
// Types meet as follows. & joins any two values as text: a number as its
// digits (1.5), a checkbox as 1 or 0, a date in ISO 8601 form in UTC
// (2024-06-01T00:00:00.000Z). Arithmetic takes numbers, checkboxes (1 or 0)
// and text literals that read as numbers. A comparison compares two
// numbers, texts, checkboxes or dates; a number with a checkbox as numbers;
// a number with a text literal that reads as a number as numbers; a date
// with a text literal that reads as a date as dates, where a date is
// written as in RFC 3339 (2024-06-01T09:30:00Z), without a zone (then UTC),
// as YYYY-MM-DD HH:MM, or as YYYY-MM-DD (midnight UTC). Any other pair is a
// TypeMismatch error. A formula is truthy (Condition) when it is true, a
// number other than 0, text other than "", or a date; blank is not.
//
// FIND and SEARCH are case-sensitive, as in Airtable, and give the 1-based
// position of the first needle in haystack after its first start
// characters (start is 0 by default); when there is none FIND gives 0 and
// SEARCH blank. DATETIME_DIFF(date1, date2, unit) is date1 - date2 in
// whole units, truncated toward zero (so negative when date2 is later), and
// seconds without a unit; an error when either date is blank. Units are
// Airtable's: milliseconds (ms), seconds (s), minutes (m), hours (h), days
// (d), weeks (w), months (M), quarters (Q) and years (y), the names in any
// case and singular or plural, the abbreviations exactly (M is months, m
// minutes). TODAY() is the current date at midnight UTC and NOW() the
// current instant (the statement's).
//
// # Differences from Airtable
//
// Appdor computes in SQL, and where Airtable's behavior is loose it is
// stricter: a text literal that should be a date must be an ISO date (there
// is no DATETIME_PARSE), and one that should be a number must be decimal
// digits; text is never compared with a number unless it is a literal; an
// unknown DATETIME_DIFF unit is an error (Airtable falls back to seconds or
// milliseconds), and the unit must be a literal; months, quarters and years
// count by PostgreSQL's age() in UTC, which can differ by one from
// Airtable's at the ends of months. Numbers are exact decimals (0.1 + 0.2 =
// 0.3), with quotients to about 16 significant digits; an operand of * or /
// beyond ±1e308 counts as ±1e308 and a divisor nearer 0 than 1e-308 as 0.
// Errors do not carry a message, and a formula with one is not refused: it
// keeps the records for which it is truthy. TRIM removes ASCII whitespace
// only, and text compares in the database's collation.
package formula
