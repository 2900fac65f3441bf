package test

// The Airtable-compatible API (/v0), through the real router, PostgreSQL
// and Redis, request by request as Airtable's Web API documentation shows
// them: the wire format of every route and option, its errors in
// Airtable's shape, isolation between realms, and the 429 Airtable's
// clients back off on.

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// atBase is an app with a "Tasks" table of every field type and a
// "People" table its Link field points at.
type atBase struct {
	App, Tasks, People string
	Fields             map[string]string // Tasks' field ids by name
}

func seedAirtable(t *testing.T, app *testenv.App, token string) atBase {
	t.Helper()
	res := app.Do(t, "POST", "/api/v1/apps", token, map[string]any{"name": "Projects"})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
	b := atBase{App: res.Map(t)["id"].(string), Fields: map[string]string{}}
	res = app.Do(t, "POST", "/api/v1/apps/"+b.App+"/tables", token, map[string]any{
		"name": "People", "fields": []map[string]any{{"name": "Name", "type": "text"}}})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
	b.People = res.Map(t)["id"].(string)
	res = app.Do(t, "POST", "/api/v1/apps/"+b.App+"/tables", token, map[string]any{
		"name": "Tasks",
		"fields": []map[string]any{
			{"name": "Name", "type": "text"},
			{"name": "Notes", "type": "long_text"},
			{"name": "Count", "type": "number", "options": map[string]any{"precision": 0}},
			{"name": "Done", "type": "checkbox"},
			{"name": "Due", "type": "date"},
			{"name": "At", "type": "datetime"},
			{"name": "Status", "type": "single_select", "options": map[string]any{"choices": []string{"Todo", "Doing", "Done"}}},
			{"name": "Tags", "type": "multi_select", "options": map[string]any{"choices": []string{"red", "green", "blue"}}},
			{"name": "Owner", "type": "email"},
			{"name": "Who", "type": "link", "options": map[string]any{"table": b.People}},
		}})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
	tbl := res.Map(t)
	b.Tasks = tbl["id"].(string)
	for _, f := range tbl["fields"].([]any) {
		f := f.(map[string]any)
		b.Fields[f["name"].(string)] = f["id"].(string)
	}
	return b
}

// atRecords is a list or batch answer.
type atRecords struct {
	Records []struct {
		ID          string         `json:"id"`
		CreatedTime string         `json:"createdTime"`
		Fields      map[string]any `json:"fields"`
		Deleted     bool           `json:"deleted"`
	} `json:"records"`
	Offset         string   `json:"offset"`
	CreatedRecords []string `json:"createdRecords"`
	UpdatedRecords []string `json:"updatedRecords"`
}

func (r atRecords) names() []string {
	var out []string
	for _, rec := range r.Records {
		out = append(out, fmt.Sprint(rec.Fields["Name"]))
	}
	return out
}

// atError is Airtable's error shape.
func atError(t *testing.T, res testenv.Response) (string, string) {
	t.Helper()
	var e struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	res.JSON(t, &e)
	require.NotEmpty(t, e.Error.Type, string(res.Body))
	require.NotEmpty(t, e.Error.Message, string(res.Body))
	return e.Error.Type, e.Error.Message
}

// fourTasks creates the records most tests read.
func fourTasks(t *testing.T, app *testenv.App, token string, b atBase) atRecords {
	t.Helper()
	res := app.Do(t, "POST", "/v0/"+b.App+"/Tasks", token, map[string]any{"records": []map[string]any{
		{"fields": map[string]any{"Name": "alpha", "Count": 3, "Done": true, "Due": "2024-05-01", "At": "2024-05-01T09:30:00Z",
			"Status": "Done", "Tags": []string{"red", "blue"}, "Owner": "a@example.test", "Notes": "first\nline"}},
		{"fields": map[string]any{"Name": "Beta", "Count": 1, "Done": false, "Due": "2024-07-15", "At": "2024-07-20T18:00:00Z", "Status": "Todo"}},
		{"fields": map[string]any{"Name": "gamma", "Count": 5, "Due": "2023-12-31", "At": "2024-01-02T00:00:00Z", "Status": "Doing", "Tags": []string{"green"}}},
		{"fields": map[string]any{"Name": "delta"}},
	}})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	var out atRecords
	res.JSON(t, &out)
	require.Len(t, out.Records, 4)
	return out
}

