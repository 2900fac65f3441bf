package grid_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/test/testenv"
)

// seedNumbers makes a table of n rows: Name "row i", N = i % 97 (so sort keys
// tie), Word a word from a small set, and every tenth row with no N at all.
func seedNumbers(t *testing.T, f *fixture, n int) (table, []string, map[string]float64) {
	tb := f.table(fmt.Sprintf("T%d", n), field("Name", "text"), field("N", "number"),
		field("Word", "text"), field("When", "datetime"))
	words := []string{"apple pie", "banana split", "cherry tart", "apple crumble"}
	rows := make([]map[string]any, n)
	for i := range rows {
		rows[i] = map[string]any{"Name": fmt.Sprintf("row %d", i), "Word": words[i%len(words)],
			"When": fmt.Sprintf("2026-01-%02dT10:00:%02d.%dZ", 1+i%28, i%60, i%7)}
		if i%10 != 3 {
			rows[i]["N"] = float64(i % 97)
		}
	}
	ids := f.insert(tb, rows)
	values := map[string]float64{}
	for i, id := range ids {
		if v, ok := rows[i]["N"]; ok {
			values[id] = v.(float64)
		}
	}
	return tb, ids, values
}

// walk reads every page of path (which has its query string started) and
// returns the row ids in order; between pages it calls between.
func walk(t *testing.T, f *fixture, path string, between func(page int)) []string {
	var ids []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000, "the walk does not end")
		p := f.read(path + "&cursor=" + url.QueryEscape(cursor))
		for _, r := range p.Rows {
			ids = append(ids, r.ID)
		}
		if p.NextCursor == nil {
			return ids
		}
		cursor = *p.NextCursor
		if between != nil {
			between(pages)
		}
	}
}

func requireEachOnce(t *testing.T, want, got []string) {
	t.Helper()
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
		require.Equal(t, 1, seen[id], "row %s returned twice", id)
	}
	for _, id := range want {
		require.Equal(t, 1, seen[id], "row %s never returned", id)
	}
}

func TestKeysetWalk(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tb, ids, values := seedNumbers(t, f, 2000)
	base := "/api/v1/tables/" + tb.ID + "/rows?limit=100"

	t.Run("by id, 100 at a time, each row once, in order", func(t *testing.T) {
		got := walk(t, f, base, nil)
		require.Equal(t, ids, got)
	})

	for _, s := range []string{"N", "-N", "Word,-N", "-When", "Name"} {
		t.Run("sorted by "+s+", each row once", func(t *testing.T) {
			got := walk(t, f, base+"&sort="+url.QueryEscape(s), nil)
			requireEachOnce(t, ids, got)
			require.Len(t, got, len(ids))
		})
	}

	t.Run("sort=-N puts the largest first, ties by id, empty cells last", func(t *testing.T) {
		got := walk(t, f, base+"&sort=-N", nil)
		want := append([]string(nil), ids...)
		pos := map[string]int{}
		for i, id := range ids {
			pos[id] = i
		}
		sort.SliceStable(want, func(i, j int) bool {
			vi, oki := values[want[i]]
			vj, okj := values[want[j]]
			if oki != okj {
				return oki
			}
			if vi != vj {
				return vi > vj
			}
			return pos[want[i]] < pos[want[j]]
		})
		require.Equal(t, want, got)
		require.EqualValues(t, 96, values[got[0]])
	})

	for _, s := range []string{"", "&sort=-N", "&sort=Word,N"} {
		t.Run("while rows are added"+s, func(t *testing.T) {
			g := setup(t)
			tb2, ids2, _ := seedNumbers(t, g, 2000)
			var added []string
			got := walk(t, g, "/api/v1/tables/"+tb2.ID+"/rows?limit=100"+s, func(page int) {
				added = append(added, g.insert(tb2, []map[string]any{
					{"Name": "new", "N": float64(page % 97), "Word": "apple pie"},
					{"Name": "new empty"},
				})...)
			})
			// Every row present from the start exactly once; added rows at most once.
			requireEachOnce(t, ids2, got)
			require.GreaterOrEqual(t, len(got), len(ids2))
			require.LessOrEqual(t, len(got), len(ids2)+len(added))
		})
	}
}

