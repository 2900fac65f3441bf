// Command fairness is Appdor's storm harness (`npm run test:fairness`). It
// builds and starts the real appdor binary on a fresh database, seeds realms
// through the CLI and the public API, and drives tagged load over real HTTP.
// On the server with the fairness controller on:
//
//   - storm: a victim realm's light reads at a steady open-model rate while a
//     storm realm runs 3,000 heavy reads (for at least 6 s) from 60
//     concurrent workers;
//   - noisy-agent: editors of two realms at work while an agent token capped
//     at 60 a minute tries 600 requests a second;
//   - many: sixteen storm realms at once beside one quiet realm;
//   - lone: one realm alone, 16 closed-loop clients of one token reading
//     100 rows, which must not be refused, in rounds alternating with the
//     same load on the second server (below);
//   - import: a realm imports 100,000 rows by CSV (one streamed request,
//     written as background work) while the victim reads; every row must
//     arrive;
//   - unauth: 500 requests a second with random bogus bearer tokens beside
//     the victim, which must cost the pool (almost) nothing;
//   - automation-storm: realm S imports 100,000 rows by CSV and patches rows
//     in batches, on a table whose automations update the rows they fire on
//     and send signed webhooks to a sink in the harness, while realm B sends
//     the storm's API burst; realm Q reads at the victim's rate and writes ten
//     rows a second, each firing a webhook of its own. Q's read p99 and its
//     automation latency (its write's answer to the sink's receipt) are held
//     to their baselines; every Q write must reach the sink under exactly one
//     webhook-id, and S's events must all be delivered within a drain;
//   - live: twenty realms hold 2,001 event streams, one of them its whole
//     cap of 500, and that realm writes 1,000 rows a second in batches of
//     100 while the victim reads: the victim's p99 is held to its baseline,
//     every batch must reach every one of the writer's streams, and the
//     streams' memory, the server's CPU and the delivery delay are reported;
//   - wired: the controller dispatched the storm realm's work and queued
//     some of it for a seat.
//
// And on a second server with the controller off (APPDOR_FAIRNESS=off):
//
//   - control: the storm again, which must break 2.0, or the harness cannot
//     tell a working controller from a missing one;
//   - floor: the storm with one read at a time, what two cores allow at best
//     for that policy; the single-storm and sixteen-storm bounds are
//     max(2.0, 1.25 × the floor's ratio) of the same run;
//   - automation-storm again, which must break one of Q's bounds;
//   - lone: the lone realm's rounds beside those on the first server (both
//     servers run during that arm), the throughput the controller-on figure
//     is held to (≥ 90%).
//
// It computes its own verdict into test/fairness/results/latest.json (and a
// timestamped copy), draws each arm's latency over time with the phases
// marked, and exits non-zero when a gate does not hold. With -gate wiring
// (make test-wiring) only the gates that do not depend on a quiet machine decide:
// the controller is on the request path, the control run breaks the bound,
// the agent is limited, the import completes whole, the lone realm is not
// refused, bogus tokens cost no pool; the latency bounds are reported.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"gonum.org/v1/plot/plotter"
)

// Bounds of the gates.
const (
	stormBound    = 2.0  // victim p99 in storm ÷ baseline, unless the floor says more
	floorFactor   = 1.25 // ... the bound is then floorFactor × the floor's ratio
	controlBound  = 2.0  // the control run must break this
	recoveryBound = 1.5  // victim p99 in recovery ÷ baseline
	steadyBound   = 10.0 // a baseline's p99 ÷ its p50: beyond it, the baseline stalled
	noiseBound    = 2.0  // editors' p95 under noise ÷ baseline
	agentRefused  = 0.9  // the agent's refused share must exceed this
	loneShare     = 0.9  // lone realm's throughput, controller on ÷ off
	bogusPer100   = 1.0  // pool acquires per 100 bogus-token requests
	loneCeiling   = 6_000_000
)

var (
	quick   = flag.Bool("quick", false, "a short run to check the harness itself; its verdict proves nothing")
	only    = flag.String("only", "", "run just this scenario (storm, noisy, many, floor, import, lone, unauth) and print its phases, with no verdict: for tuning")
	workers = flag.Int("storm-workers", 0, "with -only storm: the storm realm's concurrent workers instead of 60 (with APPDOR_FAIRNESS=off and 1 or 2 workers, what a controller admitting that many storm reads at a time could at best give the victim; -only floor does this on a server of its own)")
	keep    = flag.Bool("keep-database", false, "keep the run's database afterwards for inspection (its name is printed), instead of dropping it")
	hold    = flag.Bool("hold-streams", false, "run as the live arm's stream holder (the harness starts it itself): open the event streams described on standard input, report on standard output, drain them until standard input closes")
	mode    = flag.String("gate", "all", "all: every gate decides the run; wiring: only the gates that show the controller on the request path and the harness able to tell a missing one decide, the latency bounds are reported (make test-wiring, for a machine too busy to hold them)")
)