func TestAirtableCreateAnswersRecordsByName(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleEditor, nil)
	b := seedAirtable(t, app, a.Token)
	made := fourTasks(t, app, a.Token, b)

	first := made.Records[0]
	require.NotEmpty(t, first.ID)
	require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`, first.CreatedTime)
	require.Equal(t, map[string]any{"Name": "alpha", "Count": 3.0, "Done": true, "Due": "2024-05-01",
		"At": "2024-05-01T09:30:00.000Z", "Status": "Done", "Tags": []any{"red", "blue"}, "Owner": "a@example.test",
		"Notes": "first\nline"}, first.Fields)
	// Empty cells and an unchecked checkbox are left out, as Airtable does.
	require.Equal(t, map[string]any{"Name": "delta"}, made.Records[3].Fields)
	require.NotContains(t, made.Records[1].Fields, "Done")

	// A single record: {"fields"} in, the record out.
	res := app.Do(t, "POST", "/v0/"+b.App+"/Tasks", a.Token, map[string]any{"fields": map[string]any{"Name": "solo", "Who": []string{}}})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	one := res.Map(t)
	require.Equal(t, map[string]any{"Name": "solo"}, one["fields"])
	require.NotEmpty(t, one["id"])

	// By table id too, and answered by field id when asked.
	res = app.Do(t, "POST", "/v0/"+b.App+"/"+b.Tasks, a.Token, map[string]any{"records": []map[string]any{{"fields": map[string]any{"Name": "by id"}}},
		"returnFieldsByFieldId": true})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	var byID atRecords
	res.JSON(t, &byID)
	require.Equal(t, map[string]any{b.Fields["Name"]: "by id"}, byID.Records[0].Fields)

	// GET one record.
	res = app.Do(t, "GET", "/v0/"+b.App+"/Tasks/"+first.ID, a.Token, nil)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.Equal(t, first.ID, res.Map(t)["id"])
	require.Equal(t, "alpha", res.Map(t)["fields"].(map[string]any)["Name"])
}

func TestAirtableTypecast(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleEditor, nil)
	b := seedAirtable(t, app, a.Token)
	fields := map[string]any{"Name": 12, "Count": "42", "Done": "true", "Due": "2024-02-29", "Tags": "red, green", "At": "2024-03-01T10:00:00+02:00"}

	res := app.Do(t, "POST", "/v0/"+b.App+"/Tasks", a.Token, map[string]any{"fields": fields})
	require.Equal(t, http.StatusUnprocessableEntity, res.Status, string(res.Body))
	typ, msg := atError(t, res)
	require.Equal(t, "INVALID_VALUE_FOR_COLUMN", typ)
	require.Contains(t, msg, `Field "`)

	res = app.Do(t, "POST", "/v0/"+b.App+"/Tasks", a.Token, map[string]any{"fields": fields, "typecast": true})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.Equal(t, map[string]any{"Name": "12", "Count": 42.0, "Done": true, "Due": "2024-02-29",
		"Tags": []any{"red", "green"}, "At": "2024-03-01T08:00:00.000Z"}, res.Map(t)["fields"])

	// Typecast adds no choice: an unknown one is refused, naming the field.
	res = app.Do(t, "POST", "/v0/"+b.App+"/Tasks", a.Token, map[string]any{"fields": map[string]any{"Status": "Blocked"}, "typecast": true})
	require.Equal(t, http.StatusUnprocessableEntity, res.Status, string(res.Body))
	typ, msg = atError(t, res)
	require.Equal(t, "INVALID_MULTIPLE_CHOICE_OPTIONS", typ)
	require.Contains(t, msg, "Status")
}

// list GETs a list with the given query and decodes it.
func list(t *testing.T, app *testenv.App, token, path string, q url.Values) atRecords {
	t.Helper()
	res := app.Do(t, "GET", path+"?"+q.Encode(), token, nil)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	var out atRecords
	res.JSON(t, &out)
	return out
}