func TestFilterSearchCount(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tb, ids, values := seedNumbers(t, f, 300)
	rows := "/api/v1/tables/" + tb.ID + "/rows?limit=1000"
	count := func(q string) int {
		m := f.ok(http.StatusOK, "GET", "/api/v1/tables/"+tb.ID+"/count?"+q, nil)
		return int(m["count"].(float64))
	}

	t.Run("gte returns exactly the matching rows", func(t *testing.T) {
		var want []string
		for _, id := range ids {
			if v, ok := values[id]; ok && v >= 90 {
				want = append(want, id)
			}
		}
		q := "filter=" + url.QueryEscape("N:gte:90")
		p := f.read(rows + "&" + q)
		var got []string
		for _, r := range p.Rows {
			got = append(got, r.ID)
		}
		require.Equal(t, want, got)
		require.Equal(t, len(want), count(q))
	})

	t.Run("filters combine, by field name or id", func(t *testing.T) {
		q := "filter=" + url.QueryEscape(tb.Fields["N"]+":lt:5") + "&filter=" + url.QueryEscape("word:eq:apple pie")
		want := 0
		for i, id := range ids {
			if v, ok := values[id]; ok && v < 5 && i%4 == 0 {
				want++
			}
		}
		require.Len(t, f.read(rows+"&"+q).Rows, want)
		require.Equal(t, want, count(q))
	})

	t.Run("empty, not_empty, contains, neq", func(t *testing.T) {
		require.Equal(t, 30, count("filter=N:empty"))
		require.Equal(t, 270, count("filter=N:not_empty"))
		require.Equal(t, 150, count("filter="+url.QueryEscape("Word:contains:APPLE")))
		require.Equal(t, 225, count("filter="+url.QueryEscape("Word:neq:apple pie")))
		require.Equal(t, 0, count("filter="+url.QueryEscape("Word:contains:%")))
		require.Equal(t, 154, count("filter="+url.QueryEscape("When:lt:2026-01-15"))) // days 1-14 of 28, over 300 rows
	})

	t.Run("q searches text cells through the index", func(t *testing.T) {
		var want []string
		for i, id := range ids {
			if i%4 == 2 {
				want = append(want, id)
			}
		}
		p := f.read(rows + "&q=cherry")
		var got []string
		for _, r := range p.Rows {
			got = append(got, r.ID)
		}
		require.Equal(t, want, got)
		require.Equal(t, len(want), count("q=cherry"))
		require.Equal(t, 75, count("q="+url.QueryEscape("apple crumble")))
		// Search with a sort and a filter.
		p = f.read(rows + "&q=apple&sort=-N&filter=" + url.QueryEscape("N:gte:50"))
		require.NotEmpty(t, p.Rows)
		prev := 1e9
		for _, r := range p.Rows {
			v := r.Cells[tb.Fields["N"]].(float64)
			require.GreaterOrEqual(t, v, 50.0)
			require.LessOrEqual(t, v, prev)
			prev = v
		}
	})

	t.Run("bad parameters are 400 with a code", func(t *testing.T) {
		for _, q := range []string{
			"filter=Nope:eq:1", "filter=N:like:1", "filter=N", "filter=N:gte:abc", "filter=N:eq",
			"filter=Name:empty:x", "sort=Nope", "sort=N,N", "limit=0", "limit=1001", "cursor=abc!", "cursor=" + url.QueryEscape("{}"),
			"cursor=eyJhIjoxfQ", "filter=Name:gt:" + url.QueryEscape("\x00"),
		} {
			res := f.do("GET", "/api/v1/tables/"+tb.ID+"/rows?"+q, nil)
			require.Equal(t, http.StatusBadRequest, res.Status, q)
			require.Equal(t, "invalid_request", res.ErrorCode(t), q)
		}
		// A cursor is tied to its sort.
		p := f.read("/api/v1/tables/" + tb.ID + "/rows?limit=10&sort=N")
		res := f.do("GET", "/api/v1/tables/"+tb.ID+"/rows?limit=10&sort=-N&cursor="+*p.NextCursor, nil)
		require.Equal(t, http.StatusBadRequest, res.Status)
		res = f.do("GET", "/api/v1/tables/"+tb.ID+"/rows?limit=10&cursor="+*p.NextCursor, nil)
		require.Equal(t, http.StatusBadRequest, res.Status)
		res = f.do("GET", "/api/v1/tables/"+tb.ID+"/count?filter=Nope:eq:1", nil)
		require.Equal(t, http.StatusBadRequest, res.Status)
	})

	t.Run("an unknown table is not found, sorted or not", func(t *testing.T) {
		for _, q := range []string{"", "?sort=N", "?q=x"} {
			res := f.do("GET", "/api/v1/tables/0190a000-0000-7000-8000-000000000000/rows"+q, nil)
			require.Equal(t, http.StatusNotFound, res.Status)
			res = f.do("GET", "/api/v1/tables/0190a000-0000-7000-8000-000000000000/count"+q, nil)
			require.Equal(t, http.StatusNotFound, res.Status)
		}
	})
}

