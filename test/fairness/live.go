package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The live arm: LiveRealms realms hold open event streams — the writer
// realm its whole per-realm cap (LiveWriterStreams), the others
// LiveStreamsEach — and the writer realm writes LiveRowsPerSecond rows a
// second in batches of LiveBatch, while the victim reads at its rate. It
// measures the victim's read p99 against its baseline, what a stream costs
// the server (resident memory and goroutines, from /metrics), the server's
// CPU while the writes run, and how late each batch reaches each of the
// writer realm's streams (from the write's answer to the event's arrival),
// LiveTracked of them.

// liveOutcome is what the live arm measured.
type liveOutcome struct {
	rec              *recorder
	baseline, during stats
	Streams          int     `json:"streams"`
	Tracked          int     `json:"streams_timed"`
	Realms           int     `json:"realms"`
	Refused          int64   `json:"streams_refused"`
	Ended            int64   `json:"streams_ended_early"`
	BytesPerStream   float64 `json:"rss_bytes_per_stream"`
	GoroutinesPer    float64 `json:"goroutines_per_stream"`
	CPUCores         float64 `json:"server_cpu_cores_while_writing"`
	Batches          int     `json:"batches"`
	Deliveries       int64   `json:"deliveries"`
	Missing          int64   `json:"deliveries_missing"` // a batch some writer stream never heard of (no rows, no resync)
	Resyncs          int64   `json:"resyncs"`
	DeliveryP50      float64 `json:"delivery_p50_ms"`
	DeliveryP99      float64 `json:"delivery_p99_ms"`
	ServerP50        float64 `json:"server_delivery_p50_ms"`
	ServerP99        float64 `json:"server_delivery_p99_ms"`
}

// liveStream is one open stream of the arm, reading in a goroutine.
type liveStream struct {
	// told: each rows message as it arrived, decoded only once the writes
	// are over (seen), so that reading adds no decoding to the cores'
	// load while the victim is measured.
	mu      sync.Mutex
	told    []toldRows
	seen    map[string]time.Time // the arrival time of each row id the stream was told of
	resyncs []time.Time
}

// toldRows is one rows message's data and when it arrived.
type toldRows struct {
	at   time.Time
	data []byte
}

// decode fills seen from told. s.mu is held.
func (s *liveStream) decode() {
	if s.seen == nil {
		s.seen = map[string]time.Time{}
	}
	for _, m := range s.told {
		var d struct{ Created []string }
		if json.Unmarshal(m.data, &d) == nil {
			for _, id := range d.Created {
				s.seen[id] = m.at
			}
		}
	}
	s.told = nil
}

func openLive(ctx context.Context, client *http.Client, base string, t *tenant, track bool, ended *atomic.Int64) (*liveStream, int, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/v1/tables/"+t.TableID+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+t.Token)
	res, err := client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	if res.StatusCode != 200 {
		res.Body.Close()
		return nil, res.StatusCode, nil
	}
	s := &liveStream{}
	go func() {
		defer res.Body.Close()
		if !track {
			// Held, not read: the harness shares the cores with the server,
			// and decoding what 2,000 streams say would be its own load.
			_, _ = io.Copy(io.Discard, res.Body)
			if ctx.Err() == nil {
				ended.Add(1)
			}
			return
		}
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 0, 4<<10), 1<<20)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = line[7:]
			case strings.HasPrefix(line, "data: ") && track:
				now := time.Now()
				switch event {
				case "rows":
					data := []byte(line[6:])
					s.mu.Lock()
					s.told = append(s.told, toldRows{now, data})
					s.mu.Unlock()
				case "resync":
					s.mu.Lock()
					s.resyncs = append(s.resyncs, now)
					s.mu.Unlock()
				}
			}
		}
		if ctx.Err() == nil {
			ended.Add(1)
		}
	}()
	return s, 200, nil
}

