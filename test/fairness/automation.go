package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	vegeta "github.com/tsenart/vegeta/v12/lib"
	"gonum.org/v1/plot/plotter"
)

// The automation-storm scenario: realm S (autoS) imports 100,000 rows by CSV
// and patches its rows in batches, on a table whose automations update the
// rows they fire on and send webhooks; realm B (the storm realm) sends the
// storm scenario's API burst at the same time; realm Q (autoQ) reads and
// writes lightly throughout, with a webhook automation of its own. Every
// webhook goes to a sink in the harness, which checks its signature and
// records when it came.

// sink is the harness's webhook receiver, on loopback.
type sink struct {
	srv     *http.Server
	url     string
	mu      sync.Mutex
	secrets map[string][]byte // automation id → signing key
	got     map[string]*delivery
	bad     int // deliveries whose signature did not verify
	resent  int // a webhook-id seen again (a retry of one delivered)
	// rowsOf is the automation whose deliveries' rows the sink keeps (Q's,
	// to match them with Q's writes). The others' are only counted: parsing
	// S's batches of up to 1,000 rows into maps, on the cores and the heap
	// of the process that measures Q's latency, is load of the harness's
	// own, not of Appdor's.
	rowsOf string
}

// delivery is one webhook-id the sink received.
type delivery struct {
	At         time.Time
	Automation string
	Rows       []struct {
		ID    string                     `json:"id"`
		Cells map[string]json.RawMessage `json:"cells"`
	}
}

func newSink() (*sink, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	k := &sink{url: "http://" + l.Addr().String() + "/hook", secrets: map[string][]byte{}, got: map[string]*delivery{}}
	k.srv = &http.Server{Handler: k, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = k.srv.Serve(l) }()
	return k, nil
}

func (k *sink) close() { _ = k.srv.Close() }

// secret keeps an automation's signing secret (whsec_ and base64).
func (k *sink) secret(automation, secret string) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || !strings.HasPrefix(secret, "whsec_") {
		return fmt.Errorf("automation %s: a secret that is not whsec_ and base64: %q", automation, secret)
	}
	k.mu.Lock()
	k.secrets[automation] = key
	k.mu.Unlock()
	return nil
}

