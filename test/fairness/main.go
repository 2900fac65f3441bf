// Command fairness is Appdor's storm harness (`npm run test:fairness`). It
// builds and starts the real appdor binary on a fresh database, seeds realms
// through the CLI and the public API, and drives tagged load over real HTTP:
//
//   - storm: a victim realm's light reads at a steady open-model rate while a
//     storm realm runs 3,000 heavy reads from 60 concurrent workers;
//   - noisy-agent: editors of two realms at work while an agent token capped
//     at 60 a minute tries 600 requests a second;
//   - many: sixteen storm realms at once beside one quiet realm;
//   - control: the storm again with the fairness controller off, which must
//     break the bound, or the harness cannot tell a working controller from
//     a missing one;
//   - wired: the controller's counters for the storm realm moved.
//
// It computes its own verdict into test/fairness/results/latest.json (and a
// timestamped copy), draws each arm's latency over time with the phases
// marked, and exits non-zero when a gate does not hold. With -gate wiring
// (make test) only the gates that do not depend on a quiet machine decide:
// the controller is on the request path, the control run breaks the bound,
// the agent is limited; the latency bounds are reported.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Bounds of the gates.
const (
	stormBound    = 2.0 // victim p99 in storm ÷ baseline
	recoveryBound = 1.5 // victim p99 in recovery ÷ baseline
	noiseBound    = 2.0 // editors' p95 under noise ÷ baseline
	agentRefused  = 0.9 // the agent's refused share must exceed this
	manyBound     = 2.0 // quiet realm's p99 under many storms ÷ baseline
)

var (
	quick   = flag.Bool("quick", false, "a short run to check the harness itself; its verdict proves nothing")
	only    = flag.String("only", "", "run just this scenario (storm, noisy, many) and print its phases, with no verdict: for tuning")
	workers = flag.Int("storm-workers", 0, "with -only: the storm realm's concurrent workers instead of 60 (with APPDOR_FAIRNESS=off and 1 or 2 workers, what a controller admitting that many storm reads at a time could at best give the victim)")
	mode    = flag.String("gate", "all", "all: every gate decides the run; wiring: only the gates that show the controller on the request path and the harness able to tell a missing one decide, the latency bounds are reported (make test, on shared CI machines)")
)