func TestAirtableListOptions(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleViewer, nil)
	ed := app.AddMember(t, a.RealmID, tenancy.RoleEditor, nil)
	b := seedAirtable(t, app, ed.Token)
	fourTasks(t, app, ed.Token, b)
	path := "/v0/" + b.App + "/Tasks"

	// Creation order, one page.
	all := list(t, app, a.Token, path, nil)
	require.Equal(t, []string{"alpha", "Beta", "gamma", "delta"}, all.names())
	require.Empty(t, all.Offset)

	// pageSize and offset, as eachPage walks them, with the options repeated.
	var walked []string
	q := url.Values{"pageSize": {"3"}, "sort[0][field]": {"Count"}, "sort[0][direction]": {"desc"}}
	for pages := 0; ; pages++ {
		require.Less(t, pages, 4)
		page := list(t, app, a.Token, path, q)
		walked = append(walked, page.names()...)
		if page.Offset == "" {
			break
		}
		q.Set("offset", page.Offset)
	}
	require.Equal(t, []string{"gamma", "alpha", "Beta", "delta"}, walked, "descending Count, the empty one last")

	// Airtable's npm client asks with a trailing slash and the old limit=.
	old := list(t, app, a.Token, path+"/", url.Values{"limit": {"2"}})
	require.Equal(t, []string{"alpha", "Beta"}, old.names())
	require.NotEmpty(t, old.Offset)

	// maxRecords bounds the whole list, across pages.
	q = url.Values{"pageSize": {"2"}, "maxRecords": {"3"}}
	p1 := list(t, app, a.Token, path, q)
	require.Equal(t, []string{"alpha", "Beta"}, p1.names())
	require.NotEmpty(t, p1.Offset)
	q.Set("offset", p1.Offset)
	p2 := list(t, app, a.Token, path, q)
	require.Equal(t, []string{"gamma"}, p2.names())
	require.Empty(t, p2.Offset)

	// fields[] keeps just those fields; two sort keys.
	got := list(t, app, a.Token, path, url.Values{"fields[]": {"Name", "Status"}, "sort[0][field]": {"Status"}, "sort[1][field]": {"Name"}})
	require.Equal(t, []string{"gamma", "alpha", "Beta", "delta"}, got.names(), "by choice name as text (Doing, Done, Todo), the empty one last")
	for _, r := range got.Records {
		for k := range r.Fields {
			require.Contains(t, []string{"Name", "Status"}, k)
		}
	}

	// returnFieldsByFieldId, cellFormat=json, view and timeZone are taken.
	got = list(t, app, a.Token, path, url.Values{"returnFieldsByFieldId": {"true"}, "cellFormat": {"json"}, "view": {"Grid view"},
		"timeZone": {"Europe/Paris"}, "maxRecords": {"1"}})
	require.Equal(t, "alpha", got.Records[0].Fields[b.Fields["Name"]])

	// POST listRecords: the same options in a body.
	res := app.Do(t, "POST", path+"/listRecords", a.Token, map[string]any{
		"filterByFormula": "{Count} >= 3", "sort": []map[string]any{{"field": "Name", "direction": "asc"}}, "fields": []string{"Name"}})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	var post atRecords
	res.JSON(t, &post)
	require.Equal(t, []string{"alpha", "gamma"}, post.names())
}

