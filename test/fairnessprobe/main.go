// Command fairnessprobe measures the fairness controller on this machine, in
// one process: a victim realm doing 100-row reads at a steady open-model rate
// (latency from the intended send time) and a storm realm of 60 concurrent
// workers doing 200-row reads, against Appdor with the controller on and off.
// It is a quick probe for the controller's author; the storm harness
// (test/fairness) is the gate.
//
//	APPDOR_TEST_DATABASE_URL=... APPDOR_TEST_REDIS_URL=... go run ./test/fairnessprobe
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/appdor/appdor/server"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

var (
	rate     = flag.Int("rate", 50, "victim requests a second")
	phase    = flag.Duration("phase", 20*time.Second, "length of the baseline and storm phases")
	warm     = flag.Duration("warm", 5*time.Second, "warm-up, discarded")
	workers  = flag.Int("workers", 60, "storm workers")
	armsFlag = flag.String("arms", "on,off,on-hammer,on-hammer-nohold", "arms to run")
	capacity = flag.Int("capacity", 0, "fairness capacity (0: automatic)")
	realms   = flag.Int("realms", 1, "storm realms, each with -workers workers")
)

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 0}, Timeout: 30 * time.Second}

func main() {
	flag.Parse()
	ctx := context.Background()
	dbURL, dbName, err := testenv.CreateDatabase(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer testenv.DropDatabase(context.WithoutCancel(ctx), dbName)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	for _, arm := range bytes.Split([]byte(*armsFlag), []byte(",")) {
		run(ctx, string(arm), dbURL, pool)
	}
}

type sample struct {
	lat    time.Duration
	status int
	code   string
}

func run(ctx context.Context, arm, dbURL string, pool *pgxpool.Pool) {
	cfg := server.Config{
		Listen: "127.0.0.1:0", DatabaseURL: dbURL, RedisURL: os.Getenv(testenv.RedisEnv),
		DBMaxConns: 16, BodyLimit: "10M", Version: "probe",
		RealmRequestsPerMinute: 1_000_000, // the limiter is not under test here
	}
	cfg.Fairness.Capacity = *capacity
	hammer := false
	switch arm {
	case "on":
	case "off":
		cfg.Fairness.Off = true
	case "on-hammer":
		hammer = true
	case "on-hammer-nohold":
		hammer = true
		cfg.Fairness.Hold = -1
	default:
		log.Fatalf("unknown arm %q", arm)
	}
	app, err := server.New(ctx, cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)))
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	sctx, stopServer := context.WithCancel(ctx)
	defer stopServer()
	go app.ServeListener(sctx, ln)
	base := "http://" + ln.Addr().String()

	tn := tenancy.New(pool)
	victimTok, victimTable, victimRealm := seed(ctx, tn, base, "victim "+arm)
	victimURL := base + "/api/v1/tables/" + victimTable + "/rows?limit=100"
	var storms []stormRealm
	for i := range *realms {
		tok, table, _ := seed(ctx, tn, base, fmt.Sprintf("storm %d %s", i, arm))
		storms = append(storms, stormRealm{base + "/api/v1/tables/" + table + "/rows?limit=200", tok})
	}

	victim(victimURL, victimTok, *warm)
	baseline := victim(victimURL, victimTok, *phase)

	alone := storm(storms, hammer, func() { time.Sleep(*phase / 2) })
	var under []sample
	during := storm(storms, hammer, func() { under = victim(victimURL, victimTok, *phase) })

	bp50, bp99, _ := pct(baseline)
	sp50, sp99, serr := pct(under)
	fmt.Printf("%-17s victim baseline p50 %6.2fms p99 %7.2fms | under storm p50 %7.2fms p99 %8.2fms (x%.1f) errors %v of %d | storm ok/s alone %5.0f, with victim %5.0f; refused/s %6.0f; 503/s %4.0f\n",
		arm, ms(bp50), ms(bp99), ms(sp50), ms(sp99), float64(sp99)/float64(bp99), serr, len(under),
		alone.okRate, during.okRate, during.refusedRate, during.unavailableRate)
	if res, err := client.Get(base + "/metrics"); err == nil {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		for _, line := range bytes.Split(b, []byte("\n")) {
			if bytes.HasPrefix(line, []byte("appdor_fairness_refused_total")) && bytes.Contains(line, []byte(victimRealm)) {
				fmt.Printf("    victim: %s\n", line)
			}
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pct returns p50, p99 and the non-200 answers by status and code.
func pct(s []sample) (time.Duration, time.Duration, map[string]int) {
	lats := make([]time.Duration, len(s))
	errs := map[string]int{}
	for i, x := range s {
		lats[i] = x.lat
		if x.status != http.StatusOK {
			errs[strconv.Itoa(x.status)+" "+x.code]++
		}
	}
	slices.Sort(lats)
	at := func(q float64) time.Duration { return lats[min(len(lats)-1, int(q*float64(len(lats))))] }
	return at(0.50), at(0.99), errs
}

// victim sends *rate requests a second for d, each at its intended time, and
// measures latency from that time (an open model: a slow answer does not
// delay the next send).
func victim(url, token string, d time.Duration) []sample {
	n := int(d.Seconds() * float64(*rate))
	interval := time.Second / time.Duration(*rate)
	out := make([]sample, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		intended := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(intended))
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, _, code := get(url, token)
			out[i] = sample{lat: time.Since(intended), status: status, code: code}
		}()
	}
	wg.Wait()
	return out
}