// TestSortedReadSeesFieldChanges: a server remembers a table's fields to
// read in one round trip; a change made through another server (another
// replica) is seen at the next read all the same.
func TestSortedReadSeesFieldChanges(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tb, _, _ := seedNumbers(t, f, 50)
	other := &fixture{t: t, app: testenv.NewApp(t, nil), token: f.token, appID: f.appID}
	rows := "/api/v1/tables/" + tb.ID + "/rows?limit=100"
	require.Len(t, f.read(rows+"&sort=-N&filter=N:not_empty").Rows, 45)

	other.ok(http.StatusOK, "PATCH", "/api/v1/tables/"+tb.ID+"/fields/"+tb.Fields["N"], map[string]any{"name": "Old N"})
	m := other.ok(http.StatusCreated, "POST", "/api/v1/tables/"+tb.ID+"/fields", field("N", "text"))
	other.ok(http.StatusCreated, "POST", "/api/v1/tables/"+tb.ID+"/rows", map[string]any{"rows": []any{
		map[string]any{"cells": map[string]any{m["id"].(string): "x"}}}})

	p := f.read(rows + "&sort=-N&filter=N:not_empty")
	require.Len(t, p.Rows, 1)
	require.Equal(t, "x", p.Rows[0].Cells[m["id"].(string)])
	require.Len(t, f.read(rows+"&sort="+url.QueryEscape("-Old N")+"&filter="+url.QueryEscape("Old N:gte:0")).Rows, 45)
	c := f.ok(http.StatusOK, "GET", "/api/v1/tables/"+tb.ID+"/count?filter=N:empty", nil)
	require.EqualValues(t, 50, c["count"])

	other.ok(http.StatusNoContent, "DELETE", "/api/v1/tables/"+tb.ID+"/fields/"+m["id"].(string), nil)
	res := f.do("GET", rows+"&sort=N", nil)
	require.Equal(t, http.StatusBadRequest, res.Status, string(res.Body))
}

// TestEveryFilterAndSortRuns sends every operator on every field type, with
// values of every shape, sorted by that field both ways and paged with a
// cursor: each answer is 200 or a coded 400, never a 500.
func TestEveryFilterAndSortRuns(t *testing.T) {
	t.Parallel()
	f := setup(t)
	people := f.table("People", field("Name", "text"))
	pids := f.insert(people, []map[string]any{{"Name": "Ann"}})
	tb := f.table("All", allTypes(map[string]any{"table": people.ID})...)
	f.insert(tb, []map[string]any{
		{"Name": "a", "Notes": "b", "Score": 1.5, "VIP": true, "Born": "2026-01-02", "Seen": "2026-01-02T03:04:05Z",
			"Tier": "gold", "Tags": []string{"x"}, "Mail": "a@b.example", "Site": "https://a.example", "Friends": []string{pids[0]}},
		{"Name": "c", "Score": -2, "VIP": false, "Tags": []string{}},
		{},
	})
	values := []string{"", "x", "1.5", "true", "2026-01-02", "2026-01-02T03:04:05Z", "gold", "%_\\", pids[0], "a:b"}
	ops := []string{"eq", "neq", "lt", "lte", "gt", "gte", "contains", "empty", "not_empty"}
	for name := range tb.Fields {
		for _, op := range ops {
			for _, v := range values {
				flt := name + ":" + op
				if v != "" || op == "eq" {
					flt += ":" + v
				}
				for _, s := range []string{name, "-" + name} {
					q := "/api/v1/tables/" + tb.ID + "/rows?limit=1&sort=" + url.QueryEscape(s) + "&filter=" + url.QueryEscape(flt)
					res := f.do("GET", q, nil)
					require.Contains(t, []int{http.StatusOK, http.StatusBadRequest}, res.Status, "%s: %s", flt, res.Body)
					if res.Status == http.StatusBadRequest {
						require.Equal(t, "invalid_request", res.ErrorCode(t))
						continue
					}
					var p page
					res.JSON(t, &p)
					if p.NextCursor != nil {
						res = f.do("GET", q+"&cursor="+url.QueryEscape(*p.NextCursor), nil)
						require.Equal(t, http.StatusOK, res.Status, "%s, next page: %s", flt, res.Body)
					}
				}
			}
		}
	}
}