func TestAirtableFilterByFormula(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleEditor, nil)
	b := seedAirtable(t, app, a.Token)
	fourTasks(t, app, a.Token, b)
	path := "/v0/" + b.App + "/Tasks"

	cases := []struct {
		formula string
		want    []string
	}{
		{`{Status} = 'Done'`, []string{"alpha"}},
		{`Status = "Todo"`, []string{"Beta"}},
		{`AND({Count} > 1, NOT({Done}))`, []string{"gamma"}},
		{`OR({Count} = 1, {Name} = "delta")`, []string{"Beta", "delta"}},
		{`{Done}`, []string{"alpha"}},
		{`{Notes} = BLANK()`, []string{"Beta", "gamma", "delta"}},
		{`{Count} = 0`, []string{"delta"}},
		{`FIND("a", {Name}) > 0`, []string{"alpha", "Beta", "gamma", "delta"}},
		{`FIND("B", {Name})`, []string{"Beta"}},
		{`SEARCH("mm", {Name})`, []string{"gamma"}},
		{`LOWER({Name}) = "beta"`, []string{"Beta"}},
		{`UPPER(TRIM({Name})) = "ALPHA"`, []string{"alpha"}},
		{`LEN({Name}) = 5`, []string{"alpha", "gamma", "delta"}},
		{`{Name} & "-" & {Count} = "alpha-3"`, []string{"alpha"}},
		{`{Count} * 2 + 1 > 6`, []string{"alpha", "gamma"}},
		{`{Count} / 0 = BLANK()`, nil}, // #ERROR in Airtable, which no record passes
		{`DATETIME_DIFF({At}, {Due}, 'days') < 1000`, []string{"alpha", "Beta", "gamma"}},
		{`-{Count} < -2`, []string{"alpha", "gamma"}},
		{`IF({Count} > 2, "many", "few") = "many"`, []string{"alpha", "gamma"}},
		{`IS_BEFORE({Due}, '2024-06-01')`, []string{"alpha", "gamma"}},
		{`IS_AFTER({At}, '2024-07-01')`, []string{"Beta"}},
		{`DATETIME_DIFF({At}, {Due}, 'days') >= 5`, []string{"Beta"}},
		{`IS_BEFORE({Due}, TODAY())`, []string{"alpha", "Beta", "gamma"}},
		{`IS_AFTER(NOW(), {At})`, []string{"alpha", "Beta", "gamma"}},
		{`FIND("red", {Tags})`, []string{"alpha"}},
		{`{Name} = "'; DROP TABLE rows; --"`, nil},
		{`{Count} * 1e308 * 10 > 0`, []string{"alpha", "Beta", "gamma"}},
		{`FIND("a", {Name}, FIND("a", {Name}, FIND("a", {Name}, FIND("a", {Name}, FIND("a", {Name}, FIND("a", {Name}, FIND("a", {Name}, 0))))))) >= 0`,
			[]string{"alpha", "Beta", "gamma", "delta"}},
		{`TRUE()`, []string{"alpha", "Beta", "gamma", "delta"}},
		{`FALSE()`, nil},
	}
	for _, c := range cases {
		t.Run(c.formula, func(t *testing.T) {
			got := list(t, app, a.Token, path, url.Values{"filterByFormula": {c.formula}})
			require.Equal(t, c.want, got.names())
		})
	}

	// Refused formulas: 422 INVALID_FILTER_BY_FORMULA, saying what is wrong.
	bad := map[string]string{
		`REGEX_MATCH({Name}, "a")`: "REGEX_MATCH",
		`{Nope} = 1`:               "Nope",
		`AND({Count} > 1`:          "",
		`IS_BEFORE({Due}, 'soon')`: "",
	}
	for f, mention := range bad {
		res := app.Do(t, "GET", path+"?"+url.Values{"filterByFormula": {f}}.Encode(), a.Token, nil)
		require.Equal(t, http.StatusUnprocessableEntity, res.Status, f+": "+string(res.Body))
		typ, msg := atError(t, res)
		require.Equal(t, "INVALID_FILTER_BY_FORMULA", typ, f)
		require.Contains(t, msg, mention, f)
	}
}

