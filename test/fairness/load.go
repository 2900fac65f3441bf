package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// sample is one request's outcome, tagged by the arm that sent it.
type sample struct {
	Arm        string
	At         time.Duration // intended send time, from the scenario's start
	Latency    time.Duration // from the intended send time to the last byte
	Code       int
	ErrCode    string // the error code of a non-2xx JSON answer
	RetryAfter string
	Failed     string // transport error or timeout
	// Method and URL of an open-model arm's request (vegeta's strings, not
	// copied), for byKind's breakdown.
	Method, URL string
}

func (s sample) ok() bool { return s.Failed == "" && s.Code >= 200 && s.Code < 300 }

// recorder collects every sample of a scenario and the phases it went through.
type recorder struct {
	start   time.Time
	mu      sync.Mutex
	samples []sample
	phases  []phase
}

type phase struct {
	Name       string
	Start, End time.Duration
}

func newRecorder() *recorder { return &recorder{start: time.Now()} }

func (r *recorder) add(s sample) {
	r.mu.Lock()
	r.samples = append(r.samples, s)
	r.mu.Unlock()
}

func (r *recorder) now() time.Duration { return time.Since(r.start) }

// begin opens a phase and closes the one before it.
func (r *recorder) begin(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Since(r.start)
	if n := len(r.phases); n > 0 {
		r.phases[n-1].End = now
	}
	r.phases = append(r.phases, phase{Name: name, Start: now})
}

func (r *recorder) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.phases); n > 0 && r.phases[n-1].End == 0 {
		r.phases[n-1].End = time.Since(r.start)
	}
}

// select returns the samples of arm whose intended send time fell in phase.
func (r *recorder) sel(arm, phaseName string) []sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	var p *phase
	for i := range r.phases {
		if r.phases[i].Name == phaseName {
			p = &r.phases[i]
		}
	}
	if p == nil {
		return nil
	}
	var out []sample
	end := p.End
	if end == 0 {
		end = time.Duration(1<<63 - 1) // the phase is still open
	}
	for _, s := range r.samples {
		if s.Arm == arm && s.At >= p.Start && s.At < end {
			out = append(out, s)
		}
	}
	return out
}