type stormStats struct{ okRate, refusedRate, unavailableRate float64 }

type stormRealm struct{ url, token string }

// storm runs the storm workers of every storm realm while during runs.
// Honest workers wait Retry-After after a refusal; hammering ones ask again
// at once.
func storm(realms []stormRealm, hammer bool, during func()) stormStats {
	var ok, refused, unavailable atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range *workers * len(realms) {
		url, token := realms[w%len(realms)].url, realms[w%len(realms)].token
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				status, retryAfter, _ := get(url, token)
				switch status {
				case http.StatusOK:
					ok.Add(1)
					continue
				case http.StatusTooManyRequests:
					refused.Add(1)
				default:
					unavailable.Add(1)
				}
				if !hammer {
					select {
					case <-time.After(retryAfter):
					case <-stop:
						return
					}
				}
			}
		}()
	}
	start := time.Now()
	during()
	el := time.Since(start).Seconds()
	close(stop)
	wg.Wait()
	return stormStats{float64(ok.Load()) / el, float64(refused.Load()) / el, float64(unavailable.Load()) / el}
}

func get(url, token string) (int, time.Duration, string) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := client.Do(req)
	if err != nil {
		return 0, time.Second, err.Error()
	}
	defer res.Body.Close()
	ra, _ := strconv.Atoi(res.Header.Get("Retry-After"))
	code := ""
	if res.StatusCode != http.StatusOK {
		var e struct{ Error struct{ Code string } }
		b, _ := io.ReadAll(res.Body)
		_ = json.Unmarshal(b, &e)
		code = e.Error.Code
	} else {
		_, _ = io.Copy(io.Discard, res.Body)
	}
	return res.StatusCode, time.Duration(max(ra, 1)) * time.Second, code
}

// seed makes a realm with an editor's token and a table of 2,000 rows of 8
// text fields, through the public API.
func seed(ctx context.Context, tn *tenancy.Service, base, name string) (string, string, string) {
	r, err := tn.CreateRealm(ctx, name)
	must(err)
	email := strconv.FormatInt(time.Now().UnixNano(), 36) + "@probe.test"
	_, err = tn.CreateUser(ctx, r.ID, email, "correct horse", tenancy.RoleEditor)
	must(err)
	_, tok, err := tn.CreateToken(ctx, r.ID, email, "probe", nil)
	must(err)
	var a struct{ ID string }
	call(base, tok, "/api/v1/apps", map[string]any{"name": "probe"}, &a)
	fields := []map[string]any{}
	for i := range 8 {
		fields = append(fields, map[string]any{"name": fmt.Sprintf("f%d", i), "type": "text"})
	}
	var t struct {
		ID     string
		Fields []struct{ ID string }
	}
	call(base, tok, "/api/v1/apps/"+a.ID+"/tables", map[string]any{"name": "t", "fields": fields}, &t)
	for b := range 2 {
		rows := make([]map[string]any, 1000)
		for i := range rows {
			cells := map[string]any{}
			for j, f := range t.Fields {
				cells[f.ID] = fmt.Sprintf("row %d field %d: some text a department keeps", b*1000+i, j)
			}
			rows[i] = map[string]any{"cells": cells}
		}
		call(base, tok, "/api/v1/tables/"+t.ID+"/rows", map[string]any{"rows": rows}, nil)
	}
	return tok, t.ID, r.ID.String()
}

func call(base, token, path string, body, out any) {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	must(err)
	defer res.Body.Close()
	rb, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusCreated {
		log.Fatalf("POST %s: %d %s", path, res.StatusCode, rb)
	}
	if out != nil {
		must(json.Unmarshal(rb, out))
	}
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