func TestAirtableUpdateReplaceUpsertDelete(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleEditor, nil)
	b := seedAirtable(t, app, a.Token)
	made := fourTasks(t, app, a.Token, b)
	path := "/v0/" + b.App + "/Tasks"
	alpha, beta := made.Records[0].ID, made.Records[1].ID

	// PATCH merges: the fields not named stay.
	res := app.Do(t, "PATCH", path, a.Token, map[string]any{"records": []map[string]any{
		{"id": alpha, "fields": map[string]any{"Count": 30}},
		{"id": beta, "fields": map[string]any{"Done": true, "Status": nil}},
	}})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	var up atRecords
	res.JSON(t, &up)
	require.Equal(t, 30.0, up.Records[0].Fields["Count"])
	require.Equal(t, "alpha", up.Records[0].Fields["Name"])
	require.Equal(t, true, up.Records[1].Fields["Done"])
	require.NotContains(t, up.Records[1].Fields, "Status")

	// PUT replaces: the fields not named are cleared.
	res = app.Do(t, "PUT", path+"/"+alpha, a.Token, map[string]any{"fields": map[string]any{"Name": "alpha2"}})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.Equal(t, map[string]any{"Name": "alpha2"}, res.Map(t)["fields"])

	// PATCH one record.
	res = app.Do(t, "PATCH", path+"/"+alpha, a.Token, map[string]any{"fields": map[string]any{"Count": 7}})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.Equal(t, map[string]any{"Name": "alpha2", "Count": 7.0}, res.Map(t)["fields"])

	// Upsert on Name: one matches and is updated, one is created.
	res = app.Do(t, "PATCH", path, a.Token, map[string]any{
		"performUpsert": map[string]any{"fieldsToMergeOn": []string{"Name"}},
		"records": []map[string]any{
			{"fields": map[string]any{"Name": "gamma", "Count": 50}},
			{"fields": map[string]any{"Name": "epsilon", "Count": 9}},
		}})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	res.JSON(t, &up)
	require.Equal(t, []string{made.Records[2].ID}, up.UpdatedRecords)
	require.Len(t, up.CreatedRecords, 1)
	require.Equal(t, up.CreatedRecords[0], up.Records[1].ID)
	require.Equal(t, 50.0, up.Records[0].Fields["Count"])
	require.Equal(t, "Doing", up.Records[0].Fields["Status"], "an upsert's PATCH merges")

	// An update of a record the table lacks changes nothing.
	res = app.Do(t, "PATCH", path, a.Token, map[string]any{"records": []map[string]any{
		{"id": beta, "fields": map[string]any{"Count": 99}},
		{"id": "00000000-0000-7000-8000-000000000000", "fields": map[string]any{"Count": 99}},
	}})
	require.Equal(t, http.StatusNotFound, res.Status, string(res.Body))
	typ, _ := atError(t, res)
	require.Equal(t, "NOT_FOUND", typ)
	res = app.Do(t, "GET", path+"/"+beta, a.Token, nil)
	require.Equal(t, 1.0, res.Map(t)["fields"].(map[string]any)["Count"])

	// DELETE several by records[], then one by path.
	q := url.Values{"records[]": {alpha, beta}}
	res = app.Do(t, "DELETE", path+"?"+q.Encode(), a.Token, nil)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	var del atRecords
	res.JSON(t, &del)
	require.Len(t, del.Records, 2)
	require.True(t, del.Records[0].Deleted)
	res = app.Do(t, "DELETE", path+"/"+made.Records[3].ID, a.Token, nil)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.Equal(t, map[string]any{"id": made.Records[3].ID, "deleted": true}, res.Map(t))
	res = app.Do(t, "DELETE", path+"/"+made.Records[3].ID, a.Token, nil)
	require.Equal(t, http.StatusNotFound, res.Status, string(res.Body))
	left := list(t, app, a.Token, path, nil)
	require.Equal(t, []string{"gamma", "epsilon"}, left.names())
}