func (k *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	var p struct {
		Data struct {
			AutomationID string `json:"automation_id"`
		} `json:"data"`
	}
	_ = json.Unmarshal(body, &p)
	var rows struct {
		Data struct {
			Rows []struct {
				ID    string                     `json:"id"`
				Cells map[string]json.RawMessage `json:"cells"`
			} `json:"rows"`
		} `json:"data"`
	}
	k.mu.Lock()
	keep := p.Data.AutomationID == k.rowsOf
	k.mu.Unlock()
	if keep {
		_ = json.Unmarshal(body, &rows)
	}
	id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
	k.mu.Lock()
	defer k.mu.Unlock()
	mac := hmac.New(sha256.New, k.secrets[p.Data.AutomationID])
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	signed := false
	for _, sig := range strings.Fields(r.Header.Get("webhook-signature")) {
		signed = signed || hmac.Equal([]byte(sig), []byte(want))
	}
	if !signed || id == "" {
		k.bad++
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if k.got[id] != nil {
		k.resent++
	} else {
		d := &delivery{At: at, Automation: p.Data.AutomationID}
		d.Rows = rows.Data.Rows
		k.got[id] = d
	}
	w.WriteHeader(http.StatusNoContent)
}

// autoSetup is what the scenario's realms carry: their automations.
type autoSetup struct {
	s, q         *tenant
	sAutomations []string // S's automation ids
	qAutomation  string
	qNext, sNext atomic.Int64 // Q's next row to write; S's patch round
	qDry         atomic.Int64 // Q's writes not sent: no row left to write once
	sVersions    []int64      // S's seeded rows' versions, by index
	sVersionsMu  sync.Mutex
}

// createAutomation makes one automation through the API and gives its
// webhook secret to the sink.
func createAutomation(ctx context.Context, base string, t *tenant, k *sink, body map[string]any) (string, error) {
	code, out, err := apiCall(ctx, "POST", base+"/api/v1/tables/"+t.TableID+"/automations", t.Token, body)
	if err != nil || code != 201 {
		return "", fmt.Errorf("create automation %v: %d %.300s %v", body["name"], code, out, err)
	}
	var a struct {
		ID      string
		Actions []struct{ Type, Secret string }
	}
	if err := json.Unmarshal(out, &a); err != nil {
		return "", err
	}
	for _, act := range a.Actions {
		if act.Type == "webhook" {
			if err := k.secret(a.ID, act.Secret); err != nil {
				return "", err
			}
		}
	}
	return a.ID, nil
}

// automationsWithSink starts the webhook sink and sets up the
// automation-storm scenario's automations on realms S and Q, pointing at it.
func automationsWithSink(ctx context.Context, base string, r *realms) (*sink, *autoSetup, error) {
	k, err := newSink()
	if err != nil {
		return nil, nil, err
	}
	autos, err := setupAutomations(ctx, base, r.autoS, r.autoQ, k)
	if err != nil {
		k.close()
		return nil, nil, err
	}
	return k, autos, nil
}

// setupAutomations makes S's and Q's automations, sending their webhooks to
// the sink.
func setupAutomations(ctx context.Context, base string, s, q *tenant, k *sink) (*autoSetup, error) {
	a := &autoSetup{s: s, q: q, sVersions: make([]int64, len(s.RowIDs))}
	for i := range a.sVersions {
		a.sVersions[i] = 1
	}
	won, err := createAutomation(ctx, base, s, k, map[string]any{
		"name": "Flag won deals", "enabled": true,
		"trigger":   map[string]any{"event": "row.created"},
		"condition": []string{s.Fields["Status"] + ":eq:won"},
		"actions": []map[string]any{
			{"type": "update_row", "cells": map[string]any{s.Fields["Done"]: true}},
			{"type": "webhook", "url": k.url},
		},
	})
	if err != nil {
		return nil, err
	}
	amount, err := createAutomation(ctx, base, s, k, map[string]any{
		"name": "Amount changed", "enabled": true,
		"trigger": map[string]any{"event": "row.updated", "fields": []string{s.Fields["Amount"]}},
		"actions": []map[string]any{{"type": "webhook", "url": k.url}},
	})
	if err != nil {
		return nil, err
	}
	a.sAutomations = []string{won, amount}
	a.qAutomation, err = createAutomation(ctx, base, q, k, map[string]any{
		"name": "Notes changed", "enabled": true,
		"trigger": map[string]any{"event": "row.updated", "fields": []string{q.Fields["Notes"]}},
		"actions": []map[string]any{{"type": "webhook", "url": k.url}},
	})
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	k.rowsOf = a.qAutomation
	k.mu.Unlock()
	return a, nil
}

// qWrite is one of Q's writes: the row and the marker it wrote, and when
// its answer came.
type qWrite struct {
	Row, Marker string
	Answered    time.Time
	At          time.Duration // intended send time, from the scenario's start
	OK          bool
}

// automationOutcome is what one run of the automation-storm scenario
// measured.
type automationOutcome struct {
	rec                            *recorder
	baseline, storm, recovery      stats // Q's reads
	autoBaseline, autoStorm        stats // Q's automation latency: its write's answer to the sink's receipt
	writes                         []qWrite
	qMissing, qTwice, qWriteErrors int
	sImport                        *importOutcome
	sPatches                       closedStats
	burst                          closedStats
	sPending, sUndelivered         int64 // S's events and deliveries not done when the drain ended
	sDelivered                     int   // S's deliveries the sink received
	drain                          time.Duration
	depth                          plotter.XYs // S's pending events over the scenario's time
}

// runAutomationStorm runs the scenario on base, whose server's webhooks may
// reach loopback; every write of Q is a row it has not written before.
func runAutomationStorm(ctx context.Context, p plan, s *stack, base, name string, a *autoSetup, burst *tenant, k *sink) *automationOutcome {
	csvBytes(p.AutoImportRows) // before anything is measured
	rec := newRecorder()
	out := &automationOutcome{rec: rec}
	qctx, qcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		openArm(qctx, rec, "quiet", p.VictimRate, vegeta.Target{Method: "GET", URL: rowsURL(base, a.q, 100), Header: bearer(a.q.Token)})
	}()
	var writesMu sync.Mutex
	go func() {
		defer wg.Done()
		w := qWriter(qctx, rec, base, a, p.QuietWriteRate)
		writesMu.Lock()
		out.writes = w
		writesMu.Unlock()
	}()
	// S's queue depth, sampled from the database every half second.
	go func() {
		defer wg.Done()
		out.depth = sampleDepth(qctx, s, rec, a.s.RealmID)
	}()

	rec.begin("warmup")
	sleepCtx(ctx, p.Warmup/2)
	rec.begin("baseline")
	sleepCtx(ctx, p.AutoBaseline)
	progress(name, "baseline", rec, "quiet")

	rec.begin("storm")
	stormStart := time.Now()
	var swg sync.WaitGroup
	sctx, scancel := context.WithCancel(ctx)
	swg.Add(2)
	go func() {
		defer swg.Done()
		out.sImport = importCSV(ctx, p, base, a.s, p.AutoImportRows)
	}()
	go func() {
		defer swg.Done()
		out.burst = closedArm(ctx, rec, "burst", p.StormWorkers, p.StormRequests, p.StormMin, true, rowsURL(base, burst, 200), burst.Token)
	}()
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		out.sPatches = sPatcher(sctx, rec, base, a, p.AutoPatchWorkers, p.AutoPatches)
	}()
	swg.Wait()
	if d := p.StormMin - time.Since(stormStart); d > 0 {
		sleepCtx(ctx, d)
	}
	scancel()
	pwg.Wait()
	progress(name, "storm", rec, "quiet", "burst", "spatch")
	fmt.Printf("%-8s S imported %d rows (status %d, %d retries after a 429) in %.1fs; %d batch patches (%d refused, %d errors); burst %d reads ok, %d refused\n",
		name, out.sImport.Inserted, out.sImport.Code, out.sImport.Retries, out.sImport.Duration.Seconds(), out.sPatches.OK, out.sPatches.Refused, out.sPatches.Errors,
		out.burst.OK, out.burst.Refused)

	rec.begin("recovery")
	sleepCtx(ctx, p.Recovery)
	qcancel()
	wg.Wait()
	rec.end()
	progress(name, "recovery", rec, "quiet")

	// Drain: every event and delivery of S and Q done, or the time is up.
	drainStart := time.Now()
	for {
		sp, su := pendingWork(ctx, s, a.s.RealmID)
		qp, qu := pendingWork(ctx, s, a.q.RealmID)
		out.sPending, out.sUndelivered = sp, su
		if sp+su+qp+qu == 0 || time.Since(drainStart) > p.AutoDrain || ctx.Err() != nil {
			break
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
	out.drain = time.Since(drainStart)

	out.baseline = summarize(rec.sel("quiet", "baseline"))
	out.storm = summarize(rec.sel("quiet", "storm"))
	out.recovery = summarize(rec.sel("quiet", "recovery"))
	out.tally(rec, a, k)
	fmt.Printf("%-8s Q automation latency p50/p99 ms: baseline %.0f/%.0f (n=%d), storm %.0f/%.0f (n=%d); Q writes %d, missing %d, twice %d; S deliveries %d, pending after %.0fs of drain: %d events, %d deliveries\n",
		name, out.autoBaseline.P50, out.autoBaseline.P99, out.autoBaseline.N, out.autoStorm.P50, out.autoStorm.P99, out.autoStorm.N,
		len(out.writes), out.qMissing, out.qTwice, out.sDelivered, out.drain.Seconds(), out.sPending, out.sUndelivered)
	if n := a.qDry.Swap(0); n > 0 {
		fmt.Printf("%-8s Q's writer ran out of rows to write once: %d writes not sent, so Q's automation latency has fewer samples\n", name, n)
	}
	return out
}

// tally matches Q's writes with the sink's deliveries: each answered write
// must arrive once (one webhook-id), and its latency is the write's answer
// to the sink's receipt.
func (o *automationOutcome) tally(rec *recorder, a *autoSetup, k *sink) {
	k.mu.Lock()
	byMarker := map[string][]*delivery{}
	notes := a.q.Fields["Notes"]
	for _, d := range k.got {
		switch d.Automation {
		case a.qAutomation:
			for _, r := range d.Rows {
				var m string
				_ = json.Unmarshal(r.Cells[notes], &m)
				byMarker[r.ID+" "+m] = append(byMarker[r.ID+" "+m], d)
			}
		case a.sAutomations[0], a.sAutomations[1]:
			o.sDelivered++
		}
	}
	k.mu.Unlock()
	var base, storm []sample
	ph := map[string]phase{}
	rec.mu.Lock()
	for _, p := range rec.phases {
		ph[p.Name] = p
	}
	rec.mu.Unlock()
	for _, w := range o.writes {
		if !w.OK {
			o.qWriteErrors++
			continue
		}
		ds := byMarker[w.Row+" "+w.Marker]
		switch {
		case len(ds) == 0:
			o.qMissing++
			continue
		case len(ds) > 1:
			o.qTwice++
		}
		s := sample{Arm: "qauto", At: w.At, Latency: max(ds[0].At.Sub(w.Answered), 0), Code: 200}
		rec.add(s)
		switch {
		case w.At >= ph["baseline"].Start && w.At < ph["baseline"].End:
			base = append(base, s)
		case w.At >= ph["storm"].Start && w.At < ph["storm"].End:
			storm = append(storm, s)
		}
	}
	o.autoBaseline, o.autoStorm = summarize(base), summarize(storm)
}

// qWriter sets the Notes of one of Q's rows rate times a second, each to a
// marker of its own, each row once, until ctx ends; it returns the writes.
func qWriter(ctx context.Context, rec *recorder, base string, a *autoSetup, rate int) []qWrite {
	client := clientFor(a.q.Token)
	var mu sync.Mutex
	var out []qWrite
	var wg sync.WaitGroup
	t := time.NewTicker(time.Second / time.Duration(rate))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return out
		case <-t.C:
		}
		i := int(a.qNext.Add(1) - 1)
		if i >= len(a.q.RowIDs) {
			a.qDry.Add(1) // no row left to write once
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			row, marker := a.q.RowIDs[i], fmt.Sprintf("automation check %d", i)
			body := fmt.Sprintf(`{"rows":[{"id":%q,"version":1,"cells":{%q:%q}}]}`, row, a.q.Fields["Notes"], marker)
			req, _ := http.NewRequestWithContext(context.WithoutCancel(ctx), "PATCH", base+"/api/v1/tables/"+a.q.TableID+"/rows", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+a.q.Token)
			req.Header.Set("Content-Type", "application/json")
			sent := time.Now()
			w := qWrite{Row: row, Marker: marker, At: sent.Sub(rec.start)}
			s := sample{Arm: "qwrite", At: w.At}
			res, err := client.Do(req)
			if err != nil {
				s.Failed = err.Error()
			} else {
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				s.Code = res.StatusCode
				w.OK = res.StatusCode == 200
				if !w.OK {
					s.ErrCode = errorCode(b)
				}
			}
			w.Answered = time.Now()
			s.Latency = w.Answered.Sub(sent)
			rec.add(s)
			mu.Lock()
			out = append(out, w)
			mu.Unlock()
		}()
	}
}

