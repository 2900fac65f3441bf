package formula

import (
	"fmt"
	"strconv"
)

// ErrorKind says what is wrong with a formula.
type ErrorKind int

// The kinds of Error.
const (
	// Syntax is a formula that does not parse: a stray character, an
	// unclosed string or parenthesis, a malformed number.
	Syntax ErrorKind = iota + 1
	// UnknownFunction is a call of a function the language does not have;
	// Error.Name is the function's name as written.
	UnknownFunction
	// UnknownField is a reference to a field the Env does not know;
	// Error.Name is the field's name.
	UnknownField
	// TypeMismatch is a function given the wrong number or types of
	// arguments, or an operator given operands it cannot combine.
	// Error.Name is the function, when there is one.
	TypeMismatch
	// TooComplex is a formula over one of the limits MaxLength, MaxDepth
	// and MaxNodes.
	TooComplex
)

// String names the kind.
func (k ErrorKind) String() string {
	switch k {
	case Syntax:
		return "syntax"
	case UnknownFunction:
		return "unknown function"
	case UnknownField:
		return "unknown field"
	case TypeMismatch:
		return "type mismatch"
	case TooComplex:
		return "too complex"
	}
	return "ErrorKind(" + strconv.Itoa(int(k)) + ")"
}

// Error is what is wrong with a formula: its kind, the byte offset in the
// source where it is, the function or field it concerns (if any), and a
// short message that does not repeat the position.
type Error struct {
	Kind    ErrorKind
	Pos     int
	Name    string
	Message string
}

// Error is the message followed by the position, as in
// "unknown function FOO at 7".
func (e *Error) Error() string { return e.Message + " at " + strconv.Itoa(e.Pos) }

// errorf makes an *Error.
func errorf(kind ErrorKind, pos int, name, format string, args ...any) *Error {
	return &Error{Kind: kind, Pos: pos, Name: name, Message: fmt.Sprintf(format, args...)}
}