func main() {
	flag.Parse()
	if *hold {
		if err := holdStreams(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "harness: holding streams:", err)
			os.Exit(2)
		}
		return
	}
	if *mode != "all" && *mode != "wiring" {
		fmt.Fprintf(os.Stderr, "harness: -gate %q: expected all or wiring\n", *mode)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, serverDied = context.WithCancelCause(ctx)
	code, err := run(ctx)
	if cause := context.Cause(ctx); errors.Is(cause, errServerDied) {
		err = cause // whatever the arms made of their cancelled context
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

type gate struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Bound string  `json:"bound"`
	Held  bool    `json:"held"`
	// Reported gates are measured and shown but do not decide this run
	// (-gate wiring).
	Reported bool `json:"reported,omitempty"`
	// Info lines are measurements shown beside the gates (the floor that
	// sets the latency bound); they decide nothing.
	Info bool `json:"info,omitempty"`
}

// wiring names the gates that decide a -gate wiring run: the storm ran and
// was refused, the agent was limited with well-formed answers, the
// controller's counters moved, the control run broke the bound (so the
// harness can tell a working controller from a missing one), the import
// completed with every row, the lone realm was not refused, and bogus tokens
// did not reach the pool. They do not depend on how quiet the machine is.
// The latency bounds do: on a shared 2-core machine the victim's p99 is
// 1.5–1.8× its baseline with a storm of one read at a time and no controller
// at all (the floor arm measures it in each run), so make test reports them
// and `npm run test:fairness` (-gate all) decides on them. The lone realm's
// throughput ratio is a 5-second closed-loop figure on a shared machine:
// reported too.
var wiring = map[string]bool{
	"victim samples in baseline":                          true,
	"victim samples in storm":                             true,
	"storm reads completed":                               true,
	"agent refused share":                                 true,
	"agent malformed 429s":                                true,
	"control (fairness off) breaks the bound":             true,
	"wired: storm realm dispatched counter moved":         true,
	"wired: storm realm waited for seats":                 true,
	"import completes (2xx)":                              true,
	"import rows all there":                               true,
	"lone: refusals with the controller on":               true,
	"unauth: pool acquires per 100 bogus requests":        true,
	"automation: Q events not delivered once":             true,
	"automation: Q automation samples in baseline":        true,
	"automation: Q automation samples in storm":           true,
	"automation: S import completes":                      true,
	"automation: webhooks with a bad signature":           true,
	"automation: control (fairness off) breaks a Q bound": true,
	"live: streams open":                                  true,
	"live: batches a writer stream never heard of":        true,
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// latencyBound is the bound of the single-storm and sixteen-storm gates:
// 2.0, or floorFactor × the floor's ratio when that is higher (the machine
// cannot do better than the floor, whatever the controller).
type latencyBound struct {
	Value      float64 `json:"value"`
	Applied    string  `json:"applied"` // "2.0" or "1.25×floor"
	FloorRatio float64 `json:"floor_ratio"`
}

func boundFrom(floorRatio float64) latencyBound {
	b := latencyBound{Value: stormBound, Applied: "2.0", FloorRatio: floorRatio}
	if f := floorFactor * floorRatio; f > stormBound {
		b.Value, b.Applied = f, "1.25×floor"
	}
	return b
}

func (b latencyBound) String() string {
	if b.Applied == "2.0" {
		return fmt.Sprintf("<= %.2f (2.0)", b.Value)
	}
	return fmt.Sprintf("<= %.2f (1.25×floor %.2f)", b.Value, b.FloorRatio)
}

// realms are the seeded tenants.
type realms struct {
	victim, storm, importer, lone *tenant
	autoS, autoQ                  *tenant // the automation-storm scenario's S and Q
	liveWriter                    *tenant // the live arm's writing realm
	liveHolders                   []*tenant
	storms                        []*tenant
	editorsA                      []string
	agentToken                    string
}

// seed makes the realms the chosen arms need, through srv.
func (s *stack) seed(ctx context.Context, p plan, base string, want func(string) bool) (*realms, error) {
	started := time.Now()
	fmt.Println("harness: seeding realms (2,000 rows each)")
	r := &realms{}
	var err error
	if r.victim, err = s.seedTenant(ctx, base, "victim", 2000, 0); err != nil {
		return nil, err
	}
	if r.storm, err = s.seedTenant(ctx, base, "storm", 2000, 0); err != nil {
		return nil, err
	}
	if want("many") {
		for i := range p.ManyRealms {
			t, err := s.seedTenant(ctx, base, fmt.Sprintf("storm%02d", i+1), 2000, 0)
			if err != nil {
				return nil, err
			}
			r.storms = append(r.storms, t)
		}
	}
	if want("import") {
		// A fresh, empty table: afterwards it holds exactly the imported rows.
		if r.importer, err = s.seedTenant(ctx, base, "importer", 0, 0); err != nil {
			return nil, err
		}
	}
	if want("lone") {
		// Its own ceiling well above what 16 clients can ask for: the arm
		// measures the fairness controller, not the realm's rate limit.
		if r.lone, err = s.seedTenant(ctx, base, "lone", 2000, loneCeiling); err != nil {
			return nil, err
		}
	}
	if want("automation-storm") {
		if r.autoS, err = s.seedTenant(ctx, base, "autoS", 2000, 0); err != nil {
			return nil, err
		}
		// Q's writer sets each of Q's rows once, in the on arm and then the
		// control arm: at ten a second, an on arm whose storm lasts minutes
		// used all of 2,000 and left the control arm none. Q reads the first
		// 100-row page, so the table's size does not change its reads.
		if r.autoQ, err = s.seedTenant(ctx, base, "autoQ", 5000, 0); err != nil {
			return nil, err
		}
	}
	if want("live") {
		// Empty tables: the arm writes its own rows.
		if r.liveWriter, err = s.seedTenant(ctx, base, "livewriter", 0, 0); err != nil {
			return nil, err
		}
		for i := range p.LiveRealms - 1 {
			t, err := s.seedTenant(ctx, base, fmt.Sprintf("live%02d", i+1), 0, 0)
			if err != nil {
				return nil, err
			}
			r.liveHolders = append(r.liveHolders, t)
		}
	}
	if want("noisy") {
		r.editorsA = []string{r.victim.Token, ""}
		if r.editorsA[1], err = s.token(ctx, r.victim, "editor 2", 0); err != nil {
			return nil, err
		}
		if r.agentToken, err = s.token(ctx, r.victim, "agent", 60); err != nil {
			return nil, err
		}
	}
	fmt.Printf("harness: seeded in %.0fs\n", time.Since(started).Seconds())
	s.settle(ctx, "seed")
	return r, nil
}

func run(ctx context.Context) (int, error) {
	adminURL, redisURL := os.Getenv("APPDOR_TEST_DATABASE_URL"), os.Getenv("APPDOR_TEST_REDIS_URL")
	if adminURL == "" || redisURL == "" {
		return 0, fmt.Errorf("set APPDOR_TEST_DATABASE_URL (a role that may create databases) and APPDOR_TEST_REDIS_URL")
	}
	switch *only {
	case "", "storm", "noisy", "many", "floor", "import", "lone", "unauth", "automation-storm", "live":
	default:
		return 0, fmt.Errorf("-only %q: expected storm, noisy, many, floor, import, lone, unauth, automation-storm or live", *only)
	}
	root, err := repoRoot()
	if err != nil {
		return 0, err
	}
	if err := os.Chdir(root); err != nil {
		return 0, err
	}
	resultsDir := filepath.Join(root, "test", "fairness", "results")
	if err := os.MkdirAll(resultsDir, 0o755); err != nil {
		return 0, err
	}
	work, err := os.MkdirTemp("", "appdor-storm-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(work)
	started := time.Now()
	p := defaultPlan()
	if *quick {
		p = quickPlan()
	}
	if *workers != 0 {
		if *only != "storm" || *workers < 0 {
			return 0, fmt.Errorf("-storm-workers: a positive count, and only with -only storm (a verdict always runs 60)")
		}
		p.StormWorkers = *workers
	}

	fmt.Println("harness: building appdor")
	bin, err := buildBinary(work)
	if err != nil {
		return 0, err
	}
	s := &stack{bin: bin, adminURL: adminURL, redisURL: redisURL, logDir: resultsDir}
	if err := s.createDatabase(ctx); err != nil {
		return 0, err
	}
	defer s.dropDatabase()
	if *only != "" {
		return runOnly(ctx, p, s)
	}

	srv, err := s.start(ctx, "fair")
	if err != nil {
		return 0, err
	}
	defer func() { srv.stop() }()
	r, err := s.seed(ctx, p, srv.base, func(string) bool { return true })
	if err != nil {
		return 0, err
	}

	// storm, with the controller on.
	st, err := runStorm(ctx, p, p.storm(), srv.base, "storm", r.victim, r.storm)
	if err != nil {
		return 0, err
	}
	if st.baseline.Errors+st.storm.Errors+st.recovery.Errors > 0 {
		// Where the victim's errors fell, second by second, and why.
		perSecond(st.rec, "victim")
		printRefusals(srv.base, r.victim.RealmID)
	}
	// noisy-agent, many, lone, import and unauth, on the same server. The
	// import goes after the arms that measure throughput or latency without
	// the victim's own baseline beside them, and the database is settled
	// after it.
	noisy := runNoisy(ctx, p, srv.base, r.victim, r.storm, r.editorsA, r.storm.Token, r.agentToken)
	many := runMany(ctx, p, srv.base, r.victim, r.storms)
	// The controller-off server starts now: the lone arm alternates between
	// the two.
	off, err := s.start(ctx, "control", "APPDOR_FAIRNESS=off")
	if err != nil {
		return 0, err
	}
	defer func() { off.stop() }()
	loneOn, loneOff := runLone(ctx, p, srv.base, off.base, r.lone)
	off.stop()
	imp := runImport(ctx, p, srv.base, r.victim, r.importer)
	s.settle(ctx, "import")
	un, err := runUnauth(ctx, p, srv.base, r.victim)
	if err != nil {
		return 0, err
	}
	lv := runLive(ctx, p, srv.base, r.victim, r.liveWriter, r.liveHolders)
	// automation-storm last on this server, with no other server running
	// (both would share the database and their automation workers the
	// queue), and the database settled after it: its 200,000 row writes and
	// their webhooks would be the next arm's load.
	k, autos, err := automationsWithSink(ctx, srv.base, r)
	if err != nil {
		return 0, err
	}
	defer k.close()
	auto := runAutomationStorm(ctx, p, s, srv.base, "autostorm", autos, r.storm, k)
	srv.stop()
	s.settle(ctx, "automation storm")

	// control, floor and the automation storm's control on a server of
	// their own, the controller switched off.
	if off, err = s.start(ctx, "control", "APPDOR_FAIRNESS=off"); err != nil {
		return 0, err
	}
	// control and floor: the controller switched off.
	fmt.Println("harness: control and floor runs with APPDOR_FAIRNESS=off")
	ctl, err := runStorm(ctx, p, p.storm(), off.base, "control", r.victim, r.storm)
	if err != nil {
		return 0, err
	}
	fl, err := runStorm(ctx, p, p.floor(), off.base, "floor", r.victim, r.storm)
	if err != nil {
		return 0, err
	}
	pc := p
	pc.AutoBaseline = p.AutoControlBaseline
	autoCtl := runAutomationStorm(ctx, pc, s, off.base, "autoctl", autos, r.storm, k)
	off.stop()

	// The verdict.
	var gates []gate
	add := func(name string, value float64, bound string, held bool) {
		gates = append(gates, gate{Name: name, Value: value, Bound: bound, Held: held, Reported: *mode == "wiring" && !wiring[name]})
	}
	info := func(name string, value float64, note string) {
		gates = append(gates, gate{Name: name, Value: value, Bound: note, Held: true, Info: true})
	}
	floorRatio := ratio(fl.storm.P99, fl.baseline.P99)
	bound := boundFrom(floorRatio)
	floorGoodput := ratio(float64(fl.stormArm.OK), fl.stormArm.Elapsed.Seconds())
	info("floor: victim p99 storm/baseline", floorRatio, fmt.Sprintf("(off, %d read at a time)", p.FloorWorkers))

	stormRatio := ratio(st.storm.P99, st.baseline.P99)
	recoveryRatio := ratio(st.recovery.P99, st.baseline.P99)
	victimErrors := st.baseline.Errors + st.storm.Errors + st.recovery.Errors
	add("victim p99 storm/baseline", stormRatio, bound.String(), stormRatio <= bound.Value)
	add("victim errors", float64(victimErrors), "== 0", victimErrors == 0)
	// Not a gate yet: the victim starts at the same moment as the storm
	// realm's warm-up workers, before either realm's load is known, and is
	// refused in some runs; the figure is kept in sight until it is mended.
	info("victim errors in warm-up, starting beside the storm's", float64(st.warmup.Errors), "(reported, not gated)")
	add("victim recovery p99/baseline", recoveryRatio, fmt.Sprintf("<= %.1f", recoveryBound), recoveryRatio <= recoveryBound)
	add("victim samples in baseline", float64(st.baseline.N), ">= 1000", st.baseline.N >= 1000)
	add("victim samples in storm", float64(st.storm.N), ">= 1000", st.storm.N >= 1000)
	add("storm reads completed", float64(st.stormArm.OK), fmt.Sprintf(">= %d within %s", p.StormRequests, p.StormTimeout),
		st.stormArm.OK >= p.StormRequests)

	type editorVerdict struct {
		BaselineP95 float64 `json:"baseline_p95_ms"`
		NoiseP95    float64 `json:"noise_p95_ms"`
		Ratio       float64 `json:"ratio"`
		Samples     int     `json:"samples"`
		Errors      int     `json:"errors"`
	}
	editors := map[string]editorVerdict{}
	for _, realm := range []string{"realm_a", "realm_b"} {
		pair := noisy.editors[realm]
		r := ratio(pair[1].P95, pair[0].P95)
		editors[realm] = editorVerdict{pair[0].P95, pair[1].P95, r, pair[0].N + pair[1].N, pair[0].Errors + pair[1].Errors}
		add("editors "+realm+" p95 noise/baseline", r, fmt.Sprintf("<= %.1f", noiseBound), r <= noiseBound)
		add("editors "+realm+" errors", float64(pair[0].Errors+pair[1].Errors), "== 0", pair[0].Errors+pair[1].Errors == 0)
	}
	var refused, bad429, agentOther int
	for _, s := range noisy.agent {
		switch {
		case s.Code == 429:
			refused++
			ra := 0
			fmt.Sscan(s.RetryAfter, &ra)
			if (s.ErrCode != "rate_limited" && s.ErrCode != "concurrency_limited") || ra < 1 {
				bad429++
			}
		case !s.ok():
			agentOther++
		}
	}
	refusedShare := ratio(float64(refused), float64(len(noisy.agent)))
	add("agent refused share", refusedShare, fmt.Sprintf("> %.2f", agentRefused), refusedShare > agentRefused)
	add("agent malformed 429s", float64(bad429), "== 0", bad429 == 0)

	manyRatio := ratio(many.storm.P99, many.baseline.P99)
	add("many: quiet p99 storm/baseline", manyRatio, bound.String(), manyRatio <= bound.Value)
	add("many: quiet errors", float64(many.baseline.Errors+many.storm.Errors), "== 0", many.baseline.Errors+many.storm.Errors == 0)

	loneRefused := countRefused(loneOn.rec, "lone", "lone")
	loneRatio := ratio(loneOn.throughput(), loneOff.throughput())
	add("lone: refusals with the controller on", float64(loneRefused), "== 0", loneRefused == 0)
	add("lone: throughput on/off", loneRatio, fmt.Sprintf(">= %.2f", loneShare), loneRatio >= loneShare)

	importRatio := ratio(imp.during.P99, imp.baseline.P99)
	// The floor's allowance is for the storms' gates: the floor is a storm
	// of reads. The other arms' victims keep the 2.0 bound.
	fixed := fmt.Sprintf("<= %.1f", stormBound)
	add("import: victim p99 import/baseline", importRatio, fixed, importRatio <= stormBound)
	add("import: victim errors", float64(imp.baseline.Errors+imp.during.Errors), "== 0", imp.baseline.Errors+imp.during.Errors == 0)
	add("import completes (2xx)", float64(imp.Code), fmt.Sprintf("2xx within %s", p.ImportTimeout), imp.Code >= 200 && imp.Code < 300)
	add("import rows all there", float64(imp.Counted), fmt.Sprintf("== %d counted and inserted", p.ImportRows),
		imp.Counted == int64(p.ImportRows) && imp.Inserted == p.ImportRows)

	unauthRatio := ratio(un.during.P99, un.baseline.P99)
	add("unauth: victim p99 bogus/baseline", unauthRatio, fixed, unauthRatio <= stormBound)
	add("unauth: victim errors", float64(un.baseline.Errors+un.during.Errors), "== 0", un.baseline.Errors+un.during.Errors == 0)
	add("unauth: pool acquires per 100 bogus requests", un.per100(), fmt.Sprintf("<= %.1f", bogusPer100), un.bogus.N > 0 && un.per100() <= bogusPer100)

	liveRatio := ratio(lv.during.P99, lv.baseline.P99)
	add("live: victim p99 streams and writes/baseline", liveRatio, fixed, liveRatio <= stormBound)
	add("live: victim errors", float64(lv.baseline.Errors+lv.during.Errors), "== 0", lv.baseline.Errors+lv.during.Errors == 0)
	add("live: streams open", float64(lv.Streams), fmt.Sprintf("== %d, none refused or ended", p.LiveWriterStreams+(p.LiveRealms-1)*p.LiveStreamsEach),
		lv.Streams == p.LiveWriterStreams+(p.LiveRealms-1)*p.LiveStreamsEach && lv.Refused == 0 && lv.Ended == 0)
	add("live: batches a writer stream never heard of", float64(lv.Missing), fmt.Sprintf("== 0, each batch timed at %d streams", p.LiveTracked),
		lv.Missing == 0 && lv.Batches > 0 && lv.Tracked == p.LiveTracked && lv.Deliveries == int64(lv.Tracked*lv.Batches))

	autoRatio := ratio(auto.storm.P99, auto.baseline.P99)
	autoLatRatio := ratio(auto.autoStorm.P99, auto.autoBaseline.P99)
	autoErrors := auto.baseline.Errors + auto.storm.Errors + auto.recovery.Errors + auto.qWriteErrors
	add("automation: Q read p99 storm/baseline", autoRatio, fixed, autoRatio <= stormBound)
	add("automation: Q automation p99 storm/baseline", autoLatRatio, fmt.Sprintf("<= %.1f", stormBound), autoLatRatio <= stormBound)
	add("automation: Q errors", float64(autoErrors), "== 0", autoErrors == 0)
	add("automation: Q automation samples in baseline", float64(auto.autoBaseline.N), ">= 1000", auto.autoBaseline.N >= 1000)
	add("automation: Q automation samples in storm", float64(auto.autoStorm.N), ">= 600", auto.autoStorm.N >= 600)
	add("automation: Q events not delivered once", float64(auto.qMissing+auto.qTwice), "== 0 missing or twice",
		auto.qMissing+auto.qTwice == 0 && len(auto.writes) > 0)
	add("automation: S import completes", float64(auto.sImport.Inserted), fmt.Sprintf("== %d, 2xx", p.AutoImportRows),
		auto.sImport.Code >= 200 && auto.sImport.Code < 300 && auto.sImport.Inserted == p.AutoImportRows)
	add("automation: S events left after drain", float64(auto.sPending+auto.sUndelivered),
		fmt.Sprintf("== 0 within %s", p.AutoDrain), auto.sPending == 0 && auto.sUndelivered == 0 && auto.sDelivered > 0)
	k.mu.Lock()
	badSignatures := k.bad
	k.mu.Unlock()
	add("automation: webhooks with a bad signature", float64(badSignatures), "== 0", badSignatures == 0)
	autoCtlRatio := ratio(autoCtl.storm.P99, autoCtl.baseline.P99)
	autoCtlLat := ratio(autoCtl.autoStorm.P99, autoCtl.autoBaseline.P99)
	autoCtlErrors := autoCtl.baseline.Errors + autoCtl.storm.Errors + autoCtl.qWriteErrors
	autoCtlHeld := autoCtlRatio <= stormBound && autoCtlLat <= stormBound && autoCtlErrors == 0
	add("automation: control (fairness off) breaks a Q bound", max(autoCtlRatio, autoCtlLat),
		"read or automation p99 over its bound, or errors", !autoCtlHeld)

	ctlRatio := ratio(ctl.storm.P99, ctl.baseline.P99)
	ctlErrors := ctl.storm.Errors
	controlHeld := ctlRatio <= controlBound && ctlErrors == 0
	add("control (fairness off) breaks the bound", ctlRatio, fmt.Sprintf("> %.1f or victim errors > 0", controlBound), !controlHeld)

	// A ratio held against a baseline with a stall in it proves nothing (one
	// run's single storm measured x0.06 against a baseline whose p99 was
	// 198 ms): each baseline a p99 bound stands on must be steady.
	worst, worstArm := 0.0, ""
	for _, b := range []struct {
		arm string
		st  stats
	}{{"storm", st.baseline}, {"many", many.baseline}, {"import", imp.baseline}, {"unauth", un.baseline},
		{"live", lv.baseline}, {"automation", auto.baseline}, {"floor", fl.baseline}} {
		if r := ratio(b.st.P99, b.st.P50); r > worst {
			worst, worstArm = r, b.arm
		}
	}
	add("baselines steady: worst p99/p50", worst, fmt.Sprintf("<= %.0f (%s)", steadyBound, worstArm), worst <= steadyBound)

	dispatchedMoved := st.after.Dispatched > st.metricsBefore.Dispatched
	// Sixty closed-loop readers against a few seats must queue whenever the
	// controller is on the path; whether they are also refused depends on
	// how fast the machine serves them (none were, in 13,527 reads at
	// 2,246 a second), so the refusals are in the storm's line and the JSON,
	// not a gate.
	waitedMoved := st.after.Waited > st.metricsBefore.Waited
	add("wired: storm realm dispatched counter moved", st.after.Dispatched-st.metricsBefore.Dispatched, "> 0", dispatchedMoved)
	add("wired: storm realm waited for seats", st.after.Waited-st.metricsBefore.Waited, "> 0 s", waitedMoved)

	held := true
	for _, g := range gates {
		held = held && (g.Held || g.Reported)
	}
	goodput := ratio(float64(st.stormArm.OK), st.stormArm.Elapsed.Seconds())
	result := map[string]any{
		"held":          held,
		"gate_mode":     *mode,
		"started_at":    started.UTC().Format(time.RFC3339),
		"duration_s":    time.Since(started).Seconds(),
		"cores":         runtime.NumCPU(),
		"commit":        commit(),
		"plan":          planJSON(p),
		"latency_bound": bound,
		"victim": map[string]any{
			"baseline_p99_ms": st.baseline.P99, "storm_p99_ms": st.storm.P99, "recovery_p99_ms": st.recovery.P99,
			"ratio": stormRatio, "bound": bound.Value, "bound_applied": bound.Applied,
			"recovery_ratio": recoveryRatio, "errors": victimErrors,
			"warmup": st.warmup, "baseline": st.baseline, "storm": st.storm, "recovery": st.recovery,
		},
		"storm": map[string]any{
			"requests": st.stormArm.Requests, "ok": st.stormArm.OK, "refused": st.stormArm.Refused,
			"errors": st.stormArm.Errors, "goodput_rps": goodput, "duration_s": st.stormArm.Elapsed.Seconds(),
		},
		"agent": map[string]any{
			"attempts": len(noisy.agent), "rate_rps": ratio(float64(len(noisy.agent)), noisy.duration.Seconds()),
			"refused_share": refusedShare, "bad_429s": bad429, "other_errors": agentOther, "editors": editors,
		},
		"live": map[string]any{
			"victim_baseline_p99_ms": lv.baseline.P99, "victim_p99_ms": lv.during.P99, "ratio": liveRatio, "bound": stormBound,
			"victim_baseline": lv.baseline, "victim": lv.during, "outcome": lv,
		},
		"many": map[string]any{
			"realms": p.ManyRealms, "workers_each": p.ManyWorkers,
			"quiet_baseline_p99_ms": many.baseline.P99, "quiet_storm_p99_ms": many.storm.P99, "ratio": manyRatio,
			"bound": bound.Value, "bound_applied": bound.Applied,
			"quiet_errors": many.baseline.Errors + many.storm.Errors, "quiet_baseline": many.baseline, "quiet_storm": many.storm,
			"storms": map[string]any{"requests": many.storms.Requests, "ok": many.storms.OK, "refused": many.storms.Refused, "errors": many.storms.Errors},
		},
		"floor": map[string]any{
			"storm_workers": p.FloorWorkers, "baseline_p99_ms": fl.baseline.P99, "storm_p99_ms": fl.storm.P99, "ratio": floorRatio,
			"storm_goodput_rps": floorGoodput, "baseline": fl.baseline, "storm": fl.storm,
			"storm_arm": map[string]any{"ok": fl.stormArm.OK, "refused": fl.stormArm.Refused, "errors": fl.stormArm.Errors},
		},
		"import": map[string]any{
			"rows": p.ImportRows, "status": imp.Code, "error_code": imp.ErrCode, "message": imp.Message,
			"inserted": imp.Inserted, "failed": imp.Failed, "counted": imp.Counted,
			"duration_s": imp.Duration.Seconds(), "rows_per_s": imp.rowsPerSecond(),
			"victim_baseline_p99_ms": imp.baseline.P99, "victim_import_p99_ms": imp.during.P99, "ratio": importRatio,
			"bound": stormBound, "victim_baseline": imp.baseline, "victim_import": imp.during,
		},
		"lone": map[string]any{
			"clients": p.LoneClients, "duration_s": p.Lone.Seconds(), "ratio": loneRatio,
			"on":  map[string]any{"reads_per_s": loneOn.throughput(), "ok": loneOn.arm.OK, "refused": loneOn.arm.Refused, "errors": loneOn.arm.Errors, "latency": loneOn.latency},
			"off": map[string]any{"reads_per_s": loneOff.throughput(), "ok": loneOff.arm.OK, "refused": loneOff.arm.Refused, "errors": loneOff.arm.Errors, "latency": loneOff.latency},
		},
		"unauth": map[string]any{
			"rate_rps": p.BogusRate, "bogus_requests": un.bogus.N, "bogus_answers_by_status": un.byCode,
			"victim_baseline_p99_ms": un.baseline.P99, "victim_bogus_p99_ms": un.during.P99, "ratio": unauthRatio, "bound": stormBound,
			"pool_acquires": map[string]any{
				"baseline": un.baselineAcquires, "baseline_served_200": un.baselineServed, "per_served_200": un.perServed,
				"bogus_phase": un.bogusAcquires, "bogus_phase_served_200": un.bogusServed,
				"charged_to_bogus": un.charged, "per_100_bogus": un.per100(),
			},
			"victim_baseline": un.baseline, "victim_bogus": un.during,
		},
		"control": map[string]any{
			"held": controlHeld, "ratio": ctlRatio, "bound": controlBound, "baseline_p99_ms": ctl.baseline.P99, "storm_p99_ms": ctl.storm.P99,
			"victim_errors": ctlErrors, "storm": map[string]any{"ok": ctl.stormArm.OK, "refused": ctl.stormArm.Refused,
				"goodput_rps": ratio(float64(ctl.stormArm.OK), ctl.stormArm.Elapsed.Seconds())},
		},
		"automation_storm": map[string]any{
			"on": auto.json(stormBound), "control": autoCtl.json(stormBound), "bad_signatures": badSignatures,
		},
		"wired": map[string]any{
			"held": dispatchedMoved && waitedMoved, "before": st.metricsBefore, "after": st.after,
		},
		"gates": gates,
	}

	stamp := started.UTC().Format("20060102T150405Z")
	chart := filepath.Join(resultsDir, "latest.svg")
	if err := drawChart(chart,
		[]*recorder{st.rec, noisy.rec, many.rec, auto.rec, loneOn.rec, imp.rec, un.rec, lv.rec, ctl.rec, fl.rec, autoCtl.rec, loneOff.rec},
		[]string{"storm (fairness on)", "noisy agent", "many realms", "automation storm (fairness on)", "lone realm (fairness on)", "CSV import (fairness on)",
			"bogus tokens (fairness on)", "live: 2,001 streams, 1,000 rows/s written (fairness on)", "control (fairness off)", "floor: one storm read at a time (fairness off)",
			"automation storm (fairness off)", "lone realm (fairness off)"},
		depthPanel("automation storm: S's pending events", map[string]plotter.XYs{"fairness on": auto.depth, "fairness off": autoCtl.depth})); err != nil {
		fmt.Fprintln(os.Stderr, "harness: chart:", err)
	} else {
		copyFile(chart, filepath.Join(resultsDir, stamp+".svg"))
		result["chart"] = "test/fairness/results/latest.svg"
	}
	b, _ := json.MarshalIndent(result, "", "  ")
	for _, name := range []string{"latest.json", stamp + ".json"} {
		if err := os.WriteFile(filepath.Join(resultsDir, name), append(b, '\n'), 0o644); err != nil {
			return 0, err
		}
	}

	printTable(gates, st, goodput)
	fmt.Printf("latency bound of storm, many, import and unauth: %s (floor: victim p99 %.1f -> %.1f ms, x%.2f, storm goodput %.0f reads/s)\n",
		bound, fl.baseline.P99, fl.storm.P99, floorRatio, floorGoodput)
	fmt.Printf("import: %d rows, status %d in %.1fs (%.0f rows/s), inserted %d, counted %d\n",
		p.ImportRows, imp.Code, imp.Duration.Seconds(), imp.rowsPerSecond(), imp.Inserted, imp.Counted)
	fmt.Printf("lone: %.0f reads/s with the controller on (%d refused), %.0f off\n", loneOn.throughput(), loneRefused, loneOff.throughput())
	fmt.Printf("unauth: %d bogus requests answered %v, %.2f pool acquires per 100\n", un.bogus.N, un.byCode, un.per100())
	auto.print("automation", autoRatio, autoLatRatio)
	autoCtl.print("automation (fairness off)", autoCtlRatio, autoCtlLat)
	fmt.Printf("\nresults: test/fairness/results/latest.json, chart: test/fairness/results/latest.svg (%.0fs)\n", time.Since(started).Seconds())
	switch {
	case !dispatchedMoved || !waitedMoved:
		fmt.Println("FAIL: the fairness controller is not on the request path: the storm realm was not dispatched or never waited for a seat")
		return 1, nil
	case controlHeld:
		fmt.Println("FAIL: with the controller off the victim still held the bound; this run cannot tell a working controller from a missing one")
		return 1, nil
	case !held:
		fmt.Println("FAIL: isolation did not hold")
		return 1, nil
	case *mode == "wiring":
		fmt.Println("PASS: the controller is on the request path and the harness can tell (latency bounds reported above, not gated: -gate wiring)")
		return 0, nil
	}
	fmt.Println("PASS: isolation held")
	return 0, nil
}

// countRefused counts arm's 429 answers in phase.
func countRefused(rec *recorder, arm, phase string) int {
	n := 0
	for _, s := range rec.sel(arm, phase) {
		if s.Code == 429 {
			n++
		}
	}
	return n
}

// runOnly runs one scenario and prints its phases, with no verdict. floor
// runs on a server with the controller off; lone on one with it on, then
// on one with it off.
func runOnly(ctx context.Context, p plan, s *stack) (int, error) {
	name, env := "fair", []string(nil)
	if *only == "floor" {
		name, env = "control", []string{"APPDOR_FAIRNESS=off"}
	}
	srv, err := s.start(ctx, name, env...)
	if err != nil {
		return 0, err
	}
	defer func() { srv.stop() }()
	r, err := s.seed(ctx, p, srv.base, func(arm string) bool { return arm == *only })
	if err != nil {
		return 0, err
	}
	fmt.Println("harness: server at", srv.base)
	switch *only {
	case "storm":
		st, err := runStorm(ctx, p, p.storm(), srv.base, "storm", r.victim, r.storm)
		if err == nil {
			perSecond(st.rec, "victim", "storm")
			printRefusals(srv.base, r.victim.RealmID)
		}
		return 0, err
	case "floor":
		// As in a full run, on a server the control storm has warmed.
		fmt.Println("harness: warming the server with the control storm")
		if _, err := runStorm(ctx, p, p.storm(), srv.base, "control", r.victim, r.storm); err != nil {
			return 0, err
		}
		fl, err := runStorm(ctx, p, p.floor(), srv.base, "floor", r.victim, r.storm)
		if err == nil {
			perSecond(fl.rec, "victim", "storm")
			floorRatio := ratio(fl.storm.P99, fl.baseline.P99)
			fmt.Printf("floor: victim p99 %.1f -> %.1f ms, x%.2f, storm goodput %.0f reads/s; the latency bound would be %s\n",
				fl.baseline.P99, fl.storm.P99, floorRatio, ratio(float64(fl.stormArm.OK), fl.stormArm.Elapsed.Seconds()), boundFrom(floorRatio))
		}
		return 0, err
	case "noisy":
		runNoisy(ctx, p, srv.base, r.victim, r.storm, r.editorsA, r.storm.Token, r.agentToken)
		return 0, nil
	case "many":
		m := runMany(ctx, p, srv.base, r.victim, r.storms)
		perSecond(m.rec, "quiet", "storms")
		slowest(m.rec, "quiet", "storm", 15)
		printRefusals(srv.base, r.victim.RealmID)
		return 0, nil
	case "import":
		imp := runImport(ctx, p, srv.base, r.victim, r.importer)
		perSecond(imp.rec, "victim")
		printRefusals(srv.base, r.importer.RealmID)
		fmt.Printf("import: victim p99 %.1f -> %.1f ms (x%.2f), counted %d rows\n", imp.baseline.P99, imp.during.P99, ratio(imp.during.P99, imp.baseline.P99), imp.Counted)
		return 0, nil
	case "unauth":
		un, err := runUnauth(ctx, p, srv.base, r.victim)
		if err == nil {
			perSecond(un.rec, "victim", "bogus")
			fmt.Printf("unauth: victim p99 %.1f -> %.1f ms (x%.2f)\n", un.baseline.P99, un.during.P99, ratio(un.during.P99, un.baseline.P99))
		}
		return 0, err
	case "live":
		lv := runLive(ctx, p, srv.base, r.victim, r.liveWriter, r.liveHolders)
		perSecond(lv.rec, "victim")
		fmt.Printf("live: victim p99 %.1f -> %.1f ms (x%.2f)\n", lv.baseline.P99, lv.during.P99, ratio(lv.during.P99, lv.baseline.P99))
		return 0, nil
	case "automation-storm":
		k, autos, err := automationsWithSink(ctx, srv.base, r)
		if err != nil {
			return 0, err
		}
		defer k.close()
		// B is the storm realm, seeded with every run.
		o := runAutomationStorm(ctx, p, s, srv.base, "autostorm", autos, r.storm, k)
		perSecond(o.rec, "quiet", "qwrite", "qauto")
		printRefusals(srv.base, r.autoQ.RealmID)
		o.print("automation", ratio(o.storm.P99, o.baseline.P99), ratio(o.autoStorm.P99, o.autoBaseline.P99))
		return 0, nil
	case "lone":
		off, err := s.start(ctx, "control", "APPDOR_FAIRNESS=off")
		if err != nil {
			return 0, err
		}
		defer off.stop()
		on, offOut := runLone(ctx, p, srv.base, off.base, r.lone)
		printRefusals(srv.base, r.lone.RealmID)
		fmt.Printf("lone: %.0f reads/s on (%d refused), %.0f off: x%.2f\n", on.throughput(), countRefused(on.rec, "lone", "lone"),
			offOut.throughput(), ratio(on.throughput(), offOut.throughput()))
		return 0, nil
	}
	return 0, nil
}

func printTable(gates []gate, st *stormOutcome, goodput float64) {
	fmt.Printf("\n%-44s %12s  %-30s %s\n", "gate", "value", "bound", "held")
	for _, g := range gates {
		mark := "yes"
		switch {
		case g.Info:
			mark = "(measured)"
		case !g.Held:
			mark = "NO"
		}
		if g.Reported {
			mark += " (reported: -gate wiring)"
		}
		fmt.Printf("%-44s %12.3f  %-30s %s\n", g.Name, g.Value, g.Bound, mark)
	}
	fmt.Printf("\nvictim p50/p99 ms: baseline %.1f/%.1f (n=%d), storm %.1f/%.1f (n=%d), recovery %.1f/%.1f (n=%d)\n",
		st.baseline.P50, st.baseline.P99, st.baseline.N, st.storm.P50, st.storm.P99, st.storm.N,
		st.recovery.P50, st.recovery.P99, st.recovery.N)
	fmt.Printf("storm: %d requests, %d ok, %d refused, %d errors, goodput %.0f reads/s\n",
		st.stormArm.Requests, st.stormArm.OK, st.stormArm.Refused, st.stormArm.Errors, goodput)
}

// perSecond prints each arm's answers and failures second by second, for
// tuning.
func perSecond(rec *recorder, arms ...string) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	type bucket struct {
		n, failed int
		ss        []sample
	}
	for _, arm := range arms {
		b := map[int]*bucket{}
		last := 0
		for _, s := range rec.samples {
			if s.Arm != arm {
				continue
			}
			sec := int(s.At.Seconds())
			if b[sec] == nil {
				b[sec] = &bucket{}
			}
			b[sec].n++
			b[sec].ss = append(b[sec].ss, s)
			if !s.ok() {
				b[sec].failed++
			}
			last = max(last, sec)
		}
		var line []string
		for sec := 0; sec <= last; sec++ {
			if x := b[sec]; x != nil {
				line = append(line, fmt.Sprintf("%d:%d/%d/p99=%.0f", sec, x.failed, x.n, summarize(x.ss).P99))
			}
		}
		fmt.Printf("%s failed/sent by second: %s\n", arm, strings.Join(line, " "))
	}
}

// slowest prints the n slowest samples of arm in phase, with their send
// times from the phase's start, for -only runs: whether a p99 is a burst or
// spread out.
func slowest(rec *recorder, arm, phaseName string, n int) {
	ss := rec.sel(arm, phaseName)
	var from time.Duration
	rec.mu.Lock()
	for _, ph := range rec.phases {
		if ph.Name == phaseName {
			from = ph.Start
		}
	}
	rec.mu.Unlock()
	sort.Slice(ss, func(i, j int) bool { return ss[i].Latency > ss[j].Latency })
	var line []string
	for _, s := range ss[:min(n, len(ss))] {
		line = append(line, fmt.Sprintf("%.0fms@%.2fs", s.Latency.Seconds()*1000, (s.At-from).Seconds()))
	}
	fmt.Printf("%s slowest in %s: %s\n", arm, phaseName, strings.Join(line, " "))
}

func planJSON(p plan) map[string]any {
	return map[string]any{
		"victim_rate_rps": p.VictimRate, "warmup_s": p.Warmup.Seconds(), "baseline_s": p.Baseline.Seconds(),
		"recovery_s": p.Recovery.Seconds(), "storm_workers": p.StormWorkers, "storm_requests": p.StormRequests,
		"editor_rate_rps": p.EditorRate, "agent_rate_rps": p.AgentRate, "noise_s": p.Noise.Seconds(),
		"many_realms": p.ManyRealms, "many_workers_each": p.ManyWorkers, "many_storm_s": p.ManyStorm.Seconds(),
		"storm_min_s": p.StormMin.Seconds(), "floor_workers": p.FloorWorkers, "floor_storm_s": p.FloorStorm.Seconds(),
		"import_rows": p.ImportRows, "import_timeout_s": p.ImportTimeout.Seconds(),
		"lone_clients": p.LoneClients, "lone_s": p.Lone.Seconds(), "bogus_rate_rps": p.BogusRate, "bogus_s": p.Bogus.Seconds(),
		"automation_quiet_write_rate_rps": p.QuietWriteRate, "automation_import_rows": p.AutoImportRows,
		"automation_patch_workers": p.AutoPatchWorkers, "automation_patches": p.AutoPatches, "automation_drain_s": p.AutoDrain.Seconds(),
	}
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("finding the module root: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func commit() string {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		c += "+dirty"
	}
	return c
}

func copyFile(from, to string) {
	b, err := os.ReadFile(from)
	if err == nil {
		_ = os.WriteFile(to, b, 0o644)
	}
}

// printRefusals prints the controller's refusal counters for realm, by
// reason, and its waits for a seat (cumulative buckets), for -only runs.
func printRefusals(base, realm string) {
	res, err := http.Get(base + "/metrics")
	if err != nil {
		return
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, realm) && (strings.HasPrefix(l, "appdor_fairness_refused") ||
			strings.HasPrefix(l, "appdor_fairness_wait_seconds_bucket")) {
			fmt.Println(l)
		}
	}
}
