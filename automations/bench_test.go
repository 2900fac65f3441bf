package automations_test

import (
	"net/http"
	"testing"
	"time"
)

// BenchmarkWebhookAfterWrite is an automation's latency end to end, one
// write at a time: a row written through the API, its event evaluated by a
// worker, and its webhook received by a sink on loopback. The automation
// has no condition and one webhook action, as most have. ns/op is the
// write's answer plus the wait until the sink has the delivery.
func BenchmarkWebhookAfterWrite(b *testing.B) {
	f := setup(b, newApp(b, nil))
	got := make(chan struct{}, 64)
	s := newSink(b, func(_ int, w http.ResponseWriter) {
		w.WriteHeader(http.StatusNoContent)
		got <- struct{}{}
	})
	f.create(map[string]any{
		"name": "Notify", "trigger": map[string]any{"event": "row.created"},
		"actions": []any{webhook(s.srv.URL + "/hook")},
	})
	row := map[string]any{"name": "a", "status": "done"}
	wait := func() {
		select {
		case <-got:
		case <-time.After(15 * time.Second):
			b.Fatal("no delivery within 15 s")
		}
	}
	f.insert(row) // the first write and delivery warm the statement caches
	wait()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		f.insert(row)
		wait()
	}
}