// sPatcher runs workers that each set Amount on 100 of S's seeded rows at a
// time (their own rows, keeping their versions), until ctx ends.
func sPatcher(ctx context.Context, rec *recorder, base string, a *autoSetup, workers int, total int64) closedStats {
	var st closedStats
	var sent int64 // patches begun, up to total
	client := clientFor(a.s.Token)
	per := len(a.s.RowIDs) / workers
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; ctx.Err() == nil && atomic.AddInt64(&sent, 1) <= total; round++ {
				lo := w*per + (round*100)%per
				hi := min(lo+100, (w+1)*per)
				type patch struct {
					ID      string         `json:"id"`
					Version int64          `json:"version"`
					Cells   map[string]any `json:"cells"`
				}
				var body struct {
					Rows []patch `json:"rows"`
				}
				a.sVersionsMu.Lock()
				for i := lo; i < hi; i++ {
					body.Rows = append(body.Rows, patch{a.s.RowIDs[i], a.sVersions[i], map[string]any{a.s.Fields["Amount"]: float64(round*100 + i)}})
				}
				a.sVersionsMu.Unlock()
				b, _ := json.Marshal(body)
				req, _ := http.NewRequestWithContext(ctx, "PATCH", base+"/api/v1/tables/"+a.s.TableID+"/rows", strings.NewReader(string(b)))
				req.Header.Set("Authorization", "Bearer "+a.s.Token)
				req.Header.Set("Content-Type", "application/json")
				sent := time.Now()
				res, err := client.Do(req)
				atomic.AddInt64(&st.Requests, 1)
				s := sample{Arm: "spatch", At: sent.Sub(rec.start)}
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					s.Failed, s.Latency = err.Error(), time.Since(sent)
					atomic.AddInt64(&st.Errors, 1)
					rec.add(s)
					continue
				}
				rb, _ := io.ReadAll(res.Body)
				res.Body.Close()
				s.Code, s.Latency = res.StatusCode, time.Since(sent)
				switch {
				case res.StatusCode == 200:
					atomic.AddInt64(&st.OK, 1)
					var got struct {
						Rows []struct {
							ID      string `json:"id"`
							Version int64  `json:"version"`
						} `json:"rows"`
					}
					_ = json.Unmarshal(rb, &got)
					a.sVersionsMu.Lock()
					for j, r := range got.Rows {
						if lo+j < hi && a.s.RowIDs[lo+j] == r.ID {
							a.sVersions[lo+j] = r.Version
						}
					}
					a.sVersionsMu.Unlock()
				case res.StatusCode == 429 || res.StatusCode == 503:
					atomic.AddInt64(&st.Refused, 1)
					s.ErrCode = errorCode(rb)
					sleepCtx(ctx, time.Second) // as a client honouring Retry-After does
				default:
					atomic.AddInt64(&st.Errors, 1)
					s.ErrCode = errorCode(rb)
				}
				rec.add(s)
			}
		}()
	}
	wg.Wait()
	st.Elapsed = time.Since(start)
	return st
}

