package appdor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"
)

// Text is what one piece of text a client sends may hold: every name, cell,
// email and filter value Appdor stores or sends to PostgreSQL is checked
// against a Text before it reaches SQL.
//
// PostgreSQL refuses NUL in text and in jsonb strings (SQLSTATE 22P05) and
// invalid UTF-8 (22021); other C0 control characters are stored but are
// invisible in the grid, break the line a name is shown on, and let two
// names look alike. So text is valid UTF-8 with no C0 control character,
// except a tab (Tabs) and line breaks (Lines: LF, and the CR of a CRLF that
// text pasted from Windows carries) where the field allows them.
//
// Length is counted in characters (Unicode code points), never in bytes:
// "a name has 1 to 200 characters" means the same for "Zoë" as for "Zoe".
type Text struct {
	Min, Max int  // length in characters; Max 0 is no upper bound
	Tabs     bool // may hold U+0009
	Lines    bool // may hold U+000A and U+000D
}

// Rules shared across packages.
var (
	// Name is a realm, app, table, field, token or choice name: one line,
	// no tab, 1 to 200 characters (after trimming spaces, see CheckName).
	Name = Text{Min: 1, Max: 200}
	// Email is an email address as a person types it to sign in or to be
	// added: one line, at most 320 characters (RFC 5321's bound).
	Email = Text{Max: 320}
)

// Problem says what is wrong with s under t, as a phrase that follows the
// text's name ("name must not hold ..."), or "" when nothing is.
func (t Text) Problem(s string) string {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < utf8.RuneSelf {
			i, n = i+1, n+1
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 {
			return "is not valid UTF-8"
		}
		switch {
		case r == 0:
			return "must not hold a NUL character (U+0000)"
		case r == '\t' && !t.Tabs:
			return "must not hold a tab"
		case (r == '\n' || r == '\r') && !t.Lines:
			return "must be one line"
		case r < 0x20 && r != '\t' && r != '\n' && r != '\r':
			return fmt.Sprintf("must not hold the control character U+%04X", r)
		}
		i, n = i+size, n+1
	}
	if n < t.Min || (t.Max > 0 && n > t.Max) {
		switch {
		case t.Max == 0:
			return fmt.Sprintf("must have at least %d characters", t.Min)
		case t.Min == 0:
			return fmt.Sprintf("must have at most %d characters", t.Max)
		}
		return fmt.Sprintf("must have %d to %d characters", t.Min, t.Max)
	}
	return ""
}

// Check returns a validation error naming field (in its message and its
// details) when s breaks t, and nil when it does not.
func (t Text) Check(field, s string) error {
	if p := t.Problem(s); p != "" {
		return Invalid(field+" "+p, Detail{Field: field, Message: p})
	}
	return nil
}

// CheckName trims the spaces around a name and checks it against Name; field
// is how the error names it ("name", "fields[2].name").
func CheckName(field, s string) (string, error) {
	s = strings.TrimSpace(s)
	return s, Name.Check(field, s)
}

// Detail points at one wrong part of a request: the row of a batch, the
// field (a JSON member, a field id, a parameter), and what is wrong there.
type Detail struct {
	Row     *int   `json:"row,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// Invalid is a validation error (422 validation_failed) with its details.
func Invalid(msg string, details ...Detail) *Error {
	return &Error{Code: EValidation, Message: msg, Details: details}
}

// DecodeJSON reads one JSON value from r into v, refusing unknown fields and
// data after the value. Every JSON request body is read through it; the
// values it decodes are still to be checked (Text and the domain's own
// rules).
func DecodeJSON(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &mbe):
			return Errorf(ETooLarge, "the request body is larger than %d bytes", mbe.Limit)
		case errors.Is(err, io.EOF):
			return Errorf(EInvalid, "the request body is empty; expected JSON")
		case errors.As(err, &se):
			// The decoder's own text may quote a character of the body,
			// which may be part of a password: say where, not what.
			return Errorf(EInvalid, "the request body is not valid JSON (at byte %d)", se.Offset)
		case errors.As(err, &te):
			msg := fmt.Sprintf("cannot be a JSON %s", te.Value)
			return &Error{Code: EInvalid, Message: "the request body is not valid: " + te.Field + " " + msg,
				Details: []Detail{{Field: te.Field, Message: msg}}}
		}
		return Errorf(EInvalid, "the request body is not valid JSON: %v", err)
	}
	if dec.More() {
		return Errorf(EInvalid, "the request body has data after its JSON value")
	}
	return nil
}
