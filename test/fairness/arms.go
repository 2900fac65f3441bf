package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// victimFor runs the victim's open-model reads into rec until the returned
// stop is called; stop waits for the last answers.
func victimFor(ctx context.Context, p plan, rec *recorder, base string, victim *tenant) (stop func()) {
	vctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		openArm(vctx, rec, "victim", p.VictimRate, vegeta.Target{Method: "GET", URL: rowsURL(base, victim, 100), Header: bearer(victim.Token)})
	}()
	return func() { cancel(); wg.Wait() }
}

// importOutcome is what the import arm measured.
type importOutcome struct {
	rec              *recorder
	baseline, during stats
	Code             int           `json:"status"`
	ErrCode          string        `json:"error_code,omitempty"`
	Message          string        `json:"message,omitempty"`
	Inserted         int           `json:"inserted"`
	Failed           int           `json:"failed"`
	Counted          int64         `json:"counted"` // rows of the table counted through the API afterwards
	Retries          int           `json:"retries"` // 429s before any row was read, retried after Retry-After
	Duration         time.Duration `json:"-"`
}

func (o *importOutcome) rowsPerSecond() float64 {
	return ratio(float64(o.Inserted), o.Duration.Seconds())
}

// csvBody is rows rows of CSV for an import. The bytes are made once per
// row count (csvBytes) and kept, so that the load generator, which shares the
// cores with the server, spends nothing making them while the victim is
// measured, as no real uploader would. Made while sent, they cost the harness
// about 900 collections in a 50 s import, made before it about 90; the
// victim's p99 during the import stayed 17-23 ms either way, so that tail is
// the server's and the database's.
func csvBody(rows int) io.ReadCloser { return io.NopCloser(bytes.NewReader(csvBytes(rows))) }

var csvMade sync.Map // row count -> []byte

// csvBytes makes rows rows of CSV, or returns those made before.
func csvBytes(rows int) []byte {
	if b, ok := csvMade.Load(rows); ok {
		return b.([]byte)
	}
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	_ = w.Write([]string{"Name", "Notes", "Amount", "Done", "Due", "Status", "Email", "Site"})
	rng := rand.New(rand.NewPCG(11, 13))
	day := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for k := range rows {
		word := words[rng.IntN(len(words))]
		_ = w.Write([]string{
			fmt.Sprintf("%s import %d", word, k),
			fmt.Sprintf("Imported %s lead; ask about the %s plan.", word, words[k%len(words)]),
			strconv.FormatFloat(float64(rng.IntN(1_000_000))/100, 'f', 2, 64),
			strconv.FormatBool(k%3 == 0),
			day.AddDate(0, 0, k%365).Format(time.DateOnly),
			[]string{"new", "open", "won", "lost"}[k%4],
			fmt.Sprintf("lead%d@%s.example", k, word),
			fmt.Sprintf("https://%s.example/lead/%d", word, k),
		})
	}
	w.Flush() // a bytes.Buffer does not fail
	csvMade.Store(rows, buf.Bytes())
	return buf.Bytes()
}

// runImport: the victim reads at its open-model rate through a warm-up and a
// baseline; then realm imp imports ImportRows rows by CSV (one streamed
// request, written by the server in batches that run as background work),
// and the victim's latency is measured until the import answers. Afterwards
// the table's rows are counted through the API.
func runImport(ctx context.Context, p plan, base string, victim, imp *tenant) *importOutcome {
	csvBytes(p.ImportRows) // before anything is measured
	rec := newRecorder()
	stop := victimFor(ctx, p, rec, base, victim)
	rec.begin("warmup")
	sleepCtx(ctx, p.Warmup/5)
	rec.begin("baseline")
	sleepCtx(ctx, p.Baseline)
	progress("import", "baseline", rec, "victim")

	rec.begin("import")
	out := importCSV(ctx, p, base, imp, p.ImportRows)
	out.rec = rec
	stop()
	rec.end()
	progress("import", "import", rec, "victim")
	fmt.Printf("import   %d rows: status %d in %.1fs (%.0f rows/s), inserted %d, failed %d %s\n",
		p.ImportRows, out.Code, out.Duration.Seconds(), out.rowsPerSecond(), out.Inserted, out.Failed, out.Message)

	code, body, err := apiCall(ctx, "GET", base+"/api/v1/tables/"+imp.TableID+"/count", imp.Token, nil)
	var n struct{ Count int64 }
	if err == nil && code == 200 && json.Unmarshal(body, &n) == nil {
		out.Counted = n.Count
	} else {
		out.Counted = -1
		fmt.Printf("import   counting the rows: %d %.200s %v\n", code, body, err)
	}
	out.baseline = summarize(rec.sel("victim", "baseline"))
	out.during = summarize(rec.sel("victim", "import"))
	return out
}

