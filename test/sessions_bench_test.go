package test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/appdor/appdor/server"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// BenchmarkAuthenticatedRead reads a 100-row page through the whole HTTP
// stack, authenticated by a token (cached after its first lookup) and by a
// session (one PostgreSQL query per request: the session, the membership of
// the chosen realm and the realm's ceiling together). The gap is what a
// browser pays for its session.
func BenchmarkAuthenticatedRead(b *testing.B) {
	// The limiter and the fairness controller would rightly refuse this
	// flood from one realm; they are measured elsewhere.
	app := testenv.NewApp(b, func(cfg *server.Config) { cfg.LimiterOff = true; cfg.Fairness.Off = true })
	tn := app.NewTenant(b, tenancy.RoleEditor, nil)
	tableID := seedPeople(b, app, tn, 200)
	res := app.Do(b, "POST", "/api/v1/auth/login", "", map[string]any{"email": tn.Email, "password": tn.Password})
	var session string
	for _, ck := range cookiesOf(res) {
		if ck.Name == tenancy.SessionCookie {
			session = ck.Value
		}
	}
	url := app.URL + "/api/v1/tables/" + tableID + "/rows?limit=100"
	auth := map[string]func(*http.Request){
		"token": func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tn.Token) },
		"session": func(r *http.Request) {
			r.AddCookie(&http.Cookie{Name: tenancy.SessionCookie, Value: session})
			r.Header.Set(tenancy.RealmHeader, tn.RealmID.String())
		},
	}
	for _, name := range []string{"token", "session"} {
		for _, clients := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/clients=%d", name, clients), func(b *testing.B) {
				b.SetParallelism(clients) // × GOMAXPROCS goroutines
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						req, _ := http.NewRequest("GET", url, nil)
						auth[name](req)
						res, err := http.DefaultClient.Do(req)
						if err != nil {
							b.Error(err)
							return
						}
						_, _ = io.Copy(io.Discard, res.Body)
						res.Body.Close()
						if res.StatusCode != http.StatusOK {
							b.Errorf("status %d", res.StatusCode)
							return
						}
					}
				})
			})
		}
	}
}

// BenchmarkReadDuringLoginFlood reads a 100-row page while 32 clients keep
// signing in with a wrong password, with the password checks bounded
// (login_concurrency=1, the default on two cores) and practically unbounded
// (64). The bound is what keeps a flood of bcrypt from taking every core.
func BenchmarkReadDuringLoginFlood(b *testing.B) {
	for _, slots := range []int{1, 64} {
		b.Run(fmt.Sprintf("login_concurrency=%d", slots), func(b *testing.B) {
			app := testenv.NewApp(b, func(cfg *server.Config) {
				cfg.LimiterOff = true
				cfg.Fairness.Off = true
				cfg.LoginConcurrency = slots
			})
			tn := app.NewTenant(b, tenancy.RoleEditor, nil)
			tableID := seedPeople(b, app, tn, 100)

			stop := make(chan struct{})
			var wg sync.WaitGroup
			var logins, refused atomic.Int64
			body := `{"email":"` + tn.Email + `","password":"wrong horse"}`
			for range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						res, err := http.Post(app.URL+"/api/v1/auth/login", "application/json", strings.NewReader(body))
						if err != nil {
							continue
						}
						_, _ = io.Copy(io.Discard, res.Body)
						res.Body.Close()
						logins.Add(1)
						if res.StatusCode == http.StatusTooManyRequests {
							refused.Add(1)
						}
					}
				}()
			}
			url := app.URL + "/api/v1/tables/" + tableID + "/rows?limit=100"
			lat := make([]time.Duration, 0, 1024)
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				req, _ := http.NewRequest("GET", url, nil)
				req.Header.Set("Authorization", "Bearer "+tn.Token)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				lat = append(lat, time.Since(start))
			}
			elapsed := b.Elapsed()
			close(stop)
			wg.Wait()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(logins.Load()-refused.Load())/elapsed.Seconds(), "checked-logins/s")
			b.ReportMetric(float64(refused.Load())/elapsed.Seconds(), "refused-logins/s")
		})
	}
}

// seedPeople makes an app with a one-field table of n rows in tn's realm and
// returns the table's id.
func seedPeople(b *testing.B, app *testenv.App, tn testenv.Tenant, n int) string {
	b.Helper()
	res := app.Do(b, "POST", "/api/v1/apps", tn.Token, map[string]any{"name": "Bench"})
	appID, _ := res.Map(b)["id"].(string)
	res = app.Do(b, "POST", "/api/v1/apps/"+appID+"/tables", tn.Token, map[string]any{
		"name": "People", "fields": []map[string]any{{"name": "Name", "type": "text"}},
	})
	tbl := res.Map(b)
	tableID, _ := tbl["id"].(string)
	fieldID, _ := tbl["fields"].([]any)[0].(map[string]any)["id"].(string)
	rows := make([]map[string]any, n)
	for i := range rows {
		rows[i] = map[string]any{"cells": map[string]any{fieldID: fmt.Sprintf("person %d", i)}}
	}
	if res := app.Do(b, "POST", "/api/v1/tables/"+tableID+"/rows", tn.Token, map[string]any{"rows": rows}); res.Status != http.StatusCreated {
		b.Fatalf("seed: %d %s", res.Status, res.Body)
	}
	return tableID
}
