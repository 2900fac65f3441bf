package grid_test

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/server"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// BenchmarkCSVImport100k streams a 100,000-row, 8-field CSV (about 13 MB)
// into a table and reports rows a second and the process's peak heap while it
// runs: the import holds one batch, never the file.
//
//	go test ./grid -run '^$' -bench BenchmarkCSVImport100k -benchtime 1x
func BenchmarkCSVImport100k(b *testing.B) {
	app := testenv.NewApp(b, func(c *server.Config) { c.RealmRequestsPerMinute = 1 << 30 })
	tn := app.NewTenant(b, tenancy.RoleEditor, nil)
	const rows = 100_000
	for range b.N {
		b.StopTimer()
		tableID := benchTable(b, app, tn.Token)
		pr, pw := io.Pipe()
		go func() {
			fmt.Fprintln(pw, "Name,Notes,Amount,Done,Due,Status,Owner,Site")
			for i := range rows {
				fmt.Fprintf(pw, "Item %d,\"Notes, with a comma\",%d.25,%t,2026-03-14,open,owner%d@example.com,https://example.com/%d\n",
					i, i, i%2 == 0, i%50, i)
			}
			pw.Close()
		}()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapAlloc
		var peak atomic.Uint64
		done := make(chan struct{})
		go func() {
			t := time.NewTicker(20 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					var ms runtime.MemStats
					runtime.ReadMemStats(&ms)
					if ms.HeapAlloc > peak.Load() {
						peak.Store(ms.HeapAlloc)
					}
				}
			}
		}()
		req, _ := http.NewRequest("POST", app.URL+"/api/v1/tables/"+tableID+"/csv", pr)
		req.Header.Set("Content-Type", "text/csv")
		req.Header.Set("Authorization", "Bearer "+tn.Token)
		b.StartTimer()
		start := time.Now()
		res, err := http.DefaultClient.Do(req)
		require.NoError(b, err)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		elapsed := time.Since(start)
		close(done)
		require.Equal(b, http.StatusCreated, res.StatusCode, string(body))
		require.Contains(b, string(body), fmt.Sprintf(`"inserted":%d`, rows))
		b.ReportMetric(rows/elapsed.Seconds(), "rows/s")
		b.ReportMetric(float64(peak.Load()-min(peak.Load(), base))/(1<<20), "peak-heap-growth-MB")
	}
	b.ReportMetric(0, "ns/op")
}
