package tenancy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor"
)

// Known credentials whose cache entries expired are looked up again a few
// at a time, past no Gate: however many arrive at once, no more lookups run
// together than relookups has room for, and one that finds no room within
// the lookup timeout is answered unavailable, not left holding a request.
func TestKnownCredentialsAreLookedUpAFewAtATime(t *testing.T) {
	t.Parallel()
	s := New(nil)
	gated := atomic.Int32{}
	reg := prometheus.NewRegistry()
	var logs syncBuffer
	const room = 3
	s.SetGuard(Guard{Gate: func(context.Context) (func(), error) { gated.Add(1); return func() {}, nil },
		Timeout: 50 * time.Millisecond, Relookups: room, Registerer: reg, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	require.Equal(t, room, cap(s.relookups), "Relookups sets the slots")
	var running, most atomic.Int32
	hold := make(chan struct{})
	query := func(context.Context) error {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-hold
		running.Add(-1)
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*room)
	for i := range 4 * room {
		h := sha256.Sum256([]byte{byte(i)})
		s.known.add(h)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.guarded(context.Background(), h, errUnauthorized, query)
		}()
	}
	require.Eventually(t, func() bool { return running.Load() == int32(room) }, 5*time.Second, time.Millisecond)
	// The rest find every slot busy for longer than the lookup timeout.
	time.Sleep(100 * time.Millisecond)
	close(hold)
	wg.Wait()
	close(errs)
	ok, unavailable := 0, 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case appdor.ErrorCode(err) == appdor.EUnavailable:
			unavailable++
		default:
			t.Fatalf("unexpected %v", err)
		}
	}
	require.Equal(t, room, ok)
	require.Equal(t, 3*room, unavailable)
	require.Equal(t, int32(room), most.Load(), "never more lookups at once than relookups has room for")
	require.Zero(t, gated.Load(), "known credentials pass no Gate")
	require.Equal(t, float64(3*room), gathered(t, reg, "appdor_relookup_concurrency_refused_total"), "each refusal is counted")
	require.Zero(t, gathered(t, reg, "appdor_lookup_timeout_refused_total"), "lookups that waited for no slot and answered did not time out")
	require.Contains(t, logs.String(), "relookup_concurrency: ", "the refusals have the line of the flag's name")
	require.Equal(t, 1, strings.Count(logs.String(), "relookup_concurrency: "), "one line stands for the refusals of ten seconds")
	require.Contains(t, logs.String(), "relookup_concurrency=3")

	// A lookup that outlasts the timeout is the other bound's refusal.
	slow := sha256.Sum256([]byte("slow"))
	s.known.add(slow)
	err := s.guarded(context.Background(), slow, errUnauthorized, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	require.Equal(t, appdor.EUnavailable, appdor.ErrorCode(err))
	require.Equal(t, float64(1), gathered(t, reg, "appdor_lookup_timeout_refused_total"))
	require.Contains(t, logs.String(), "lookup_timeout: ")
	require.Contains(t, logs.String(), "lookup_timeout=50ms")

	// A credential nobody knows goes through the Gate, not these slots.
	unknown := sha256.Sum256([]byte("unknown"))
	err = s.guarded(context.Background(), unknown, errUnauthorized, func(context.Context) error { return errUnauthorized })
	require.True(t, errors.Is(err, errUnauthorized))
	require.Equal(t, int32(1), gated.Load())
}

// syncBuffer is a bytes.Buffer a logger may write from many goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// gathered is the value of the counter named name on reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("%s is not on the registry", name)
	return 0
}
