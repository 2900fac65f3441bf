package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// plan holds the scenarios' sizes. Every phase whose latency is gated lasts
// long enough for at least 200 samples of each arm it gates (a p99 over 200
// is the second slowest, a p95 the tenth), and the victim's for 1,000 (6 s
// at 200/s); a full run takes about ten minutes on a 2-core machine.
type plan struct {
	VictimRate    int
	Warmup        time.Duration
	Baseline      time.Duration
	Recovery      time.Duration
	StormWorkers  int
	StormRequests int64
	StormMin      time.Duration // the storm phase lasts at least this
	StormTimeout  time.Duration
	FloorWorkers  int
	FloorStorm    time.Duration
	EditorRate    int
	AgentRate     int
	Noise         time.Duration // the editors' baseline, and then the agent's noise: long enough for 200 samples of the one editor of realm B, so that its p95 is not the fourth slowest of 80
	ManyRealms    int
	ManyWorkers   int
	ManyStorm     time.Duration
	QuietRate     int
	ImportRows    int
	// ImportTimeout bounds each 100,000-row import beside another realm's
	// work. Alone, an import writes 10,000-12,000 rows a second
	// (BenchmarkCSVImport100k), about 10 s of work; beside another realm it
	// rests twelve times as long as it works (--fairness-background-rest)
	// while another realm is active, and more while the storm slows its
	// own steps: 89-217 s measured in the import arm and the automation
	// storm (the automation storm's, in full runs, 99-217 s). Five minutes
	// leaves a slow machine room without letting a starved import pass.
	ImportTimeout time.Duration
	LoneClients   int
	Lone          time.Duration
	BogusRate     int
	Bogus         time.Duration
	// live
	LiveRealms        int           // realms holding streams, the writer among them
	LiveWriterStreams int           // the writer realm's streams: its whole cap (--live-streams-per-realm)
	LiveStreamsEach   int           // every other realm's
	LiveTracked       int           // writer streams whose events the stream holder reads and times
	LiveRowsPerSecond int           // the writer's rows a second
	LiveBatch         int           // rows a write
	LiveWrites        time.Duration // how long it writes
	// automation-storm
	QuietWriteRate   int   // Q's writes a second, each firing its webhook
	AutoImportRows   int   // S's CSV import
	AutoPatchWorkers int   // S's batch-update workers, 100 rows a patch
	AutoPatches      int64 // S's patches in all: the storm's work is a fixed amount, however long the import takes
	// AutoBaseline is Q alone: long enough for 1,000 automation samples
	// (1,100 at 10 a second), as the victim's reads have. At 400 (40 s),
	// the p99 was the fourth slowest of 400, and resampling one run's 435
	// baseline latencies put 90% of such p99s between 11 and 24 ms: the
	// ratio's bound was decided by the baseline's luck as much as by the
	// storm.
	AutoBaseline time.Duration
	// AutoControlBaseline is the control arm's: its storm breaks Q's
	// bound many times over (x14 its read p99), whatever the baseline's luck.
	AutoControlBaseline time.Duration
	AutoDrain           time.Duration // how long after recovery S's and Q's automations may take to finish
}

func defaultPlan() plan {
	return plan{
		VictimRate:    200,
		Warmup:        5 * time.Second,
		Baseline:      6 * time.Second,
		Recovery:      6 * time.Second,
		StormWorkers:  60,
		StormRequests: 3000,
		StormMin:      6 * time.Second,
		StormTimeout:  120 * time.Second,
		FloorWorkers:  1,
		FloorStorm:    6 * time.Second,
		EditorRate:    10,
		AgentRate:     600,
		Noise:         20 * time.Second,
		ManyRealms:    16,
		ManyWorkers:   4,
		ManyStorm:     6 * time.Second,
		QuietRate:     200,
		ImportRows:    100_000,
		ImportTimeout: 5 * time.Minute,
		LoneClients:   16,
		Lone:          5 * time.Second,
		BogusRate:     500,
		Bogus:         6 * time.Second,

		LiveRealms:        20,
		LiveWriterStreams: 500,
		LiveStreamsEach:   79, // 500 + 19 × 79 = 2,001 streams
		LiveTracked:       50,
		LiveRowsPerSecond: 1000,
		LiveBatch:         100,
		LiveWrites:        10 * time.Second,

		QuietWriteRate:      10,
		AutoImportRows:      100_000,
		AutoPatchWorkers:    2,
		AutoPatches:         400,
		AutoBaseline:        110 * time.Second,
		AutoControlBaseline: 40 * time.Second,
		AutoDrain:           120 * time.Second,
	}
}