// settle vacuums and analyzes the run's database and checkpoints, best
// effort, so that the aftermath of a bulk write (autovacuum, a checkpoint)
// does not land in a later arm's phases, and the planner knows the rows
// written: after the seed, as autovacuum would have done on a server in use
// (a table never analyzed is estimated at a row or two, and a batch patch of
// 100 rows on it scanned every row of its table per patched row), and after
// the import.
func (s *stack) settle(ctx context.Context, after string) {
	start := time.Now()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "VACUUM (ANALYZE)")
	if err == nil {
		_, err = conn.Exec(ctx, "CHECKPOINT")
	}
	if err != nil {
		fmt.Println("harness: settling the database:", err)
	}
	fmt.Printf("harness: database vacuumed after the %s (%.1fs)\n", after, time.Since(start).Seconds())
}

// loneOutcome is what the lone-realm arm measured on one server.
type loneOutcome struct {
	rec     *recorder
	arm     closedStats
	latency stats
}

func (o *loneOutcome) throughput() float64 { return ratio(float64(o.arm.OK), o.arm.Elapsed.Seconds()) }

// loneRounds is how many rounds the lone-realm arm alternates between the
// two servers, in the order on, off, off, on, on, off: a ratio of two
// throughputs measured minutes apart on a shared machine measured the
// machine (0.64 to 1.1 for the same code); rounds in one run share its
// drift.
const loneRounds = 6

// runLone: one realm alone on two servers at once, the controller on (on)
// and off (off): LoneClients closed-loop clients of one token reading 100
// rows, honoring Retry-After. A two-second warm-up on each (by its end the
// realms of the arm before have been idle longer than the controller's
// activity window), then Lone on each, measured in alternating rounds.
func runLone(ctx context.Context, p plan, on, off string, t *tenant) (onOut, offOut *loneOutcome) {
	onOut, offOut = &loneOutcome{rec: newRecorder()}, &loneOutcome{rec: newRecorder()}
	outs := map[string]*loneOutcome{on: onOut, off: offOut}
	for _, base := range []string{off, on} {
		rec := outs[base].rec
		rec.begin("warmup")
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		closedArm(wctx, rec, "lone", p.LoneClients, 0, 0, true, rowsURL(base, t, 100), t.Token)
		cancel()
		rec.begin("lone")
	}
	round := p.Lone / (loneRounds / 2)
	for i := range loneRounds {
		base := on
		if i%4 == 1 || i%4 == 2 {
			base = off
		}
		o := outs[base]
		rctx, cancel := context.WithTimeout(ctx, round)
		st := closedArm(rctx, o.rec, "lone", p.LoneClients, 0, 0, true, rowsURL(base, t, 100), t.Token)
		cancel()
		o.arm.Requests += st.Requests
		o.arm.OK += st.OK
		o.arm.Refused += st.Refused
		o.arm.Errors += st.Errors
		o.arm.Elapsed += st.Elapsed
	}
	for name, o := range map[string]*loneOutcome{"lone-on": onOut, "lone-off": offOut} {
		o.rec.end()
		o.latency = summarize(o.rec.sel("lone", "lone"))
		fmt.Printf("%-8s %d clients: %.0f reads/s, %d refused, %d errors\n", name, p.LoneClients, o.throughput(), o.arm.Refused, o.arm.Errors)
	}
	return onOut, offOut
}

// unauthOutcome is what the unauthenticated arm measured.
type unauthOutcome struct {
	rec              *recorder
	baseline, during stats
	bogus            stats
	byCode           map[string]int // the bogus answers by HTTP status (or "transport")
	// Pool acquires in the baseline and the bogus phase, the 200s the
	// server answered in each (the victim's reads), and the acquires
	// charged to the bogus requests.
	baselineAcquires, bogusAcquires float64
	baselineServed, bogusServed     float64
	perServed, charged              float64
}

