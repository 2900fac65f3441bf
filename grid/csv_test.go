package grid_test

import (
	"encoding/csv"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/server"
	"github.com/appdor/appdor/test/testenv"
)

func allTypes(gate map[string]any) []map[string]any {
	return []map[string]any{
		field("Name", "text"), field("Notes", "long_text"), field("Score", "number", map[string]any{"precision": 2}),
		field("VIP", "checkbox"), field("Born", "date"), field("Seen", "datetime"),
		field("Tier", "single_select", map[string]any{"choices": []string{"gold", "silver"}}),
		field("Tags", "multi_select", map[string]any{"choices": []string{"x", "y, z", "w"}}),
		field("Mail", "email"), field("Site", "url"), field("Friends", "link", gate),
	}
}

func (f *fixture) csvIn(tableID, body string) (int, map[string]any) {
	f.t.Helper()
	res := doWithHeader(f.t, "POST", f.app.URL+"/api/v1/tables/"+tableID+"/csv", f.token, body,
		map[string]string{"Content-Type": "text/csv"})
	return res.Status, res.Map(f.t)
}

func (f *fixture) csvOut(tableID string) [][]string {
	f.t.Helper()
	res := f.do("GET", "/api/v1/tables/"+tableID+"/csv", nil)
	require.Equal(f.t, http.StatusOK, res.Status, string(res.Body))
	require.True(f.t, strings.HasPrefix(res.Header.Get("Content-Type"), "text/csv"))
	recs, err := csv.NewReader(strings.NewReader(string(res.Body))).ReadAll()
	require.NoError(f.t, err)
	return recs
}

func TestCSVRoundTrip(t *testing.T) {
	t.Parallel()
	f := setup(t)
	people := f.table("People", field("Name", "text"))
	pids := f.insert(people, []map[string]any{{"Name": "Ann"}, {"Name": "Bob"}})
	src := f.table("Source", allTypes(map[string]any{"table": people.ID})...)
	rows := []map[string]any{
		{"Name": "Ann, \"the\" first", "Notes": "line one\nline two", "Score": 3.14159, "VIP": true, "Born": "1990-05-06",
			"Seen": "2026-03-04T05:06:07.123Z", "Tier": "gold", "Tags": []string{"x", "y, z"}, "Mail": "ann@example.com",
			"Site": "https://example.com/a?b=c", "Friends": []string{pids[0], pids[1]}},
		{"Name": "", "VIP": false, "Tags": []string{"w"}, "Score": -1e21},
		{},
	}
	for i := range 1200 { // more than one export page
		rows = append(rows, map[string]any{"Name": fmt.Sprintf("bulk %d", i), "Score": float64(i)})
	}
	f.insert(src, rows)

	out := f.csvOut(src.ID)
	require.Len(t, out, len(rows)+1)
	require.Equal(t, []string{"Name", "Notes", "Score", "VIP", "Born", "Seen", "Tier", "Tags", "Mail", "Site", "Friends"}, out[0])

	// Back in, into a table with the same fields: the same cells.
	dst := f.table("Copy", allTypes(map[string]any{"table": people.ID})...)
	var b strings.Builder
	w := csv.NewWriter(&b)
	require.NoError(t, w.WriteAll(out))
	status, res := f.csvIn(dst.ID, b.String())
	require.Equal(t, http.StatusCreated, status, "%v", res)
	require.EqualValues(t, len(rows), res["inserted"])
	require.EqualValues(t, 0, res["failed"])
	require.Equal(t, out, f.csvOut(dst.ID))

	a := f.read("/api/v1/tables/" + src.ID + "/rows?limit=3")
	c := f.read("/api/v1/tables/" + dst.ID + "/rows?limit=3")
	for i := range a.Rows {
		want := map[string]any{}
		for k, v := range a.Rows[i].Cells {
			want[k] = v
		}
		got := map[string]any{}
		for name, id := range src.Fields {
			if v, ok := c.Rows[i].Cells[dst.Fields[name]]; ok {
				got[id] = v
			}
		}
		if v, ok := want[src.Fields["Name"]]; ok && v == "" {
			delete(want, src.Fields["Name"]) // an empty text reads back as an empty cell
		}
		require.Equal(t, want, got, "row %d", i)
	}
}