// stats summarises samples with an HDR histogram (microsecond resolution,
// three significant digits).
type stats struct {
	N      int     `json:"samples"`
	OK     int     `json:"ok"`
	Errors int     `json:"errors"`
	P50    float64 `json:"p50_ms"`
	P95    float64 `json:"p95_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
	// ByCode counts the failures by error code (or HTTP status, or
	// "transport" for a request that got no answer).
	ByCode map[string]int `json:"errors_by_code,omitempty"`
}

func summarize(ss []sample) stats {
	h := hdrhistogram.New(1, 120_000_000, 3)
	st := stats{N: len(ss)}
	for _, s := range ss {
		if s.ok() {
			st.OK++
		} else {
			st.Errors++
			if st.ByCode == nil {
				st.ByCode = map[string]int{}
			}
			switch {
			case s.Failed != "":
				st.ByCode["transport"]++
			case s.ErrCode != "":
				st.ByCode[s.ErrCode]++
			default:
				st.ByCode[strconv.Itoa(s.Code)]++
			}
		}
		_ = h.RecordValue(max(1, s.Latency.Microseconds()))
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	st.P50, st.P95, st.P99, st.Max = ms(h.ValueAtQuantile(50)), ms(h.ValueAtQuantile(95)), ms(h.ValueAtQuantile(99)), ms(h.Max())
	return st
}

func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	return e.Error.Code
}

// openArm sends requests at a constant rate until ctx ends (an open model:
// the schedule does not wait for answers), through vegeta. Latency is taken
// from each request's intended send time, so a stalled server cannot hide
// behind a stalled client.
func openArm(ctx context.Context, rec *recorder, arm string, rate int, targets ...vegeta.Target) {
	openArmTargeter(ctx, rec, arm, rate, vegeta.NewStaticTargeter(targets...))
}

// openArmTargeter is openArm with each request made by tr (vegeta may call
// it from several goroutines at once).
func openArmTargeter(ctx context.Context, rec *recorder, arm string, rate int, tr vegeta.Targeter) {
	atk := vegeta.NewAttacker(vegeta.Timeout(10*time.Second), vegeta.KeepAlive(true), vegeta.Workers(8), vegeta.MaxBody(64<<10))
	pacer := vegeta.ConstantPacer{Freq: rate, Per: time.Second}
	interval := time.Second / time.Duration(rate)
	began := time.Now()
	results := atk.Attack(tr, pacer, 0, arm)
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	for r := range results {
		// vegeta's constant pacer sends hit k at (k+1) intervals from the start.
		intended := began.Add(time.Duration(r.Seq+1) * interval)
		lat := r.End().Sub(intended)
		if lat < r.Latency {
			lat = r.Latency
		}
		s := sample{Arm: arm, At: intended.Sub(rec.start), Latency: lat, Code: int(r.Code), Failed: r.Error, Method: r.Method, URL: r.URL}
		if r.Code >= 300 {
			s.ErrCode = errorCode(r.Body)
			s.RetryAfter = r.Headers.Get("Retry-After")
			s.Failed = ""
		}
		rec.add(s)
	}
}

// closedStats counts what a closed-loop arm did.
type closedStats struct {
	Requests int64         `json:"requests"`
	OK       int64         `json:"ok"`
	Refused  int64         `json:"refused"`
	Errors   int64         `json:"errors"`
	Elapsed  time.Duration `json:"-"`
}

// closedArm runs workers that each send the next request as soon as the last
// one is answered, until total successful answers (0: until ctx ends) and at
// least minDur. When honor is set a worker waits out a 429's or 503's
// Retry-After before trying again, as an HTTP client with retries does;
// otherwise it hammers.
func closedArm(ctx context.Context, rec *recorder, arm string, workers int, total int64, minDur time.Duration, honor bool, url, token string) closedStats {
	client := clientFor(token)
	var st closedStats
	start := time.Now()
	more := func() bool {
		return ctx.Err() == nil && (total == 0 || atomic.LoadInt64(&st.OK) < total || time.Since(start) < minDur)
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for more() {
				req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
				req.Header.Set("Authorization", "Bearer "+token)
				sent := time.Now()
				res, err := client.Do(req)
				s := sample{Arm: arm, At: sent.Sub(rec.start)}
				atomic.AddInt64(&st.Requests, 1)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					s.Failed = err.Error()
					s.Latency = time.Since(sent)
					atomic.AddInt64(&st.Errors, 1)
					rec.add(s)
					continue
				}
				var body []byte
				if res.StatusCode >= 300 {
					body, _ = io.ReadAll(io.LimitReader(res.Body, 4096))
				} else {
					_, _ = io.Copy(io.Discard, res.Body)
				}
				res.Body.Close()
				s.Latency, s.Code = time.Since(sent), res.StatusCode
				switch {
				case res.StatusCode < 300:
					atomic.AddInt64(&st.OK, 1)
				case res.StatusCode == 429:
					atomic.AddInt64(&st.Refused, 1)
				default:
					atomic.AddInt64(&st.Errors, 1)
				}
				if res.StatusCode >= 300 {
					s.ErrCode, s.RetryAfter = errorCode(body), res.Header.Get("Retry-After")
				}
				rec.add(s)
				if honor && (res.StatusCode == 429 || res.StatusCode == 503) {
					secs, err := strconv.Atoi(s.RetryAfter)
					if err != nil || secs < 1 {
						secs = 1
					}
					select {
					case <-time.After(time.Duration(secs) * time.Second):
					case <-ctx.Done():
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	st.Elapsed = time.Since(start)
	return st
}

var (
	clientsMu sync.Mutex
	clients   = map[string]*http.Client{}
)

// clientFor returns the HTTP client of one token's closed-loop arms, kept
// across phases so that a phase starts on the connections its warm-up opened.
func clientFor(token string) *http.Client {
	clientsMu.Lock()
	defer clientsMu.Unlock()
	c := clients[token]
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
		clients[token] = c
	}
	return c
}

func bearer(token string) http.Header {
	return http.Header{"Authorization": []string{"Bearer " + token}}
}

// kindOf is a request's method and URL path with its query's keys, so that
// the samples of an arm that mixes requests can be told apart.
func kindOf(method, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return method + " " + raw
	}
	var keys []string
	for k := range u.Query() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return method + " " + u.Path
	}
	return method + " " + u.Path + "?" + strings.Join(keys, ",")
}