// fields= projects each row's cells onto the named fields (by id or name),
// on plain, searched, sorted and filtered reads and across a cursor walk;
// link display values come only through projected link fields; a field
// the table lacks, or one named twice, is a 400 naming the parameter.
func TestFieldsProjection(t *testing.T) {
	t.Parallel()
	f := setup(t)
	people := f.table("People", field("Name", "text"))
	pids := f.insert(people, []map[string]any{{"Name": "Ann"}, {"Name": "Bob"}})
	tb := f.table("Projects", field("Title", "text"), field("N", "number"), field("Notes", "long_text"),
		field("Team", "link", map[string]any{"table": people.ID}))
	rows := make([]map[string]any, 250)
	for i := range rows {
		rows[i] = map[string]any{"Title": fmt.Sprintf("p%03d", i), "N": float64(i % 7), "Notes": "long notes",
			"Team": []string{pids[i%2]}}
		if i%5 == 0 {
			delete(rows[i], "N")
		}
	}
	ids := f.insert(tb, rows)
	title, n, team := tb.Fields["Title"], tb.Fields["N"], tb.Fields["Team"]
	base := "/api/v1/tables/" + tb.ID + "/rows?limit=100"

	onlyKeys := func(p page, allowed ...string) {
		t.Helper()
		require.NotEmpty(t, p.Rows)
		for _, r := range p.Rows {
			for k := range r.Cells {
				require.Contains(t, allowed, k, "row %s carries a cell not asked for", r.ID)
			}
			require.Contains(t, r.Cells, allowed[0], "row %s lost a projected cell", r.ID)
		}
	}
	for _, q := range []string{"", "&q=p010", "&sort=-N", "&filter=N:gte:3", "&sort=Title&filter=Title:contains:p"} {
		p := f.read(base + q + "&fields=" + title + "," + n)
		onlyKeys(p, title, n)
		require.Empty(t, p.Links, "no link field projected: no display values (%s)", q)
		full := f.read(base + q)
		require.Equal(t, len(full.Rows), len(p.Rows), q)
		for i := range p.Rows {
			require.Equal(t, full.Rows[i].ID, p.Rows[i].ID, q)
			require.Equal(t, full.Rows[i].Cells[title], p.Rows[i].Cells[title], q)
			require.Equal(t, full.Rows[i].Cells[n], p.Rows[i].Cells[n], q)
		}
	}
	// By name, with the link field: its display values come along.
	p := f.read(base + "&fields=Team,title")
	onlyKeys(p, team, title)
	require.Equal(t, "Ann", *p.Links[pids[0]])
	require.Equal(t, "Bob", *p.Links[pids[1]])
	// A walk with a projection sees every row once, in order.
	require.Equal(t, ids, walk(t, f, base+"&fields="+title, nil))
	// A row with none of the projected cells has empty cells, not none.
	p = f.read(base + "&fields=" + n + "&filter=N:empty")
	for _, r := range p.Rows {
		require.NotNil(t, r.Cells)
		require.Empty(t, r.Cells)
	}

	for _, bad := range []string{"nope", title + "," + title, title + ",Title", "", ","} {
		res := f.do("GET", base+"&fields="+url.QueryEscape(bad), nil)
		if bad == "" {
			require.Equal(t, http.StatusOK, res.Status, "an empty fields= is no projection")
			continue
		}
		require.Equal(t, http.StatusBadRequest, res.Status, "fields=%q: %s", bad, res.Body)
		require.Contains(t, string(res.Body), `"parameter":"fields"`, string(res.Body))
	}
	// A field added after a projected read was remembered is found.
	added := f.ok(http.StatusCreated, "POST", "/api/v1/tables/"+tb.ID+"/fields", field("Later", "text"))["id"].(string)
	onlyKeys(f.read(base+"&fields="+title+","+added), title, added)
}

// ids= reads just the rows named, in the page's order, whatever the limit:
// what a grid told of changed rows refetches in one request.
func TestReadByIDs(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tb := f.table("Tasks", field("Title", "text"))
	rows := make([]map[string]any, 30)
	for i := range rows {
		rows[i] = map[string]any{"Title": fmt.Sprintf("t%02d", i)}
	}
	ids := f.insert(tb, rows)
	other := f.insert(f.table("Other", field("Title", "text")), []map[string]any{{"Title": "elsewhere"}})
	base := "/api/v1/tables/" + tb.ID + "/rows"

	want := []string{ids[3], ids[17], ids[29]}
	gone := uuid.NewString()
	p := f.read(base + "?limit=1&ids=" + ids[29] + "," + gone + "," + ids[3] + "," + other[0] + "," + ids[17])
	got := make([]string, len(p.Rows))
	for i, r := range p.Rows {
		got[i] = r.ID
	}
	slices.Sort(want)
	require.Equal(t, want, got, "the rows named, in id order; an unknown id and another table's row are left out")
	require.Nil(t, p.NextCursor, "an ids= read is one page")
	require.Equal(t, "t03", p.Rows[slices.Index(got, ids[3])].Cells[tb.Fields["Title"]])

	many := strings.Repeat(ids[0]+",", 100) + ids[1]
	for _, bad := range []string{"nope", ids[0] + ",x", many, ids[0] + "&cursor=abc"} {
		res := f.do("GET", base+"?ids="+bad, nil)
		require.Equal(t, http.StatusBadRequest, res.Status, "ids=%q: %s", bad, res.Body)
		require.Contains(t, string(res.Body), `"parameter":"ids"`, string(res.Body))
	}
}