func main() {
	flag.Parse()
	if *mode != "all" && *mode != "wiring" {
		fmt.Fprintf(os.Stderr, "harness: -gate %q: expected all or wiring\n", *mode)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, err := run(ctx)
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
}

// wiring names the gates that decide a -gate wiring run: the storm ran and
// was refused, the agent was limited with well-formed answers, the
// controller's counters moved, and the control run broke the bound (so the
// harness can tell a working controller from a missing one). They do not
// depend on how quiet the machine is. The latency bounds do: on a shared
// 2-core machine the single-storm bound holds in about half the runs (the
// victim's p99 is 1.5–1.8× its baseline with a storm of one read at a time
// and no controller at all), so make test reports them and
// `npm run test:fairness` (-gate all) decides on them.
var wiring = map[string]bool{
	"victim samples in baseline":                true,
	"victim samples in storm":                   true,
	"storm reads completed":                     true,
	"agent refused share":                       true,
	"agent malformed 429s":                      true,
	"control (fairness off) breaks the bound":   true,
	"wired: storm realm admitted counter moved": true,
	"wired: storm realm refused counter moved":  true,
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

func run(ctx context.Context) (int, error) {
	adminURL, redisURL := os.Getenv("APPDOR_TEST_DATABASE_URL"), os.Getenv("APPDOR_TEST_REDIS_URL")
	if adminURL == "" || redisURL == "" {
		return 0, fmt.Errorf("set APPDOR_TEST_DATABASE_URL (a role that may create databases) and APPDOR_TEST_REDIS_URL")
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
		if *only == "" || *workers < 0 {
			return 0, fmt.Errorf("-storm-workers: a positive count, and only with -only (a verdict always runs 60)")
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

	srv, err := s.start(ctx, "fair")
	if err != nil {
		return 0, err
	}
	defer func() { srv.stop() }()

	fmt.Println("harness: seeding realms (2,000 rows each)")
	victim, err := s.seedTenant(ctx, srv.base, "victim", 2000)
	if err != nil {
		return 0, err
	}
	storm, err := s.seedTenant(ctx, srv.base, "storm", 2000)
	if err != nil {
		return 0, err
	}
	var storms []*tenant
	for i := range p.ManyRealms {
		t, err := s.seedTenant(ctx, srv.base, fmt.Sprintf("storm%02d", i+1), 2000)
		if err != nil {
			return 0, err
		}
		storms = append(storms, t)
	}
	editorsA := []string{victim.Token, ""}
	if editorsA[1], err = s.token(ctx, victim, "editor 2", 0); err != nil {
		return 0, err
	}
	agentToken, err := s.token(ctx, victim, "agent", 60)
	if err != nil {
		return 0, err
	}
	fmt.Printf("harness: seeded in %.0fs\n", time.Since(started).Seconds())

	if *only != "" {
		fmt.Println("harness: server at", srv.base)
	}
	switch *only {
	case "":
	case "storm":
		st, err := runStorm(ctx, p, srv.base, "storm", victim, storm)
		if err == nil {
			perSecond(st.rec, "victim", "storm")
			printRefusals(srv.base, victim.RealmID)
		}
		return 0, err
	case "noisy":
		runNoisy(ctx, p, srv.base, victim, storm, editorsA, storm.Token, agentToken)
		return 0, nil
	case "many":
		m := runMany(ctx, p, srv.base, victim, storms)
		perSecond(m.rec, "quiet", "storms")
		printRefusals(srv.base, victim.RealmID)
		return 0, nil
	default:
		return 0, fmt.Errorf("-only %q: expected storm, noisy or many", *only)
	}

	// storm, with the controller on.
	st, err := runStorm(ctx, p, srv.base, "storm", victim, storm)
	if err != nil {
		return 0, err
	}
	if st.baseline.Errors+st.storm.Errors+st.recovery.Errors > 0 {
		// Where the victim's errors fell, second by second, and why.
		perSecond(st.rec, "victim")
		printRefusals(srv.base, victim.RealmID)
	}
	// noisy-agent and many, on the same server.
	noisy := runNoisy(ctx, p, srv.base, victim, storm, editorsA, storm.Token, agentToken)
	many := runMany(ctx, p, srv.base, victim, storms)
	srv.stop()

	// control: the storm again with the controller switched off.
	fmt.Println("harness: control run with APPDOR_FAIRNESS=off")
	off, err := s.start(ctx, "control", "APPDOR_FAIRNESS=off")
	if err != nil {
		return 0, err
	}
	ctl, err := runStorm(ctx, p, off.base, "control", victim, storm)
	off.stop()
	if err != nil {
		return 0, err
	}

	// The verdict.
	var gates []gate
	add := func(name string, value float64, bound string, held bool) {
		gates = append(gates, gate{Name: name, Value: value, Bound: bound, Held: held, Reported: *mode == "wiring" && !wiring[name]})
	}
	stormRatio := ratio(st.storm.P99, st.baseline.P99)
	recoveryRatio := ratio(st.recovery.P99, st.baseline.P99)
	victimErrors := st.baseline.Errors + st.storm.Errors + st.recovery.Errors
	add("victim p99 storm/baseline", stormRatio, fmt.Sprintf("<= %.1f", stormBound), stormRatio <= stormBound)
	add("victim errors", float64(victimErrors), "== 0", victimErrors == 0)
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
	for realm, pair := range noisy.editors {
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
	add("many: quiet p99 storm/baseline", manyRatio, fmt.Sprintf("<= %.1f", manyBound), manyRatio <= manyBound)
	add("many: quiet errors", float64(many.baseline.Errors+many.storm.Errors), "== 0", many.baseline.Errors+many.storm.Errors == 0)

	ctlRatio := ratio(ctl.storm.P99, ctl.baseline.P99)
	ctlErrors := ctl.storm.Errors
	controlHeld := ctlRatio <= stormBound && ctlErrors == 0
	add("control (fairness off) breaks the bound", ctlRatio, fmt.Sprintf("> %.1f or victim errors > 0", stormBound), !controlHeld)

	admittedMoved := st.after.Admitted > st.metricsBefore.Admitted
	refusedMoved := st.after.Refused > st.metricsBefore.Refused
	add("wired: storm realm admitted counter moved", st.after.Admitted-st.metricsBefore.Admitted, "> 0", admittedMoved)
	add("wired: storm realm refused counter moved", st.after.Refused-st.metricsBefore.Refused, "> 0", refusedMoved)

	held := true
	for _, g := range gates {
		held = held && (g.Held || g.Reported)
	}
	goodput := ratio(float64(st.stormArm.OK), st.stormArm.Elapsed.Seconds())
	result := map[string]any{
		"held":       held,
		"gate_mode":  *mode,
		"started_at": started.UTC().Format(time.RFC3339),
		"duration_s": time.Since(started).Seconds(),
		"cores":      runtime.NumCPU(),
		"commit":     commit(),
		"plan":       planJSON(p),
		"victim": map[string]any{
			"baseline_p99_ms": st.baseline.P99, "storm_p99_ms": st.storm.P99, "recovery_p99_ms": st.recovery.P99,
			"ratio": stormRatio, "recovery_ratio": recoveryRatio, "errors": victimErrors,
			"baseline": st.baseline, "storm": st.storm, "recovery": st.recovery,
		},
		"storm": map[string]any{
			"requests": st.stormArm.Requests, "ok": st.stormArm.OK, "refused": st.stormArm.Refused,
			"errors": st.stormArm.Errors, "goodput_rps": goodput, "duration_s": st.stormArm.Elapsed.Seconds(),
		},
		"agent": map[string]any{
			"attempts": len(noisy.agent), "rate_rps": ratio(float64(len(noisy.agent)), noisy.duration.Seconds()),
			"refused_share": refusedShare, "bad_429s": bad429, "other_errors": agentOther, "editors": editors,
		},
		"many": map[string]any{
			"realms": p.ManyRealms, "workers_each": p.ManyWorkers,
			"quiet_baseline_p99_ms": many.baseline.P99, "quiet_storm_p99_ms": many.storm.P99, "ratio": manyRatio,
			"quiet_errors": many.baseline.Errors + many.storm.Errors, "quiet_baseline": many.baseline, "quiet_storm": many.storm,
			"storms": map[string]any{"requests": many.storms.Requests, "ok": many.storms.OK, "refused": many.storms.Refused, "errors": many.storms.Errors},
		},
		"control": map[string]any{
			"held": controlHeld, "ratio": ctlRatio, "baseline_p99_ms": ctl.baseline.P99, "storm_p99_ms": ctl.storm.P99,
			"victim_errors": ctlErrors, "storm": map[string]any{"ok": ctl.stormArm.OK, "refused": ctl.stormArm.Refused,
				"goodput_rps": ratio(float64(ctl.stormArm.OK), ctl.stormArm.Elapsed.Seconds())},
		},
		"wired": map[string]any{
			"held": admittedMoved && refusedMoved, "before": st.metricsBefore, "after": st.after,
		},
		"gates": gates,
	}

	stamp := started.UTC().Format("20060102T150405Z")
	chart := filepath.Join(resultsDir, "latest.svg")
	if err := drawChart(chart, []*recorder{st.rec, noisy.rec, many.rec, ctl.rec},
		[]string{"storm (fairness on)", "noisy agent", "many realms", "control (fairness off)"}); err != nil {
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
	fmt.Printf("\nresults: test/fairness/results/latest.json, chart: test/fairness/results/latest.svg (%.0fs)\n", time.Since(started).Seconds())
	switch {
	case !admittedMoved || !refusedMoved:
		fmt.Println("FAIL: the fairness controller is not on the request path: its counters for the storm realm did not move")
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

func printTable(gates []gate, st *stormOutcome, goodput float64) {
	fmt.Printf("\n%-44s %12s  %-26s %s\n", "gate", "value", "bound", "held")
	for _, g := range gates {
		mark := "yes"
		if !g.Held {
			mark = "NO"
		}
		if g.Reported {
			mark += " (reported: -gate wiring)"
		}
		fmt.Printf("%-44s %12.3f  %-26s %s\n", g.Name, g.Value, g.Bound, mark)
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

func planJSON(p plan) map[string]any {
	return map[string]any{
		"victim_rate_rps": p.VictimRate, "warmup_s": p.Warmup.Seconds(), "baseline_s": p.Baseline.Seconds(),
		"recovery_s": p.Recovery.Seconds(), "storm_workers": p.StormWorkers, "storm_requests": p.StormRequests,
		"editor_rate_rps": p.EditorRate, "agent_rate_rps": p.AgentRate, "noise_s": p.Noise.Seconds(),
		"many_realms": p.ManyRealms, "many_workers_each": p.ManyWorkers, "many_storm_s": p.ManyStorm.Seconds(),
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
// reason, for -only runs.
func printRefusals(base, realm string) {
	res, err := http.Get(base + "/metrics")
	if err != nil {
		return
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, realm) && strings.HasPrefix(l, "appdor_fairness_refused") {
			fmt.Println(l)
		}
	}
}