func TestCSVImportErrors(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tb := f.table("T", field("Name", "text"), field("N", "number"), field("Tier", "single_select", map[string]any{"choices": []string{"a"}}))

	status, res := f.csvIn(tb.ID, "name,N,Tier\nok,1,a\nbad,one,a\nshort,2\nworse,3,b\n\"fine\",4,\n")
	require.Equal(t, http.StatusCreated, status, "%v", res)
	require.EqualValues(t, 2, res["inserted"])
	require.EqualValues(t, 3, res["failed"])
	errs := res["errors"].([]any)
	require.Len(t, errs, 3)
	require.EqualValues(t, 3, errs[0].(map[string]any)["line"])
	require.Equal(t, "N", errs[0].(map[string]any)["field"])
	require.EqualValues(t, 4, errs[1].(map[string]any)["line"])
	require.EqualValues(t, 5, errs[2].(map[string]any)["line"])
	require.Equal(t, "Tier", errs[2].(map[string]any)["field"])

	// The error list is capped; the counts are not.
	var b strings.Builder
	b.WriteString("N\n")
	for range 250 {
		b.WriteString("x\n")
	}
	status, res = f.csvIn(tb.ID, b.String())
	require.Equal(t, http.StatusCreated, status)
	require.EqualValues(t, 250, res["failed"])
	require.Len(t, res["errors"], 100)
	require.Equal(t, true, res["errors_truncated"])

	// A header naming no field, an empty body, or another media type: nothing imported.
	status, res = f.csvIn(tb.ID, "Name,Nope\nx,y\n")
	require.Equal(t, http.StatusUnprocessableEntity, status, "%v", res)
	status, _ = f.csvIn(tb.ID, "")
	require.Equal(t, http.StatusUnprocessableEntity, status)
	r := f.do("POST", "/api/v1/tables/"+tb.ID+"/csv", "Name\nx\n")
	require.Equal(t, http.StatusBadRequest, r.Status)
	m := f.ok(http.StatusOK, "GET", "/api/v1/tables/"+tb.ID+"/count", nil)
	require.EqualValues(t, 2, m["count"])
}

// TestCSVImportLarge streams more than the server's general body limit
// through the import, which bounds its own body.
func TestCSVImportLarge(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tb := f.table("Big", field("Name", "text"), field("N", "number"), field("Notes", "long_text"))
	pad := strings.Repeat("p", 1000)
	var b strings.Builder
	b.WriteString("Name,N,Notes\n")
	n := 12_000 // about 12 MB, over the 10M limit of every other route
	for i := range n {
		fmt.Fprintf(&b, "row %d,%d,%s\n", i, i, pad)
	}
	status, res := f.csvIn(tb.ID, b.String())
	require.Equal(t, http.StatusCreated, status, "%v", res)
	require.EqualValues(t, n, res["inserted"])
	m := f.ok(http.StatusOK, "GET", "/api/v1/tables/"+tb.ID+"/count", nil)
	require.EqualValues(t, n, m["count"])
}

// TestCSVImportBodyLimit: the import's own body limit refuses a larger body
// with 413, and says how far it got.
func TestCSVImportBodyLimit(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.app = testenv.NewApp(t, func(c *server.Config) { c.CSVBodyLimit = 64 << 10 })
	tb := f.table("Small", field("Name", "text"))
	var b strings.Builder
	b.WriteString("Name\n")
	for i := range 20_000 {
		fmt.Fprintf(&b, "row %d\n", i)
	}
	status, res := f.csvIn(tb.ID, b.String())
	require.Equal(t, http.StatusRequestEntityTooLarge, status, "%v", res)
	require.Equal(t, "too_large", res["error"].(map[string]any)["code"])
	details := res["error"].(map[string]any)["details"].(map[string]any)
	m := f.ok(http.StatusOK, "GET", "/api/v1/tables/"+tb.ID+"/count", nil)
	require.Equal(t, details["inserted"], m["count"], "the answer says what was written")
}

// csvErrorAnswer is an import's error answer.
type csvErrorAnswer struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Details struct {
			Inserted      int `json:"inserted"`
			Failed        int `json:"failed"`
			StoppedAtLine int `json:"stopped_at_line"`
			Errors        []struct {
				Line    int    `json:"line"`
				Message string `json:"message"`
			} `json:"errors"`
		} `json:"details"`
	} `json:"error"`
}