// importCSV imports rows rows into t by CSV, sending it again after
// Retry-After when it is refused before a row was read. The import arm and
// the automation storm both import with it.
func importCSV(ctx context.Context, p plan, base string, t *tenant, rows int) *importOutcome {
	out := &importOutcome{}
	ictx, cancel := context.WithTimeout(ctx, p.ImportTimeout)
	defer cancel()
	start := time.Now()
	for {
		req, _ := http.NewRequestWithContext(ictx, "POST", base+"/api/v1/tables/"+t.TableID+"/csv", csvBody(rows))
		req.Header.Set("Authorization", "Bearer "+t.Token)
		req.Header.Set("Content-Type", "text/csv")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			out.Message = err.Error()
			break
		}
		body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		res.Body.Close()
		out.Code = res.StatusCode
		var answer struct {
			Inserted int `json:"inserted"`
			Failed   int `json:"failed"`
			Error    struct {
				Details struct {
					Inserted int `json:"inserted"`
					Failed   int `json:"failed"`
				} `json:"details"`
			} `json:"error"`
		}
		_ = json.Unmarshal(body, &answer)
		out.Inserted, out.Failed = answer.Inserted, answer.Failed
		if res.StatusCode >= 300 {
			// A stopped import tells what it had done in its error's details.
			out.Inserted, out.Failed = answer.Error.Details.Inserted, answer.Error.Details.Failed
			out.ErrCode, out.Message = errorCode(body), fmt.Sprintf("%.200s", body)
		}
		// Refused at admission, before a row was read: a client with retries
		// sends it again after Retry-After, as the storm's clients do.
		if res.StatusCode != http.StatusTooManyRequests || out.Inserted > 0 {
			break
		}
		secs, err := strconv.Atoi(res.Header.Get("Retry-After"))
		if err != nil || secs < 1 {
			secs = 1
		}
		out.Retries++
		select {
		case <-time.After(time.Duration(secs) * time.Second):
		case <-ictx.Done():
			out.Duration = time.Since(start)
			return out
		}
	}
	out.Duration = time.Since(start)
	return out
}