// quickPlan is a short run for working on the harness itself.
func quickPlan() plan {
	p := defaultPlan()
	p.Warmup, p.Baseline, p.Recovery, p.Noise, p.ManyStorm = 2*time.Second, 2*time.Second, 2*time.Second, 3*time.Second, 3*time.Second
	p.StormMin, p.FloorStorm, p.Lone, p.Bogus = 2*time.Second, 2*time.Second, 2*time.Second, 2*time.Second
	p.StormRequests, p.ManyRealms, p.ImportRows, p.ImportTimeout = 500, 4, 10_000, 60*time.Second
	p.AutoImportRows, p.AutoBaseline, p.AutoControlBaseline = 10_000, 2*time.Second, 2*time.Second
	return p
}

// stormSpec sizes one run of the storm scenario: the storm phase runs until
// requests successful reads (0: no count) and at least min, within timeout.
type stormSpec struct {
	workers          int
	requests         int64
	min, timeout     time.Duration
	warmup, recovery time.Duration
}

// storm is the storm and control arms' spec: 60 workers, 3,000 reads.
func (p plan) storm() stormSpec {
	return stormSpec{p.StormWorkers, p.StormRequests, p.StormMin, p.StormTimeout, p.Warmup, p.Recovery}
}

// floor is the floor arm's spec: one read at a time for FloorStorm, on a
// server the control arm has just warmed, with no recovery phase.
func (p plan) floor() stormSpec {
	return stormSpec{p.FloorWorkers, 0, 0, p.FloorStorm, p.Warmup / 2, 0}
}

func progress(scenario, ph string, rec *recorder, arms ...string) {
	var parts []string
	for _, arm := range arms {
		st := summarize(rec.sel(arm, ph))
		part := fmt.Sprintf("%s n=%d p50=%.1fms p99=%.1fms", arm, st.N, st.P50, st.P99)
		if st.Errors > 0 {
			part += fmt.Sprintf(" errors=%d%v", st.Errors, st.ByCode)
		}
		parts = append(parts, part)
	}
	fmt.Printf("%-8s %-9s %s\n", scenario, ph, strings.Join(parts, "  "))
}