// TestCSVImportMalformedLine: a bare quote in the first column (which
// encoding/csv reports before it has any field, so asking it for the first
// field's position panicked: a 500) stops the import with 422, the line, and
// how many rows landed, which is what the table holds.
func TestCSVImportMalformedLine(t *testing.T) {
	t.Parallel()
	f := setup(t)

	t.Run("the bare quote of the report", func(t *testing.T) {
		tb := f.table("Small", field("Name", "text"), field("N", "number"))
		res := doWithHeader(t, "POST", f.app.URL+"/api/v1/tables/"+tb.ID+"/csv", f.token, "Name,N\nok1,1\na\"b,3\n",
			map[string]string{"Content-Type": "text/csv"})
		require.Equal(t, http.StatusUnprocessableEntity, res.Status, string(res.Body))
		var e csvErrorAnswer
		res.JSON(t, &e)
		require.Equal(t, "validation_failed", e.Error.Code)
		require.Contains(t, e.Error.Message, "line 3")
		require.Equal(t, 3, e.Error.Details.StoppedAtLine)
		require.Equal(t, 1, e.Error.Details.Inserted)
		require.Len(t, e.Error.Details.Errors, 1)
		require.Equal(t, 3, e.Error.Details.Errors[0].Line)
		m := f.ok(http.StatusOK, "GET", "/api/v1/tables/"+tb.ID+"/count", nil)
		require.EqualValues(t, 1, m["count"])
	})

	t.Run("after the first batch committed", func(t *testing.T) {
		tb := f.table("Big", field("Name", "text"), field("N", "number"))
		var b strings.Builder
		b.WriteString("Name,N\n")
		for i := range 1500 { // lines 2 to 1501; the first 1,000 rows commit as a batch
			fmt.Fprintf(&b, "row %d,%d\n", i, i)
		}
		b.WriteString("bad,x\n")          // line 1502: a bad cell, reported and skipped
		b.WriteString("bro\"ken,1\n")     // line 1503: malformed, the import stops
		b.WriteString("never,1\nnor,2\n") // not read
		res := doWithHeader(t, "POST", f.app.URL+"/api/v1/tables/"+tb.ID+"/csv", f.token, b.String(),
			map[string]string{"Content-Type": "text/csv"})
		require.Equal(t, http.StatusUnprocessableEntity, res.Status, string(res.Body))
		var e csvErrorAnswer
		res.JSON(t, &e)
		require.Equal(t, "validation_failed", e.Error.Code)
		require.Equal(t, 1503, e.Error.Details.StoppedAtLine)
		require.Equal(t, 1500, e.Error.Details.Inserted, "the rows before the malformed line landed, and the answer says so")
		require.Equal(t, 2, e.Error.Details.Failed)
		require.Equal(t, 1502, e.Error.Details.Errors[0].Line)
		require.Equal(t, 1503, e.Error.Details.Errors[1].Line)
		require.Contains(t, e.Error.Message, "inserting 1500 rows")
		m := f.ok(http.StatusOK, "GET", "/api/v1/tables/"+tb.ID+"/count", nil)
		require.EqualValues(t, e.Error.Details.Inserted, m["count"], "nothing acknowledged is lost, nothing unacknowledged landed")
	})

	t.Run("a malformed header", func(t *testing.T) {
		tb := f.table("Header", field("Name", "text"))
		status, res := f.csvIn(tb.ID, "Na\"me\nx\n")
		require.Equal(t, http.StatusUnprocessableEntity, status, "%v", res)
		require.Equal(t, "validation_failed", res["error"].(map[string]any)["code"])
	})
}

// formulaCells are values a spreadsheet would run as formulas, and one that
// only looks like a neutralized one.
var formulaCells = []string{"=1+2", "+SUM(A1)", "-2+3", "@cmd", "\tx", "'=already", "plain", "it's"}