// per100 is the pool acquires the bogus requests cost per 100 of them.
func (o *unauthOutcome) per100() float64 { return 100 * ratio(o.charged, float64(o.bogus.N)) }

// bogusTargeter makes each request a read of the victim's table with a
// fresh random bearer token shaped like a real one ("apd_" and 32 random
// bytes, base64url): it matches no token, so no answer can be cached by it.
func bogusTargeter(url string) vegeta.Targeter {
	return func(t *vegeta.Target) error {
		var b [32]byte
		for i := 0; i < len(b); i += 8 {
			binary.LittleEndian.PutUint64(b[i:], rand.Uint64())
		}
		t.Method, t.URL = "GET", url
		t.Header = http.Header{"Authorization": []string{"Bearer apd_" + base64.RawURLEncoding.EncodeToString(b[:])}}
		return nil
	}
}

// runUnauth: the victim reads at its rate through a warm-up and a baseline;
// then BogusRate requests a second with random bogus tokens arrive beside it
// for Bogus (open model).
//
// What the bogus requests cost the pool: appdor_db_pool_acquires_total is
// read at the start and end of the baseline and at the end of the bogus
// phase, with the server's count of the 200s it answered (the victim's
// reads: a bogus request is answered 401 or 429). The baseline, the victim
// alone, gives the acquires per 200 (one, plus whatever the server does on
// its own meanwhile); the bogus phase's acquires less that many per 200 in
// the phase are charged to the bogus requests. Both counts are the server's
// own, read at the same moments. Counted by the harness's send times, the
// victim's answers put a request or two at each edge on the other side, and
// in one full run of ten the bogus requests were charged 1.10 acquires per
// 100 when 16 of 3,000 had been looked up; with the server's counts, four
// runs charged them exactly their lookups (16 or 17).
func runUnauth(ctx context.Context, p plan, base string, victim *tenant) (*unauthOutcome, error) {
	rec := newRecorder()
	stop := victimFor(ctx, p, rec, base, victim)
	defer stop()
	rec.begin("warmup")
	sleepCtx(ctx, p.Warmup/5)
	m0, err := scrapeAll(ctx, base)
	if err != nil {
		return nil, err
	}
	rec.begin("baseline")
	sleepCtx(ctx, p.Baseline)
	m1, err := scrapeAll(ctx, base)
	if err != nil {
		return nil, err
	}
	progress("unauth", "baseline", rec, "victim")

	rec.begin("bogus")
	bctx, cancel := context.WithTimeout(ctx, p.Bogus)
	openArmTargeter(bctx, rec, "bogus", p.BogusRate, bogusTargeter(rowsURL(base, victim, 100)))
	cancel()
	rec.begin("after")
	m2, err := scrapeAll(ctx, base)
	if err != nil {
		return nil, err
	}
	stop()
	rec.end()
	progress("unauth", "bogus", rec, "victim", "bogus")

	out := &unauthOutcome{rec: rec, byCode: map[string]int{}}
	out.baseline = summarize(rec.sel("victim", "baseline"))
	out.during = summarize(rec.sel("victim", "bogus"))
	bogus := rec.sel("bogus", "bogus")
	out.bogus = summarize(bogus)
	for _, s := range bogus {
		key := strconv.Itoa(s.Code)
		if s.Failed != "" {
			key = "transport"
		}
		out.byCode[key]++
	}
	out.baselineAcquires = m1.poolAcquires() - m0.poolAcquires()
	out.bogusAcquires = m2.poolAcquires() - m1.poolAcquires()
	out.baselineServed, out.bogusServed = m1.served()-m0.served(), m2.served()-m1.served()
	out.perServed = 1
	if out.baselineServed > 0 {
		out.perServed = out.baselineAcquires / out.baselineServed
	}
	out.charged = out.bogusAcquires - out.perServed*out.bogusServed
	fmt.Printf("unauth   bogus answers %v; pool acquires: baseline %.0f for %.0f answered 200 (%.3f each), bogus phase %.0f for %.0f answered 200 and %d bogus: %.2f per 100 bogus\n",
		out.byCode, out.baselineAcquires, out.baselineServed, out.perServed, out.bogusAcquires, out.bogusServed, out.bogus.N, out.per100())
	return out, nil
}