// byKind prints, per phase, the latency of each kind of request the given
// arms sent together (an editor's read, list, search and save), for -only
// runs: which request makes a mixed arm's tail.
func byKind(scenario string, rec *recorder, phases []string, arms ...string) {
	for _, ph := range phases {
		kinds := map[string][]sample{}
		for _, arm := range arms {
			for _, s := range rec.sel(arm, ph) {
				k := kindOf(s.Method, s.URL)
				kinds[k] = append(kinds[k], s)
			}
		}
		names := make([]string, 0, len(kinds))
		for k := range kinds {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			st := summarize(kinds[k])
			fmt.Printf("%-8s %-9s %-48s n=%d p50=%.1fms p95=%.1fms p99=%.1fms\n", scenario, ph, k, st.N, st.P50, st.P95, st.P99)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

func rowsURL(base string, t *tenant, limit int) string {
	return fmt.Sprintf("%s/api/v1/tables/%s/rows?limit=%d", base, t.TableID, limit)
}

// stormOutcome is what one run of the storm scenario measured.
type stormOutcome struct {
	rec                       *recorder
	warmup                    stats // the victim's, starting beside the storm realm's four warm-up workers
	baseline, storm, recovery stats
	stormArm                  closedStats
	metricsBefore, after      fairnessCounts
}

// runStorm: a victim realm reads 100 rows at a steady open-model rate through
// warm-up, baseline, storm and recovery (none when sp.recovery is 0); in the
// storm phase a storm realm runs heavy 200-row reads from sp.workers
// concurrent workers that honor Retry-After, until sp.requests have been
// answered and sp.min has passed, or sp.timeout.
func runStorm(ctx context.Context, p plan, sp stormSpec, base, name string, victim, storm *tenant) (*stormOutcome, error) {
	rec := newRecorder()
	stopVictim := victimFor(ctx, p, rec, base, victim)
	out := &stormOutcome{rec: rec}

	rec.begin("warmup")
	wctx, wcancel := context.WithTimeout(ctx, sp.warmup)
	closedArm(wctx, rec, "storm", 4, 0, 0, true, rowsURL(base, storm, 200), storm.Token)
	wcancel()
	progress(name, "warmup", rec, "victim", "storm")

	rec.begin("baseline")
	sleepCtx(ctx, p.Baseline)
	progress(name, "baseline", rec, "victim")

	var err error
	if out.metricsBefore, err = scrape(ctx, base, storm.RealmID); err != nil {
		stopVictim()
		return nil, err
	}
	rec.begin("storm")
	sctx, scancel := context.WithTimeout(ctx, sp.timeout)
	out.stormArm = closedArm(sctx, rec, "storm", sp.workers, sp.requests, sp.min, true, rowsURL(base, storm, 200), storm.Token)
	scancel()
	progress(name, "storm", rec, "victim", "storm")
	if out.after, err = scrape(ctx, base, storm.RealmID); err != nil {
		stopVictim()
		return nil, err
	}

	if sp.recovery > 0 {
		rec.begin("recovery")
		sleepCtx(ctx, sp.recovery)
	}
	stopVictim()
	rec.end()
	if sp.recovery > 0 {
		progress(name, "recovery", rec, "victim")
	}

	out.warmup = summarize(rec.sel("victim", "warmup"))
	out.baseline = summarize(rec.sel("victim", "baseline"))
	out.storm = summarize(rec.sel("victim", "storm"))
	out.recovery = summarize(rec.sel("victim", "recovery"))
	return out, nil
}

// noisyOutcome is what the noisy-agent scenario measured.
type noisyOutcome struct {
	rec      *recorder
	editors  map[string][2]stats // realm arm → baseline, noise
	agent    []sample
	duration time.Duration
}

// editorTargets is an editor's mix: read a page, list apps, search, save a row.
func editorTargets(base string, t *tenant, token string) []vegeta.Target {
	h := bearer(token)
	hj := bearer(token)
	hj.Set("Content-Type", "application/json")
	save := fmt.Sprintf(`{"rows":[{"cells":{%q:"edited by the harness"}}]}`, t.Fields["Name"])
	return []vegeta.Target{
		{Method: "GET", URL: rowsURL(base, t, 50), Header: h},
		{Method: "GET", URL: base + "/api/v1/apps", Header: h},
		{Method: "GET", URL: fmt.Sprintf("%s/api/v1/tables/%s/rows?limit=50&q=harbor", base, t.TableID), Header: h},
		{Method: "POST", URL: base + "/api/v1/tables/" + t.TableID + "/rows", Header: hj, Body: []byte(save)},
	}
}

// runNoisy: editors in realm A (two) and realm B (one) read, list, search and
// save at a steady rate; after a baseline an agent token in realm A, capped at
// 60 a minute, tries AgentRate requests a second.
func runNoisy(ctx context.Context, p plan, base string, a, b *tenant, editorsA []string, editorB, agentToken string) *noisyOutcome {
	rec := newRecorder()
	ectx, ecancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	arms := map[string][]vegeta.Target{
		"editor-a1": editorTargets(base, a, editorsA[0]),
		"editor-a2": editorTargets(base, a, editorsA[1]),
		"editor-b":  editorTargets(base, b, editorB),
	}
	for arm, targets := range arms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			openArm(ectx, rec, arm, p.EditorRate, targets...)
		}()
	}
	rec.begin("warmup")
	sleepCtx(ctx, p.Warmup/2)
	rec.begin("baseline")
	sleepCtx(ctx, p.Noise)
	progress("noisy", "baseline", rec, "editor-a1", "editor-a2", "editor-b")

	rec.begin("noise")
	actx, acancel := context.WithTimeout(ctx, p.Noise)
	start := time.Now()
	openArm(actx, rec, "agent", p.AgentRate, vegeta.Target{Method: "GET", URL: rowsURL(base, a, 20), Header: bearer(agentToken)})
	acancel()
	out := &noisyOutcome{rec: rec, duration: time.Since(start)}
	ecancel()
	wg.Wait()
	rec.end()
	progress("noisy", "noise", rec, "editor-a1", "editor-a2", "editor-b", "agent")
	byKind("noisy", rec, []string{"baseline", "noise"}, "editor-a1", "editor-a2", "editor-b")

	merge := func(ph string, arms ...string) stats {
		var ss []sample
		for _, arm := range arms {
			ss = append(ss, rec.sel(arm, ph)...)
		}
		return summarize(ss)
	}
	out.editors = map[string][2]stats{
		"realm_a": {merge("baseline", "editor-a1", "editor-a2"), merge("noise", "editor-a1", "editor-a2")},
		"realm_b": {merge("baseline", "editor-b"), merge("noise", "editor-b")},
	}
	out.agent = rec.sel("agent", "noise")
	return out
}

// manyOutcome is what the many-realms scenario measured.
type manyOutcome struct {
	rec             *recorder
	baseline, storm stats
	storms          closedStats
}

// runMany: one quiet realm reads at a steady rate; after a baseline, many
// storm realms run heavy reads at once, honoring Retry-After, for a while.
func runMany(ctx context.Context, p plan, base string, quiet *tenant, storms []*tenant) *manyOutcome {
	rec := newRecorder()
	qctx, qcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		openArm(qctx, rec, "quiet", p.QuietRate, vegeta.Target{Method: "GET", URL: rowsURL(base, quiet, 100), Header: bearer(quiet.Token)})
	}()
	// Warm-up: every storm realm reads a little, so the storm phase starts
	// on a warm stack (connections, token cache, plans) as a real one would.
	rec.begin("warmup")
	var warm sync.WaitGroup
	for _, s := range storms {
		warm.Add(1)
		go func() {
			defer warm.Done()
			closedArm(ctx, rec, "storms", p.ManyWorkers, 20, 0, true, rowsURL(base, s, 200), s.Token)
		}()
	}
	warm.Wait()
	sleepCtx(ctx, p.Warmup/2)
	rec.begin("baseline")
	sleepCtx(ctx, p.Baseline)
	progress("many", "baseline", rec, "quiet")

	rec.begin("storm")
	sctx, scancel := context.WithTimeout(ctx, p.ManyStorm)
	var mu sync.Mutex
	out := &manyOutcome{rec: rec}
	var swg sync.WaitGroup
	for _, s := range storms {
		swg.Add(1)
		go func() {
			defer swg.Done()
			st := closedArm(sctx, rec, "storms", p.ManyWorkers, 0, 0, true, rowsURL(base, s, 200), s.Token)
			mu.Lock()
			out.storms.Requests += st.Requests
			out.storms.OK += st.OK
			out.storms.Refused += st.Refused
			out.storms.Errors += st.Errors
			mu.Unlock()
		}()
	}
	swg.Wait()
	scancel()
	qcancel()
	wg.Wait()
	rec.end()
	progress("many", "storm", rec, "quiet", "storms")
	out.baseline = summarize(rec.sel("quiet", "baseline"))
	out.storm = summarize(rec.sel("quiet", "storm"))
	return out
}