// runLive runs the live arm on base: holders hold streams, writer holds its
// cap and writes, victim reads.
func runLive(ctx context.Context, p plan, base string, victim, writer *tenant, holders []*tenant) *liveOutcome {
	out := &liveOutcome{rec: newRecorder(), Realms: 1 + len(holders)}
	before, _ := scrapeAll(ctx, base)
	stop := victimFor(ctx, p, out.rec, base, victim)
	// A warm-up, as in the other arms: the victim's first second holds its
	// connections' setup, which alone could double its baseline p99.
	out.rec.begin("warmup")
	sleepCtx(ctx, p.Warmup/5)
	out.rec.begin("baseline")
	sleepCtx(ctx, p.Baseline)
	progress("live", "baseline", out.rec, "victim")

	// Open the streams while the victim reads on: the writer realm's cap,
	// and the others'. That is a phase of its own: the baseline is before it.
	out.rec.begin("open")
	// The holder holds them all and times LiveTracked of the writer's
	// (holder.go).
	sets := []holdSet{{writer.Token, writer.TableID, p.LiveWriterStreams, p.LiveTracked}}
	for _, h := range holders {
		sets = append(sets, holdSet{h.Token, h.TableID, p.LiveStreamsEach, 0})
	}
	held, r, err := holdElsewhere(base, sets)
	if err != nil {
		fmt.Println("live: the stream holder:", err)
	} else {
		out.Streams += int(r.Opened)
		out.Refused += r.Refused
		out.Tracked = int(r.Tracked)
	}
	sleepCtx(ctx, time.Second)
	opened, _ := scrapeAll(ctx, base)
	if before != nil && opened != nil && out.Streams > 0 {
		rss0, _ := before.sum("process_resident_memory_bytes", nil)
		rss1, _ := opened.sum("process_resident_memory_bytes", nil)
		g0, _ := before.sum("go_goroutines", nil)
		g1, _ := opened.sum("go_goroutines", nil)
		out.BytesPerStream = (rss1 - rss0) / float64(out.Streams)
		out.GoroutinesPer = (g1 - g0) / float64(out.Streams)
	}

	// The writes: batches at a steady pace, each batch's answer time kept.
	out.rec.begin("live")
	var batches []holdBatch
	every := time.Second * time.Duration(p.LiveBatch) / time.Duration(p.LiveRowsPerSecond)
	tick := time.NewTicker(every)
	deadline := time.Now().Add(p.LiveWrites)
	n := 0
	for time.Now().Before(deadline) && ctx.Err() == nil {
		<-tick.C
		rows := make([]map[string]any, p.LiveBatch)
		for i := range rows {
			rows[i] = map[string]any{"cells": map[string]any{writer.Fields["Name"]: fmt.Sprintf("live %d", n)}}
			n++
		}
		code, body, err := apiCall(ctx, "POST", base+"/api/v1/tables/"+writer.TableID+"/rows", writer.Token, map[string]any{"rows": rows})
		at := time.Now()
		if err != nil || code != 201 {
			fmt.Printf("live: a write batch: %d %s %v\n", code, truncateBody(body), err)
			continue
		}
		var made struct{ Rows []struct{ ID string } }
		if json.Unmarshal(body, &made) == nil && len(made.Rows) > 0 {
			batches = append(batches, holdBatch{First: made.Rows[0].ID, At: at.UnixMicro()})
		}
	}
	tick.Stop()
	sleepCtx(ctx, 2*time.Second) // the last batches' events arrive
	out.rec.end()
	after, _ := scrapeAll(ctx, base)
	stop()
	progress("live", "live", out.rec, "victim")
	out.baseline = summarize(out.rec.sel("victim", "baseline"))
	out.during = summarize(out.rec.sel("victim", "live"))
	out.Batches = len(batches)
	h := hdrhistogram.New(1, 60_000_000, 3)
	if held != nil {
		r, err := held.close(batches)
		if err != nil {
			fmt.Println("live: the stream holder:", err)
		}
		out.Ended += r.Ended
		out.Missing, out.Resyncs = r.Missing, r.Resyncs
		for _, d := range r.Delays {
			_ = h.RecordValue(d)
		}
		out.Deliveries = int64(len(r.Delays))
	}

	if opened != nil && after != nil {
		c0, _ := opened.sum("process_cpu_seconds_total", nil)
		c1, _ := after.sum("process_cpu_seconds_total", nil)
		out.CPUCores = (c1 - c0) / (p.LiveWrites + 2*time.Second).Seconds()
		out.ServerP50, out.ServerP99 = histQuantiles(opened, after, "appdor_live_delivery_seconds")
	}
	out.DeliveryP50 = float64(h.ValueAtQuantile(50)) / 1000
	out.DeliveryP99 = float64(h.ValueAtQuantile(99)) / 1000
	fmt.Printf("live     streams   %d open across %d realms (%d refused, %d ended early); %.1f KB RSS and %.2f goroutines a stream\n",
		out.Streams, out.Realms, out.Refused, out.Ended, out.BytesPerStream/1024, out.GoroutinesPer)
	fmt.Printf("live     delivery  %d batches of %d rows to %d writer streams: p50 %.1f ms, p99 %.1f ms (n=%d, %d missing, %d by resync); server histogram p50 ~%.0f ms p99 ~%.0f ms; server CPU %.2f cores\n",
		out.Batches, p.LiveBatch, out.Tracked, out.DeliveryP50, out.DeliveryP99, out.Deliveries, out.Missing, out.Resyncs,
		out.ServerP50, out.ServerP99, out.CPUCores)
	return out
}

func truncateBody(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// histQuantiles estimates the median and p99, in ms, of what the histogram
// name observed between two snapshots (the upper bound of the bucket).
func histQuantiles(a, b metricsSnapshot, name string) (p50, p99 float64) {
	fb, ok := b[name]
	if !ok || len(fb.GetMetric()) == 0 {
		return 0, 0
	}
	hb := fb.GetMetric()[0].GetHistogram()
	prev := map[float64]uint64{}
	var total0 uint64
	if fa, ok := a[name]; ok && len(fa.GetMetric()) > 0 {
		ha := fa.GetMetric()[0].GetHistogram()
		total0 = ha.GetSampleCount()
		for _, bk := range ha.GetBucket() {
			prev[bk.GetUpperBound()] = bk.GetCumulativeCount()
		}
	}
	total := hb.GetSampleCount() - total0
	if total == 0 {
		return 0, 0
	}
	q := func(f float64) float64 {
		for _, bk := range hb.GetBucket() {
			if float64(bk.GetCumulativeCount()-prev[bk.GetUpperBound()]) >= f*float64(total) {
				return bk.GetUpperBound() * 1000
			}
		}
		return -1
	}
	return q(0.5), q(0.99)
}