// TestCSVExportNeutralizesFormulas: by default a text cell that starts with
// = + - @ tab or CR is exported with an apostrophe before it, and quoted;
// numbers (negative ones too) stay numbers; the import reads the export back
// to the same cells. formulas=raw writes the cells as they are.
func TestCSVExportNeutralizesFormulas(t *testing.T) {
	t.Parallel()
	f := setup(t)
	src := f.table("Src", field("=Name", "text"), field("N", "number"), field("Notes", "long_text"),
		field("Tier", "single_select", map[string]any{"choices": []string{"-low", "high"}}), field("Mail", "email"))
	var rows []map[string]any
	for _, s := range formulaCells {
		rows = append(rows, map[string]any{"=Name": s, "N": -1.5, "Notes": "\r" + s, "Tier": "-low", "Mail": "-a@b.example"})
	}
	f.insert(src, rows)
	raw := func(query string) string {
		res := f.do("GET", "/api/v1/tables/"+src.ID+"/csv"+query, nil)
		require.Equal(t, http.StatusOK, res.Status, string(res.Body))
		return string(res.Body)
	}

	escaped := raw("")
	lines := strings.Split(strings.TrimSuffix(escaped, "\n"), "\n")
	require.Equal(t, `"'=Name","N","Notes","Tier","Mail"`, lines[0], "names are text")
	require.Contains(t, lines, `"'=1+2",-1.5,"'`+"\r"+`=1+2","'-low","'-a@b.example"`)
	require.Contains(t, escaped, `"''=already"`)
	require.Contains(t, escaped, `"plain"`)
	require.NotContains(t, escaped, `"-1.5"`, "numbers are not quoted")
	recs, err := csv.NewReader(strings.NewReader(escaped)).ReadAll()
	require.NoError(t, err)
	for _, rec := range recs[1:] {
		for i, cell := range rec {
			if i == 1 {
				require.Equal(t, "-1.5", cell, "a negative number stays a number")
				continue
			}
			require.False(t, strings.ContainsAny(cell[:1], "=+-@\t\r"), "cell %q starts a formula", cell)
		}
	}

	// The escaped export imports back to the same cells.
	dst := f.table("Dst", field("=Name", "text"), field("N", "number"), field("Notes", "long_text"),
		field("Tier", "single_select", map[string]any{"choices": []string{"-low", "high"}}), field("Mail", "email"))
	status, res := f.csvIn(dst.ID, escaped)
	require.Equal(t, http.StatusCreated, status, "%v", res)
	require.EqualValues(t, len(formulaCells), res["inserted"])
	require.Equal(t, escaped, string(f.do("GET", "/api/v1/tables/"+dst.ID+"/csv", nil).Body))
	got := map[string]bool{}
	for _, r := range f.read("/api/v1/tables/" + dst.ID + "/rows").Rows {
		got[r.Cells[dst.Fields["=Name"]].(string)] = true
		require.Equal(t, -1.5, r.Cells[dst.Fields["N"]])
		require.Equal(t, "-low", r.Cells[dst.Fields["Tier"]])
	}
	for _, s := range formulaCells {
		require.True(t, got[s], "%q came back", s)
	}

	// formulas=raw: as stored, quoted only where CSV needs it.
	plain := raw("?formulas=raw")
	lines = strings.Split(strings.TrimSuffix(plain, "\n"), "\n")
	require.Equal(t, `=Name,N,Notes,Tier,Mail`, lines[0])
	require.Contains(t, lines, `=1+2,-1.5,"`+"\r"+`=1+2",-low,-a@b.example`)
	require.Contains(t, plain, "\n'=already,")

	r := f.do("GET", "/api/v1/tables/"+src.ID+"/csv?formulas=maybe", nil)
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, "invalid_request", r.ErrorCode(t))
}

// TestCSVRoundTripOneEmptyField: a row of a one-field table with nothing in
// it is a line of its own in the export (""), not an empty line that the
// import skips, so the round trip keeps every row.
func TestCSVRoundTripOneEmptyField(t *testing.T) {
	t.Parallel()
	f := setup(t)
	src := f.table("One", field("Name", "text"))
	f.insert(src, []map[string]any{{"Name": "a"}, {}, {"Name": "b"}})
	for _, query := range []string{"", "?formulas=raw"} {
		res := f.do("GET", "/api/v1/tables/"+src.ID+"/csv"+query, nil)
		require.Equal(t, http.StatusOK, res.Status)
		require.NotContains(t, string(res.Body), "\n\n", query)
		dst := f.table("Copy"+query, field("Name", "text"))
		status, out := f.csvIn(dst.ID, string(res.Body))
		require.Equal(t, http.StatusCreated, status, "%v", out)
		require.EqualValues(t, 3, out["inserted"], query)
	}
}