// fairnessCounts are the controller's counters for one realm, from /metrics.
type fairnessCounts struct {
	Dispatched float64 `json:"dispatched"`
	Refused    float64 `json:"refused"`
	// Waited is the seconds its work spent queued for a seat, the sum of
	// appdor_fairness_wait_seconds.
	Waited float64 `json:"waited_s"`
}

// metricsSnapshot is one read of /metrics, by family name.
type metricsSnapshot map[string]*dto.MetricFamily

func scrapeAll(ctx context.Context, base string) (metricsSnapshot, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/metrics", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(io.Reader(res.Body))
	if err != nil {
		return nil, fmt.Errorf("parsing /metrics: %w", err)
	}
	return families, nil
}

// series is the series of name whose labels include every pair in match.
func (m metricsSnapshot) series(name string, match map[string]string) []*dto.Metric {
	var out []*dto.Metric
	for _, s := range m[name].GetMetric() {
		n := 0
		for _, l := range s.GetLabel() {
			if v, want := match[l.GetName()]; want && l.GetValue() == v {
				n++
			}
		}
		if n == len(match) {
			out = append(out, s)
		}
	}
	return out
}

// sum adds up the counter (gauge, or histogram's sum) name over the series whose labels
// include every pair in match; ok is false when the family is absent.
func (m metricsSnapshot) sum(name string, match map[string]string) (total float64, ok bool) {
	if _, ok := m[name]; !ok {
		return 0, false
	}
	for _, s := range m.series(name, match) {
		switch {
		case s.GetCounter() != nil:
			total += s.GetCounter().GetValue()
		case s.GetGauge() != nil:
			total += s.GetGauge().GetValue()
		case s.GetUntyped() != nil:
			total += s.GetUntyped().GetValue()
		case s.GetHistogram() != nil:
			total += s.GetHistogram().GetSampleSum()
		}
	}
	return total, true
}