func TestAirtableErrorsInAirtablesShape(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleEditor, nil)
	viewer := app.AddMember(t, a.RealmID, tenancy.RoleViewer, nil)
	b := seedAirtable(t, app, a.Token)
	path := "/v0/" + b.App + "/Tasks"
	res := app.Do(t, "POST", path, a.Token, map[string]any{"fields": map[string]any{"Name": "twin"}})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	twin := res.Map(t)["id"].(string)
	eleven := make([]map[string]any, 11)
	for i := range eleven {
		eleven[i] = map[string]any{"fields": map[string]any{"Name": "x"}}
	}
	cases := []struct {
		name, method, path, token string
		body                      any
		status                    int
		typ                       string
	}{
		{"no token", "GET", path, "", nil, 401, "AUTHENTICATION_REQUIRED"},
		{"bad token", "GET", path, "apd_not-a-token", nil, 401, "AUTHENTICATION_REQUIRED"},
		{"unknown base", "GET", "/v0/appNOPE/Tasks", a.Token, nil, 404, "NOT_FOUND"},
		{"unknown table", "GET", "/v0/" + b.App + "/Nope", a.Token, nil, 404, "NOT_FOUND"},
		{"unknown record", "GET", path + "/recNOPE", a.Token, nil, 404, "NOT_FOUND"},
		{"viewer writes", "POST", path, viewer.Token, map[string]any{"fields": map[string]any{"Name": "x"}}, 403, "INVALID_PERMISSIONS_OR_MODEL_NOT_FOUND"},
		{"unknown field", "POST", path, a.Token, map[string]any{"fields": map[string]any{"Colour": "red"}}, 422, "UNKNOWN_FIELD_NAME"},
		{"wrong value", "POST", path, a.Token, map[string]any{"fields": map[string]any{"Count": "many"}}, 422, "INVALID_VALUE_FOR_COLUMN"},
		{"eleven records", "POST", path, a.Token, map[string]any{"records": eleven}, 422, "INVALID_RECORDS"},
		{"no records", "POST", path, a.Token, map[string]any{"records": []any{}}, 422, "INVALID_RECORDS"},
		{"update without id", "PATCH", path, a.Token, map[string]any{"records": []map[string]any{{"fields": map[string]any{"Name": "x"}}}}, 422, "INVALID_RECORDS"},
		{"upsert twice onto one row", "PATCH", path, a.Token, map[string]any{"performUpsert": map[string]any{"fieldsToMergeOn": []string{"Name"}},
			"records": []map[string]any{{"fields": map[string]any{"Name": "twin"}}, {"id": twin, "fields": map[string]any{"Count": 1}}}}, 422, "INVALID_RECORDS"},
		{"bad json", "POST", path, a.Token, "{", 422, "INVALID_REQUEST_UNKNOWN"},
		{"unknown option", "POST", path, a.Token, map[string]any{"fields": map[string]any{}, "colour": 1}, 422, "INVALID_REQUEST_UNKNOWN"},
		{"page size", "GET", path + "?pageSize=101", a.Token, nil, 422, "INVALID_PAGE_SIZE_PARAMETER"},
		{"max records", "GET", path + "?maxRecords=0", a.Token, nil, 422, "INVALID_MAX_RECORDS_PARAMETER"},
		{"sort field", "GET", path + "?sort%5B0%5D%5Bfield%5D=Nope", a.Token, nil, 422, "UNKNOWN_FIELD_NAME"},
		{"sort direction", "GET", path + "?sort%5B0%5D%5Bfield%5D=Name&sort%5B0%5D%5Bdirection%5D=up", a.Token, nil, 422, "INVALID_SORT_PARAMETER"},
		{"fields", "GET", path + "?fields%5B%5D=Nope", a.Token, nil, 422, "UNKNOWN_FIELD_NAME"},
		{"offset", "GET", path + "?offset=itrFORGED", a.Token, nil, 422, "INVALID_OFFSET_VALUE"},
		{"cell format", "GET", path + "?cellFormat=string", a.Token, nil, 422, "INVALID_CELL_FORMAT"},
		{"delete eleven", "DELETE", path + "?" + strings.Repeat("records%5B%5D=x&", 11), a.Token, nil, 422, "INVALID_RECORDS"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := app.Do(t, c.method, c.path, c.token, c.body)
			require.Equal(t, c.status, res.Status, string(res.Body))
			typ, _ := atError(t, res)
			require.Equal(t, c.typ, typ)
		})
	}
}

func TestAirtableRealmsSeeOnlyTheirOwn(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleOwner, nil)
	other := app.NewTenant(t, tenancy.RoleOwner, nil)
	b := seedAirtable(t, app, a.Token)
	made := fourTasks(t, app, a.Token, b)
	rec := made.Records[0].ID

	for _, c := range []struct{ method, path string }{
		{"GET", "/v0/" + b.App + "/Tasks"},
		{"GET", "/v0/" + b.App + "/" + b.Tasks},
		{"GET", "/v0/" + b.App + "/Tasks/" + rec},
		{"PATCH", "/v0/" + b.App + "/Tasks/" + rec},
		{"DELETE", "/v0/" + b.App + "/Tasks/" + rec},
		{"GET", "/v0/meta/bases/" + b.App + "/tables"},
	} {
		var body any
		if c.method == "PATCH" {
			body = map[string]any{"fields": map[string]any{"Name": "mine now"}}
		}
		res := app.Do(t, c.method, c.path, other.Token, body)
		require.Equal(t, http.StatusNotFound, res.Status, c.method+" "+c.path+": "+string(res.Body))
		typ, _ := atError(t, res)
		require.Equal(t, "NOT_FOUND", typ)
	}
	res := app.Do(t, "GET", "/v0/meta/bases", other.Token, nil)
	require.Equal(t, http.StatusOK, res.Status)
	require.Empty(t, res.Map(t)["bases"])
	res = app.Do(t, "GET", "/v0/"+b.App+"/Tasks/"+rec, a.Token, nil)
	require.Equal(t, "alpha", res.Map(t)["fields"].(map[string]any)["Name"], "the other realm changed nothing")
}

