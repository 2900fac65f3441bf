package grid_test

import (
	"context"
	"net/http"
	"runtime"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor/grid"
	"github.com/appdor/appdor/rls"
	"github.com/appdor/appdor/server"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// countingWriter is a ResponseWriter that keeps the status and the length of
// the body and nothing else, so that a benchmark's allocations are the
// server's, not a recorder's growing buffer.
type countingWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *countingWriter) Header() http.Header { return w.h }
func (w *countingWriter) WriteHeader(s int)   { w.status = s }
func (w *countingWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(b)
	return len(b), nil
}

func (w *countingWriter) reset() {
	clear(w.h)
	w.status, w.n = 0, 0
}

// BenchmarkReadPage200 is the server-side cost of a storm realm's read, 200
// rows of the 8-field benchmark table, in process and one at a time: through
// the grid handler alone (RLS transaction, scan, encode) and through the whole
// Echo stack (request id, access log, authentication from the token cache,
// rate limiter, fairness gate). Its allocations are deterministic where its
// times are not; profile it with
//
//	go test ./grid -run '^$' -bench BenchmarkReadPage200 -benchmem -cpuprofile cpu.out -memprofile mem.out
func BenchmarkReadPage200(b *testing.B) {
	app := testenv.NewApp(b, func(c *server.Config) {
		c.RealmRequestsPerMinute = 1 << 30
	})
	tn := app.NewTenant(b, tenancy.RoleEditor, nil)
	tableID := benchTable(b, app, tn.Token)
	path := "/api/v1/tables/" + tableID + "/rows?limit=200"

	e := gridAlone(b, tn)
	run := func(b *testing.B, h http.Handler, token string) { serveReads(b, h, path, token) }
	b.Run("grid", func(b *testing.B) { run(b, e, "") })
	b.Run("stack", func(b *testing.B) { run(b, app.Handler(), tn.Token) })
}

// gridAlone is the grid handler alone, for tn's member: no authentication,
// limiter, fairness, access log or metrics in front of it.
func gridAlone(b *testing.B, tn testenv.Tenant) http.Handler {
	e := echo.New()
	principal := &tenancy.Principal{RealmID: tn.RealmID, UserID: tn.UserID, Role: tenancy.RoleEditor, TokenID: uuid.New()}
	g := e.Group("/api/v1", func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			tenancy.WithPrincipal(c, principal)
			return next(c)
		}
	})
	grid.New(rls.New(testenv.Pool(b), 0, 0)).Routes(g)
	return e
}

// serveReads benchmarks GET path through h, with token as the bearer when
// it is not empty, requiring a 200 each time; it reports the body's size and
// the collections per thousand reads (what GOGC trades against memory).
func serveReads(b *testing.B, h http.Handler, path, token string) {
	req, err := http.NewRequest(http.MethodGet, path, nil)
	if err != nil {
		b.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	w := &countingWriter{h: http.Header{}}
	h.ServeHTTP(w, req) // warm the token cache and the field cache
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		w.reset()
		h.ServeHTTP(w, req)
		if w.status != http.StatusOK {
			b.Fatalf("status %d", w.status)
		}
	}
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(w.n), "body-bytes")
	b.ReportMetric(float64(after.NumGC-before.NumGC)*1000/float64(b.N), "gc/1k-reads")
}

// BenchmarkReadStages is the first 100-row page of the 8-field benchmark
// table, in process and one at a time, with one stage taken away at a time,
// so that a stage's cost is the difference between two lines of one run:
//
//   - stack: the whole Echo stack (request id, access log at INFO, metrics,
//     authentication from the token cache, the limiter's Redis round trip,
//     the fairness gate, the grid handler);
//   - stack-fields-2: the same read projected onto two of the eight fields
//     (fields=Name,Amount);
//   - stack-limiter-off, stack-fairness-off: without the limiter, without
//     the fairness controller;
//   - grid: the grid handler alone (the RLS-scoped query, scan, encode);
//   - rls-select-1: one statement as the realm (the RLS setup and a round
//     trip), and pool-select-1: the same statement on the pool without it.
//
// Run it with
//
//	go test ./grid -run '^$' -bench BenchmarkReadStages -benchmem -count 6
func BenchmarkReadStages(b *testing.B) {
	apps := map[string]*testenv.App{
		"stack": testenv.NewApp(b, func(c *server.Config) { c.RealmRequestsPerMinute = 1 << 30 }),
		"stack-limiter-off": testenv.NewApp(b, func(c *server.Config) {
			c.RealmRequestsPerMinute = 1 << 30
			c.LimiterOff = true
		}),
		"stack-fairness-off": testenv.NewApp(b, func(c *server.Config) {
			c.RealmRequestsPerMinute = 1 << 30
			c.Fairness.Off = true
		}),
	}
	type target struct {
		h     http.Handler
		path  string
		token string
	}
	targets := map[string]target{}
	var realm uuid.UUID
	var gridPath string
	for name, app := range apps {
		tn := app.NewTenant(b, tenancy.RoleEditor, nil)
		targets[name] = target{app.Handler(), "/api/v1/tables/" + benchTable(b, app, tn.Token) + "/rows?limit=100", tn.Token}
		if name == "stack" {
			realm, gridPath = tn.RealmID, targets[name].path
			e := gridAlone(b, tn)
			targets["grid"] = target{e, gridPath, ""}
			targets["stack-fields-2"] = target{app.Handler(), gridPath + "&fields=Name,Amount", tn.Token}
		}
	}
	for _, name := range []string{"stack", "stack-fields-2", "stack-limiter-off", "stack-fairness-off", "grid"} {
		tg := targets[name]
		b.Run(name, func(b *testing.B) { serveReads(b, tg.h, tg.path, tg.token) })
	}
	db := rls.New(testenv.Pool(b), 0, 0)
	ctx := context.Background()
	noop := func(rows pgx.Rows) error {
		for rows.Next() {
		}
		return rows.Err()
	}
	b.Run("rls-select-1", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := db.Query(ctx, realm, noop, "SELECT 1"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pool-select-1", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rows, err := testenv.Pool(b).Query(ctx, "SELECT 1")
			if err != nil {
				b.Fatal(err)
			}
			if err := noop(rows); err != nil {
				b.Fatal(err)
			}
		}
	})
}
