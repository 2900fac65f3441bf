// Package httpfuzz sends random requests to every route of a real Appdor for a
// bounded time: random methods, paths, query strings, headers and bodies,
// built around real ids so that they reach past routing and authentication.
// Whatever arrives, Appdor answers with a 2xx, 3xx or a coded 4xx, or a 503
// with Retry-After: never another 5xx, never a panic, never a hang.
//
// APPDOR_FUZZ_DURATION (default 20s) bounds the run and APPDOR_FUZZ_SEED
// repeats one; every failure is reported with the request that caused it.
package httpfuzz

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/server"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

const api = "/api/v1"

func TestMain(m *testing.M) { testenv.Main(m) }

// route is one documented path and its methods.
type route struct {
	path    string // e.g. /tables/{table}/rows
	methods []string
}

// world is what the fuzzer builds its requests from: real ids of the realm
// it works in, of another realm, and ones made to be destroyed.
type world struct {
	tokens      []string // owner, editor, viewer of realm A
	otherToken  string   // owner of realm B
	apps        []string
	tables      []string
	doomed      map[string][]string // ids that DELETE and PATCH may destroy, by parameter
	fields      []string
	choiceNames []string
	rows        []string
	other       map[string]string // realm B's ids, by parameter
	fieldTypes  map[string]string // field id → type
}