// pendingWork counts a realm's automation events not yet evaluated and its
// webhook deliveries not yet delivered (pending, or failed and waiting for a
// retry), reading the queue tables as the database's owner.
func pendingWork(ctx context.Context, s *stack, realm string) (events, deliveries int64) {
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		return -1, -1
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM automation_events WHERE realm_id = $1),
	                                 (SELECT count(*) FROM webhook_deliveries WHERE realm_id = $1 AND state <> 'delivered')`, realm).
		Scan(&events, &deliveries)
	if err != nil {
		return -1, -1
	}
	return events, deliveries
}

// sampleDepth reads realm's pending automation events every half second
// until ctx ends: the chart's queue-depth panel.
func sampleDepth(ctx context.Context, s *stack, rec *recorder, realm string) plotter.XYs {
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		return nil
	}
	defer conn.Close(context.Background())
	var pts plotter.XYs
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		var n int64
		if conn.QueryRow(ctx, `SELECT count(*) FROM automation_events WHERE realm_id = $1`, realm).Scan(&n) == nil {
			pts = append(pts, plotter.XY{X: rec.now().Seconds(), Y: float64(n)})
		}
		select {
		case <-ctx.Done():
			return pts
		case <-t.C:
		}
	}
}

// json is the outcome for the results file.
func (o *automationOutcome) json(bound float64) map[string]any {
	return map[string]any{
		"quiet_read": map[string]any{
			"baseline_p99_ms": o.baseline.P99, "storm_p99_ms": o.storm.P99, "recovery_p99_ms": o.recovery.P99,
			"ratio": ratio(o.storm.P99, o.baseline.P99), "bound": bound,
			"baseline": o.baseline, "storm": o.storm, "recovery": o.recovery,
		},
		"quiet_automation": map[string]any{
			"baseline_p99_ms": o.autoBaseline.P99, "storm_p99_ms": o.autoStorm.P99,
			"ratio": ratio(o.autoStorm.P99, o.autoBaseline.P99), "bound": stormBound,
			"baseline": o.autoBaseline, "storm": o.autoStorm,
		},
		"quiet_writes": len(o.writes), "quiet_write_errors": o.qWriteErrors,
		"quiet_missing": o.qMissing, "quiet_twice": o.qTwice,
		"s_import":    map[string]any{"status": o.sImport.Code, "inserted": o.sImport.Inserted, "duration_s": o.sImport.Duration.Seconds(), "message": o.sImport.Message},
		"s_patches":   map[string]any{"ok": o.sPatches.OK, "refused": o.sPatches.Refused, "errors": o.sPatches.Errors},
		"s_delivered": o.sDelivered, "s_pending_events": o.sPending, "s_undelivered": o.sUndelivered, "drain_s": o.drain.Seconds(),
		"burst": map[string]any{"ok": o.burst.OK, "refused": o.burst.Refused, "errors": o.burst.Errors},
	}
}

// print says what the scenario measured, for the end of a run.
func (o *automationOutcome) print(name string, readRatio, autoRatio float64) {
	fmt.Printf("%s: Q read p50/p99 ms baseline %.1f/%.1f (n=%d), storm %.1f/%.1f (n=%d), x%.2f; Q automation p50/p99 ms baseline %.0f/%.0f (n=%d), storm %.0f/%.0f (n=%d), x%.2f\n",
		name, o.baseline.P50, o.baseline.P99, o.baseline.N, o.storm.P50, o.storm.P99, o.storm.N, readRatio,
		o.autoBaseline.P50, o.autoBaseline.P99, o.autoBaseline.N, o.autoStorm.P50, o.autoStorm.P99, o.autoStorm.N, autoRatio)
	fmt.Printf("%s: Q %d writes (%d failed), %d not delivered, %d delivered twice; S %d rows imported, %d patches, %d deliveries, %d events and %d deliveries left after %.0fs of drain\n",
		name, len(o.writes), o.qWriteErrors, o.qMissing, o.qTwice, o.sImport.Inserted, o.sPatches.OK, o.sDelivered, o.sPending, o.sUndelivered, o.drain.Seconds())
}
