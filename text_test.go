package appdor_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor"
)

func TestTextProblem(t *testing.T) {
	t.Parallel()
	cell := appdor.Text{Max: 6, Tabs: true, Lines: true}
	for _, c := range []struct {
		rule appdor.Text
		s    string
		want string // a part of the problem; "" for none
	}{
		{appdor.Name, "Zoë", ""},
		{appdor.Name, "", "1 to 200 characters"},
		{appdor.Name, strings.Repeat("ë", 200), ""}, // 400 bytes, 200 characters
		{appdor.Name, strings.Repeat("ë", 201), "1 to 200 characters"},
		{appdor.Name, "a\x00b", "NUL"},
		{appdor.Name, "a\tb", "tab"},
		{appdor.Name, "a\nb", "one line"},
		{appdor.Name, "a\rb", "one line"},
		{appdor.Name, "a\x1bb", "U+001B"},
		{appdor.Name, "a\x7fb", ""}, // DEL is not a C0 control
		{appdor.Name, "a\xffb", "UTF-8"},
		{appdor.Name, "\xed\xa0\x80", "UTF-8"}, // a surrogate half
		{cell, "a\tb\r\nc", ""},
		{cell, "a\x00", "NUL"},
		{cell, "a\vb", "U+000B"},
		{cell, "abcdefg", "at most 6 characters"},
		{appdor.Text{Min: 2}, "a", "at least 2 characters"},
	} {
		got := c.rule.Problem(c.s)
		if c.want == "" {
			require.Empty(t, got, "%q", c.s)
		} else {
			require.Contains(t, got, c.want, "%q", c.s)
		}
	}
}

func TestTextCheckNamesTheField(t *testing.T) {
	t.Parallel()
	name, err := appdor.CheckName("name", "  Ops  ")
	require.NoError(t, err)
	require.Equal(t, "Ops", name)

	_, err = appdor.CheckName("fields[1].name", "a\x00b")
	var ae *appdor.Error
	require.True(t, errors.As(err, &ae))
	require.Equal(t, appdor.EValidation, ae.Code)
	require.Equal(t, []appdor.Detail{{Field: "fields[1].name", Message: "must not hold a NUL character (U+0000)"}}, ae.Details)
}

func TestDecodeJSON(t *testing.T) {
	t.Parallel()
	var v struct {
		Name string `json:"name"`
	}
	require.NoError(t, appdor.DecodeJSON(strings.NewReader(`{"name":"a"}`), &v))
	for body, code := range map[string]string{
		``:                        appdor.EInvalid,
		`{"name":`:                appdor.EInvalid,
		`{"name":"a"} {}`:         appdor.EInvalid,
		`{"name":"a","other":1}`:  appdor.EInvalid,
		`{"name":1}`:              appdor.EInvalid,
		`{"name":"secret!x}`:      appdor.EInvalid,
		`{"name":"a"}` + "\n\t  ": "",
	} {
		err := appdor.DecodeJSON(strings.NewReader(body), &v)
		if code == "" {
			require.NoError(t, err, body)
			continue
		}
		require.Equal(t, code, appdor.ErrorCode(err), "%q: %v", body, err)
	}
	err := appdor.DecodeJSON(strings.NewReader(`{"name":"pa$$word"x`), &v)
	require.NotContains(t, err.Error(), "'x'", "a syntax error does not quote the body")
}

// FuzzTextProblem: what a Text accepts is valid UTF-8, of its length in
// characters, with no control character it does not allow.
func FuzzTextProblem(f *testing.F) {
	for _, s := range []string{"", "a", "Zoë", "a\x00", "a\tb\nc\r\n", "\xff", "\xed\xa0\x80", "\x1b[31m"} {
		f.Add(s, true, true)
	}
	f.Fuzz(func(t *testing.T, s string, tabs, lines bool) {
		rule := appdor.Text{Min: 1, Max: 20, Tabs: tabs, Lines: lines}
		if rule.Problem(s) != "" {
			return
		}
		require.True(t, utf8.ValidString(s))
		n := utf8.RuneCountInString(s)
		require.True(t, n >= 1 && n <= 20, "%d characters", n)
		for _, r := range s {
			switch {
			case r == '\t':
				require.True(t, tabs)
			case r == '\n' || r == '\r':
				require.True(t, lines)
			default:
				require.GreaterOrEqual(t, r, rune(0x20))
			}
		}
	})
}