func TestFuzzEveryRoute(t *testing.T) {
	duration := 20 * time.Second
	if v := os.Getenv("APPDOR_FUZZ_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "APPDOR_FUZZ_DURATION")
		duration = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("APPDOR_FUZZ_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "APPDOR_FUZZ_SEED")
		seed = s
	}
	t.Logf("seed %d (APPDOR_FUZZ_SEED=%d repeats this run), %s", seed, seed, duration)

	// The server's own log, to find panics and ERROR lines.
	var logMu sync.Mutex
	var logBuf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(lockedWriter{&logMu, &logBuf}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := testenv.Config(t)
	a, err := server.New(context.Background(), cfg, log)
	require.NoError(t, err)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(func() { srv.Close(); a.Close() })
	app := &testenv.App{App: a, URL: srv.URL, Tenancy: tenancy.New(testenv.Pool(t)), Config: cfg}

	routes := documentedRoutes(t, app)
	w := build(t, app)

	client := &http.Client{Timeout: 15 * time.Second}
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		failures []string
		total    atomic.Int64
	)
	deadline := time.Now().Add(duration)
	var wg sync.WaitGroup
	for worker := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(worker)))
			for time.Now().Before(deadline) {
				req, desc := w.request(rng, srv.URL, routes[rng.IntN(len(routes))])
				if req == nil {
					continue
				}
				started := time.Now()
				res, err := client.Do(req)
				total.Add(1)
				var problem string
				status := 0
				if err != nil {
					problem = fmt.Sprintf("no answer after %s: %v", time.Since(started).Round(time.Millisecond), err)
				} else {
					body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
					res.Body.Close()
					status = res.StatusCode
					switch {
					case status == http.StatusServiceUnavailable && res.Header.Get("Retry-After") == "":
						problem = "503 without Retry-After: " + string(body)
					case status >= 500 && status != http.StatusServiceUnavailable:
						problem = fmt.Sprintf("%d: %s", status, body)
					case status >= 400 && !coded(body) && req.Method != http.MethodHead:
						problem = fmt.Sprintf("%d without an error code: %q", status, body)
					}
				}
				mu.Lock()
				statuses[status]++
				if problem != "" && len(failures) < 25 {
					failures = append(failures, fmt.Sprintf("%.500s\n    request: %.1000s", problem, desc))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()

	codes := make([]int, 0, len(statuses))
	for c := range statuses {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var hist []string
	for _, c := range codes {
		hist = append(hist, fmt.Sprintf("%d: %d", c, statuses[c]))
	}
	t.Logf("%d requests over %d routes in %s; by status: %s", total.Load(), len(routes), duration, strings.Join(hist, ", "))
	for _, f := range failures {
		t.Error(f)
	}
	logMu.Lock()
	defer logMu.Unlock()
	for _, line := range strings.Split(logBuf.String(), "\n") {
		if strings.Contains(line, `"level":"ERROR"`) || strings.Contains(strings.ToLower(line), "panic") {
			t.Errorf("server logged: %s", line)
		}
	}
	require.Greater(t, total.Load(), int64(len(routes)), "the fuzzer sent too few requests to cover the routes")
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// coded says whether an error body carries Appdor's error code.
func coded(body []byte) bool {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	return json.Unmarshal(body, &e) == nil && e.Error.Code != ""
}

// documentedRoutes reads the routes from the server's OpenAPI document, so
// that a new route is fuzzed the day it is documented.
func documentedRoutes(t *testing.T, app *testenv.App) []route {
	res := app.Do(t, "GET", api+"/openapi.json", "", nil)
	require.Equal(t, 200, res.Status)
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	res.JSON(t, &doc)
	var routes []route
	for p, ops := range doc.Paths {
		r := route{path: p}
		for m := range ops {
			switch m {
			case "get", "post", "put", "patch", "delete":
				r.methods = append(r.methods, strings.ToUpper(m))
			}
		}
		sort.Strings(r.methods)
		routes = append(routes, r)
	}
	sort.Slice(routes, func(i, j int) bool { return routes[i].path < routes[j].path })
	require.NotEmpty(t, routes)
	return routes
}

var fieldTypes = []string{"text", "long_text", "number", "checkbox", "date", "datetime", "single_select", "multi_select", "email", "url", "link"}

// build makes realm A (an owner, an editor and a viewer, an app with two
// tables of every field type, rows) and realm B (the same, smaller), and a
// set of ids that destructive requests may use up.
func build(t *testing.T, app *testenv.App) *world {
	owner := app.NewTenant(t, tenancy.RoleOwner, nil)
	editor := app.AddMember(t, owner.RealmID, tenancy.RoleEditor, nil)
	viewer := app.AddMember(t, owner.RealmID, tenancy.RoleViewer, nil)
	other := app.NewTenant(t, tenancy.RoleOwner, nil)
	w := &world{
		tokens:     []string{owner.Token, editor.Token, viewer.Token},
		otherToken: other.Token,
		doomed:     map[string][]string{},
		other:      map[string]string{},
		fieldTypes: map[string]string{},
	}
	do := func(token, method, path string, body any, into any) {
		t.Helper()
		res := app.Do(t, method, api+path, token, body)
		require.Less(t, res.Status, 300, "%s %s: %s", method, path, res.Body)
		if into != nil {
			res.JSON(t, into)
		}
	}
	mkTable := func(token, appID, name string) (string, []map[string]any) {
		var tbl struct {
			ID     string           `json:"id"`
			Fields []map[string]any `json:"fields"`
		}
		var fields []map[string]any
		for _, ft := range fieldTypes {
			f := map[string]any{"name": "f " + ft, "type": ft}
			switch ft {
			case "single_select", "multi_select":
				f["options"] = map[string]any{"choices": []string{"red", "green", "b, c", "ü"}}
			case "number":
				f["options"] = map[string]any{"precision": 2}
			}
			if ft != "link" {
				fields = append(fields, f)
			}
		}
		do(token, "POST", "/apps/"+appID+"/tables", map[string]any{"name": name, "fields": fields}, &tbl)
		var link map[string]any
		do(token, "POST", "/tables/"+tbl.ID+"/fields", map[string]any{"name": "f link", "type": "link", "options": map[string]any{"table": tbl.ID}}, &link)
		return tbl.ID, append(tbl.Fields, link)
	}
	for _, name := range []string{"CRM", "Ops"} {
		var a struct {
			ID string `json:"id"`
		}
		do(owner.Token, "POST", "/apps", map[string]any{"name": name}, &a)
		w.apps = append(w.apps, a.ID)
	}
	for i, name := range []string{"People", "Deals", "Scratch"} {
		id, fields := mkTable(owner.Token, w.apps[i%2], name)
		if name == "Scratch" {
			w.doomed["table"] = append(w.doomed["table"], id)
			for _, f := range fields {
				w.doomed["field"] = append(w.doomed["field"], f["id"].(string))
			}
			continue
		}
		w.tables = append(w.tables, id)
		for _, f := range fields {
			fid := f["id"].(string)
			w.fields = append(w.fields, fid)
			w.fieldTypes[fid] = f["type"].(string)
		}
		var rows struct {
			Rows []struct {
				ID string `json:"id"`
			} `json:"rows"`
		}
		var batch []map[string]any
		for j := range 30 {
			batch = append(batch, map[string]any{"cells": map[string]any{fields[0]["id"].(string): fmt.Sprintf("row %d", j)}})
		}
		do(owner.Token, "POST", "/tables/"+id+"/rows", map[string]any{"rows": batch}, &rows)
		for _, r := range rows.Rows {
			w.rows = append(w.rows, r.ID)
		}
	}
	w.choiceNames = []string{"red", "green", "b, c", "ü", "purple"}
	for i := range 3 {
		var tok struct {
			ID string `json:"id"`
		}
		do(owner.Token, "POST", "/tokens", map[string]any{"name": fmt.Sprintf("spare %d", i)}, &tok)
		w.doomed["id"] = append(w.doomed["id"], tok.ID)
	}
	var b struct {
		ID string `json:"id"`
	}
	do(other.Token, "POST", "/apps", map[string]any{"name": "Theirs"}, &b)
	w.other["app"] = b.ID
	bt, bfields := mkTable(other.Token, b.ID, "Theirs")
	w.other["table"] = bt
	w.other["field"] = bfields[0]["id"].(string)
	var brows struct {
		Rows []struct {
			ID string `json:"id"`
		} `json:"rows"`
	}
	do(other.Token, "POST", "/tables/"+bt+"/rows", map[string]any{"rows": []map[string]any{{"cells": map[string]any{}}}}, &brows)
	w.other["row"] = brows.Rows[0].ID
	w.other["id"] = other.TokenID.String()
	return w
}

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

// junk is the strings a path parameter, a query value or a cell may be
// given: empty, huge, encoded, control characters, invalid UTF-8.
func junk(rng *rand.Rand) string {
	switch rng.IntN(14) {
	case 0:
		return ""
	case 1:
		return strings.Repeat("x", 1+rng.IntN(5000))
	case 2:
		return "a\x00b"
	case 3:
		return "\x01\x02\x1b[31m\x7f"
	case 4:
		return string([]byte{0xff, 0xfe, 'a', 0xc3})
	case 5:
		return "-1"
	case 6:
		return "99999999999999999999999999"
	case 7:
		return "null"
	case 8:
		return "'; DROP TABLE rows; --"
	case 9:
		return "../../etc/passwd"
	case 10:
		return "%00%ff%2e%2e"
	case 11:
		return "1e309"
	case 12:
		return "ü€𝄞\u202e"
	default:
		return uuid.NewString()
	}
}

// param fills a path parameter: mostly a real id (of the kind the
// parameter names), sometimes another realm's, a random uuid or junk.
// Destructive methods get ids made to be destroyed.
func (w *world) param(rng *rand.Rand, name, method string) string {
	n := rng.IntN(100)
	switch {
	case n < 10:
		return url.PathEscape(junk(rng))
	case n < 18:
		return uuid.NewString()
	case n < 28:
		if v, ok := w.other[name]; ok {
			return v
		}
	}
	destructive := method == "DELETE" || method == "PATCH"
	if ids := w.doomed[name]; len(ids) > 0 && (destructive || name == "id") {
		return pick(rng, ids)
	}
	switch name {
	case "app":
		return pick(rng, w.apps)
	case "table":
		return pick(rng, w.tables)
	case "field":
		return pick(rng, w.fields)
	case "row":
		return pick(rng, w.rows)
	}
	return uuid.NewString()
}

// value is a cell value for a field of type ft: mostly of a plausible
// shape, often of a wrong one.
func (w *world) value(rng *rand.Rand, ft string) any {
	switch rng.IntN(12) {
	case 0:
		return nil
	case 1:
		return junk(rng)
	case 2:
		return rng.NormFloat64() * 1e6
	case 3:
		return []any{junk(rng), 1, true}
	case 4:
		return map[string]any{"x": junk(rng)}
	case 5:
		return rng.IntN(2) == 0
	}
	switch ft {
	case "number":
		return pick(rng, []any{1.5, -3, 1e300, "12", 0.005, -0.0})
	case "checkbox":
		return pick(rng, []any{true, false, "true", 1})
	case "date":
		return pick(rng, []any{"2026-02-29", "2024-02-29", "0000-01-01", "9999-12-31", "2026-13-01", "yesterday"})
	case "datetime":
		return pick(rng, []any{"2026-12-01T10:00:00Z", "2026-12-01T10:00:00+14:00", "2026-12-01 10:00", "T"})
	case "single_select":
		return pick(rng, w.choiceNames)
	case "multi_select":
		return []any{pick(rng, w.choiceNames), pick(rng, w.choiceNames)}
	case "email":
		return pick(rng, []any{"ann@example.com", "ann@", "@", "a@b@c"})
	case "url":
		return pick(rng, []any{"https://example.com/x", "javascript:alert(1)", "http://", "ftp://x"})
	case "link":
		return []any{pick(rng, w.rows), uuid.NewString()}
	}
	return fmt.Sprintf("text %d", rng.IntN(1000))
}

func (w *world) cells(rng *rand.Rand) map[string]any {
	c := map[string]any{}
	for range rng.IntN(6) {
		var fid string
		switch rng.IntN(10) {
		case 0:
			fid = junk(rng)
		case 1:
			fid = uuid.NewString()
		default:
			fid = pick(rng, w.fields)
		}
		c[fid] = w.value(rng, w.fieldTypes[fid])
	}
	return c
}

// body is a JSON body shaped for path and method, then perhaps broken.
func (w *world) body(rng *rand.Rand, path, method string) []byte {
	var v any
	switch {
	case strings.HasSuffix(path, "/rows") && method == "DELETE":
		ids := []any{pick(rng, w.rows), uuid.NewString(), junk(rng)}
		v = map[string]any{"ids": ids[:1+rng.IntN(3)]}
		if rng.IntN(4) > 0 {
			v = map[string]any{"ids": []any{uuid.NewString()}} // keep the rows, mostly
		}
	case strings.HasSuffix(path, "/rows"):
		var rows []any
		for range 1 + rng.IntN(4) {
			r := map[string]any{"cells": w.cells(rng)}
			if method == "PATCH" {
				r["id"] = pick(rng, w.rows)
				r["version"] = pick(rng, []any{1, 0, -1, 1 << 62, "1", nil})
			}
			rows = append(rows, r)
		}
		v = map[string]any{"rows": rows}
	case strings.HasSuffix(path, "/fields") || strings.Contains(path, "/fields/"):
		v = map[string]any{"name": pick(rng, []any{"f " + junk(rng), junk(rng), 7}), "type": pick(rng, append([]string{junk(rng)}, fieldTypes...)),
			"options": map[string]any{"precision": pick(rng, []any{-1, 2, 11, "2", nil}), "choices": []any{junk(rng), "red", 3},
				"table": pick(rng, []any{pick(rng, w.tables), w.other["table"], junk(rng)})},
			"position": pick(rng, []any{0, -5, 1 << 40, 2.5})}
	case strings.HasSuffix(path, "/tables") || strings.HasSuffix(path, "/apps"):
		v = map[string]any{"name": pick(rng, []any{"n " + junk(rng), junk(rng), nil, 1}),
			"fields": []any{map[string]any{"name": junk(rng), "type": pick(rng, fieldTypes)}}}
	case strings.HasPrefix(path, "/tokens"):
		v = map[string]any{"name": junk(rng), "requests_per_minute": pick(rng, []any{1, 0, -1, nil, 1e12, "60"})}
	case path == "/auth/login":
		v = map[string]any{"email": pick(rng, []any{"nobody@example.test", junk(rng), 3}), "password": junk(rng)}
	default:
		v = map[string]any{"x": junk(rng)}
	}
	b, _ := json.Marshal(v)
	switch rng.IntN(10) {
	case 0:
		return b[:rng.IntN(len(b)+1)] // truncated
	case 1:
		return []byte(junk(rng)) // not JSON
	case 2:
		return bytes.Repeat([]byte("["), 1+rng.IntN(20000)) // deep
	case 3:
		return bytes.ReplaceAll(b, []byte(`"`), []byte(`'`))
	}
	return b
}

// csvBody is a CSV import body with quotes, short and long records.
func csvBody(rng *rand.Rand) []byte {
	lines := []string{pick(rng, []string{"f text,f number", "f text", "", "a\"b,c", "f text,f text,f checkbox"})}
	for range rng.IntN(20) {
		lines = append(lines, pick(rng, []string{"ok,1", "a\"b,3", "\"unterminated,2", ",,,,", "x", "=1+1,2", junk(rng) + ",1"}))
	}
	return []byte(strings.Join(lines, pick(rng, []string{"\n", "\r\n", "\r"})))
}

var madeUpMethods = []string{"FOO", "get", "BREW", "PROPFIND", "TRACE", "OPTIONS", "HEAD", "CONNECT"}

// request is one random request to r, and how to repeat it by hand.
func (w *world) request(rng *rand.Rand, base string, r route) (*http.Request, string) {
	method := pick(rng, r.methods)
	switch n := rng.IntN(100); {
	case n < 8:
		method = pick(rng, madeUpMethods)
	case n < 16:
		method = pick(rng, []string{"GET", "POST", "PUT", "PATCH", "DELETE"})
	}
	path := r.path
	for strings.Contains(path, "{") {
		i, j := strings.Index(path, "{"), strings.Index(path, "}")
		path = path[:i] + w.param(rng, path[i+1:j], method) + path[j+1:]
	}
	switch rng.IntN(30) {
	case 0:
		path += "/"
	case 1:
		path = strings.Replace(path, "/", "//", 1)
	case 2:
		path += "/" + url.PathEscape(junk(rng))
	}
	q := url.Values{}
	for range rng.IntN(4) {
		key := pick(rng, []string{"limit", "cursor", "sort", "filter", "q", "raw", "format", junk(rng)})
		var val string
		switch key {
		case "limit":
			val = pick(rng, []string{"1", "1000", "1001", "0", "-1", "abc", "1e3", ""})
		case "sort":
			val = pick(rng, []string{pick(rng, w.fields), "-" + pick(rng, w.fields), pick(rng, w.fields) + ",-" + pick(rng, w.fields), junk(rng)})
		case "filter":
			val = pick(rng, w.fields) + ":" + pick(rng, []string{"eq", "ne", "lt", "lte", "gt", "gte", "contains", "empty", "notempty", "in", junk(rng)}) + ":" + junk(rng)
		default:
			val = junk(rng)
		}
		q.Add(key, val)
	}
	target := base + api + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	var body []byte
	contentType := "application/json"
	if method != "GET" && method != "HEAD" && rng.IntN(10) > 0 {
		if strings.HasSuffix(r.path, "/csv") {
			body, contentType = csvBody(rng), "text/csv"
		} else {
			body = w.body(rng, r.path, method)
		}
	}
	if rng.IntN(10) == 0 {
		contentType = pick(rng, []string{"", "text/plain", "multipart/form-data; boundary=x", "application/json; charset=latin1", junk(rng)})
	}
	req, err := http.NewRequest(method, target, bytes.NewReader(body))
	if err != nil {
		return nil, "" // a method or URL net/http will not send
	}
	if contentType != "" && validHeader(contentType) {
		req.Header.Set("Content-Type", contentType)
	}
	auth := "Bearer " + pick(rng, w.tokens)
	switch rng.IntN(20) {
	case 0:
		auth = ""
	case 1:
		auth = "Bearer " + w.otherToken
	case 2:
		auth = "Bearer apd_" + junk(rng)
	case 3:
		auth = pick(rng, []string{"Basic YTpi", "Bearer", "bearer " + w.tokens[0], strings.Repeat("B", 8000)})
	}
	if auth != "" && validHeader(auth) {
		req.Header.Set("Authorization", auth)
	}
	for _, h := range []string{"X-Request-Id", "Idempotency-Key", "X-Appdor-Realm", "X-CSRF-Token", "Accept", "X-Forwarded-For", "X-Forwarded-Proto"} {
		if rng.IntN(8) == 0 {
			if v := junk(rng); validHeader(v) {
				req.Header.Set(h, v)
			}
		}
	}
	desc := fmt.Sprintf("%s %s (Authorization %d bytes, Content-Type %q, body %d bytes: %.200q)", method, strings.TrimPrefix(target, base),
		len(auth), contentType, len(body), body)
	return req, desc
}

// validHeader says whether net/http will send v as a header value.
func validHeader(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