func TestAirtableMetadata(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleEditor, nil)
	b := seedAirtable(t, app, a.Token)

	res := app.Do(t, "GET", "/v0/meta/bases", a.Token, nil)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.Equal(t, []any{map[string]any{"id": b.App, "name": "Projects", "permissionLevel": "edit"}}, res.Map(t)["bases"])

	res = app.Do(t, "GET", "/v0/meta/bases/"+b.App+"/tables", a.Token, nil)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	var meta struct {
		Tables []struct {
			ID, Name, PrimaryFieldID string
			Fields                   []struct {
				ID, Name, Type string
				Options        map[string]any
			}
		}
	}
	res.JSON(t, &meta)
	require.Len(t, meta.Tables, 2)
	tasks := meta.Tables[1]
	require.Equal(t, b.Tasks, tasks.ID)
	require.Equal(t, b.Fields["Name"], tasks.PrimaryFieldID)
	types := map[string]string{}
	for _, f := range tasks.Fields {
		types[f.Name] = f.Type
		if f.Name == "Status" {
			var names []string
			for _, c := range f.Options["choices"].([]any) {
				names = append(names, c.(map[string]any)["name"].(string))
			}
			require.Equal(t, []string{"Todo", "Doing", "Done"}, names)
		}
		if f.Name == "Who" {
			require.Equal(t, b.People, f.Options["linkedTableId"])
		}
	}
	require.Equal(t, map[string]string{"Name": "singleLineText", "Notes": "multilineText", "Count": "number", "Done": "checkbox",
		"Due": "date", "At": "dateTime", "Status": "singleSelect", "Tags": "multipleSelects", "Owner": "email",
		"Who": "multipleRecordLinks"}, types)
}

func TestAirtableTableNamesAreEscaped(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleEditor, nil)
	res := app.Do(t, "POST", "/api/v1/apps", a.Token, map[string]any{"name": "Ops"})
	appID := res.Map(t)["id"].(string)
	for _, name := range []string{"Open Items", "Q1/Q2 plans", "100% done"} {
		res = app.Do(t, "POST", "/api/v1/apps/"+appID+"/tables", a.Token, map[string]any{"name": name,
			"fields": []map[string]any{{"name": "Title", "type": "text"}}})
		require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
		p := "/v0/" + appID + "/" + url.PathEscape(name)
		res = app.Do(t, "POST", p, a.Token, map[string]any{"fields": map[string]any{"Title": name}})
		require.Equal(t, http.StatusOK, res.Status, name+": "+string(res.Body))
		got := list(t, app, a.Token, p, nil)
		require.Len(t, got.Records, 1)
		require.Equal(t, name, got.Records[0].Fields["Title"])
	}
}