// fairness sums the controller's counters of realm over levels and reasons:
// appdor_fairness_dispatched_total{realm,level} (before the rename,
// appdor_fairness_admitted_total{realm,class}) and
// appdor_fairness_refused_total{realm,level,reason}, and the seconds waited,
// appdor_fairness_wait_seconds{realm,level}.
func (m metricsSnapshot) fairness(realm string) fairnessCounts {
	var c fairnessCounts
	var ok bool
	if c.Dispatched, ok = m.sum("appdor_fairness_dispatched_total", map[string]string{"realm": realm}); !ok {
		c.Dispatched, _ = m.sum("appdor_fairness_admitted_total", map[string]string{"realm": realm})
	}
	c.Refused, _ = m.sum("appdor_fairness_refused_total", map[string]string{"realm": realm})
	c.Waited, _ = m.sum("appdor_fairness_wait_seconds", map[string]string{"realm": realm})
	return c
}

// served is how many requests other than GET /metrics the server answered
// 200, from the count of appdor_http_request_duration_seconds.
func (m metricsSnapshot) served() float64 {
	const name = "appdor_http_request_duration_seconds"
	total := 0.0
	for _, s := range m.series(name, map[string]string{"status": "200"}) {
		total += float64(s.GetHistogram().GetSampleCount())
	}
	for _, s := range m.series(name, map[string]string{"status": "200", "route": "/metrics"}) {
		total -= float64(s.GetHistogram().GetSampleCount())
	}
	return total
}

// poolAcquires is the server's appdor_db_pool_acquires_total.
func (m metricsSnapshot) poolAcquires() float64 {
	v, _ := m.sum("appdor_db_pool_acquires_total", nil)
	return v
}

// scrape reads /metrics and sums the fairness counters of realm.
func scrape(ctx context.Context, base, realm string) (fairnessCounts, error) {
	m, err := scrapeAll(ctx, base)
	if err != nil {
		return fairnessCounts{}, err
	}
	return m.fairness(realm), nil
}