// TestAirtableRateLimitAnswersRetryAfter: a token of 60 requests a minute
// that bursts gets 429 in Airtable's shape with Retry-After, which
// Airtable's clients wait on before they retry.
func TestAirtableRateLimitAnswersRetryAfter(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	rpm := 60
	a := app.NewTenant(t, tenancy.RoleEditor, &rpm)
	res := app.Do(t, "GET", "/v0/meta/bases", a.Token, nil)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	statuses := map[int]int{}
	var refused testenv.Response
	for range 120 {
		res := app.Do(t, "GET", "/v0/meta/bases", a.Token, nil)
		statuses[res.Status]++
		if res.Status == http.StatusTooManyRequests {
			refused = res
		}
	}
	require.Positive(t, statuses[http.StatusTooManyRequests], "statuses: %v", statuses)
	typ, msg := atError(t, refused)
	require.Equal(t, "RATE_LIMIT_REACHED", typ)
	require.Contains(t, msg, "Rate limit exceeded")
	require.NotEmpty(t, refused.Header.Get("Retry-After"))
	keys := make([]int, 0, len(statuses))
	for k := range statuses {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	require.Equal(t, []int{200, 429}, keys, "nothing but answers and refusals: %v", statuses)
}

// TestAirtableRoles: every /v0 route as nobody, viewer, editor and owner.
// Reads need a viewer, writes an editor; a refused write changes nothing.
func TestAirtableRoles(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	owner := app.NewTenant(t, tenancy.RoleOwner, nil)
	editor := app.AddMember(t, owner.RealmID, tenancy.RoleEditor, nil)
	viewer := app.AddMember(t, owner.RealmID, tenancy.RoleViewer, nil)
	b := seedAirtable(t, app, owner.Token)
	routes := []struct {
		method string
		path   func(rec string) string
		body   any
		min    tenancy.Role
	}{
		{"GET", func(string) string { return "/v0/meta/bases" }, nil, tenancy.RoleViewer},
		{"GET", func(string) string { return "/v0/meta/bases/" + b.App + "/tables" }, nil, tenancy.RoleViewer},
		{"GET", func(string) string { return "/v0/" + b.App + "/Tasks" }, nil, tenancy.RoleViewer},
		{"POST", func(string) string { return "/v0/" + b.App + "/Tasks/listRecords" }, map[string]any{}, tenancy.RoleViewer},
		{"GET", func(r string) string { return "/v0/" + b.App + "/Tasks/" + r }, nil, tenancy.RoleViewer},
		{"POST", func(string) string { return "/v0/" + b.App + "/Tasks" }, map[string]any{"fields": map[string]any{"Name": "new"}}, tenancy.RoleEditor},
		{"PATCH", func(r string) string { return "/v0/" + b.App + "/Tasks" }, nil, tenancy.RoleEditor},
		{"PUT", func(r string) string { return "/v0/" + b.App + "/Tasks" }, nil, tenancy.RoleEditor},
		{"PATCH", func(r string) string { return "/v0/" + b.App + "/Tasks/" + r }, map[string]any{"fields": map[string]any{"Count": 2}}, tenancy.RoleEditor},
		{"PUT", func(r string) string { return "/v0/" + b.App + "/Tasks/" + r }, map[string]any{"fields": map[string]any{"Name": "put"}}, tenancy.RoleEditor},
		{"DELETE", func(r string) string { return "/v0/" + b.App + "/Tasks?records%5B%5D=" + r }, nil, tenancy.RoleEditor},
		{"DELETE", func(r string) string { return "/v0/" + b.App + "/Tasks/" + r }, nil, tenancy.RoleEditor},
	}
	rank := map[tenancy.Role]int{"": 0, tenancy.RoleViewer: 1, tenancy.RoleEditor: 2, tenancy.RoleOwner: 3}
	for _, r := range routes {
		for _, who := range []testenv.Tenant{{}, viewer, editor, owner} {
			res := app.Do(t, "POST", "/v0/"+b.App+"/Tasks", owner.Token, map[string]any{"fields": map[string]any{"Name": "fixture"}})
			require.Equal(t, http.StatusOK, res.Status, string(res.Body))
			rec := res.Map(t)["id"].(string)
			body := r.body
			if body == nil && (r.method == "PATCH" || r.method == "PUT") {
				body = map[string]any{"records": []map[string]any{{"id": rec, "fields": map[string]any{"Name": "batch"}}}}
			}
			res = app.Do(t, r.method, r.path(rec), who.Token, body)
			name := fmt.Sprintf("%s %s as %q", r.method, r.path("{record}"), who.Role)
			switch {
			case who.Token == "":
				require.Equal(t, http.StatusUnauthorized, res.Status, name)
				typ, _ := atError(t, res)
				require.Equal(t, "AUTHENTICATION_REQUIRED", typ, name)
			case rank[who.Role] < rank[r.min]:
				require.Equal(t, http.StatusForbidden, res.Status, name)
				typ, _ := atError(t, res)
				require.Equal(t, "INVALID_PERMISSIONS_OR_MODEL_NOT_FOUND", typ, name)
			default:
				require.Equal(t, http.StatusOK, res.Status, name+": "+string(res.Body))
				continue
			}
			res = app.Do(t, "GET", "/v0/"+b.App+"/Tasks/"+rec, owner.Token, nil)
			require.Equal(t, map[string]any{"Name": "fixture"}, res.Map(t)["fields"], name+" was refused but changed the record")
		}
	}
}
