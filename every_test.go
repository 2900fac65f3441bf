package appdor_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor"
)

// TestEveryInterval: one event per interval is let through, standing for
// every event counted since the last one; concurrent events let exactly one
// through.
func TestEveryInterval(t *testing.T) {
	t.Parallel()
	e := appdor.EveryInterval{Interval: 10 * time.Second}
	t0 := time.Unix(1_000_000, 0)
	ok, n := e.Take(t0)
	require.True(t, ok)
	require.EqualValues(t, 1, n)
	for i := range 5 {
		ok, _ := e.Take(t0.Add(time.Duration(i) * time.Second))
		require.False(t, ok)
	}
	ok, n = e.Take(t0.Add(10 * time.Second))
	require.True(t, ok)
	require.EqualValues(t, 6, n, "itself and the five it let pass")
	e.Take(t0.Add(11 * time.Second))
	require.EqualValues(t, 1, e.Reset())
	require.Zero(t, e.Reset())

	var wg sync.WaitGroup
	var mu sync.Mutex
	let := 0
	at := t0.Add(time.Minute)
	for range 50 {
		wg.Go(func() {
			if ok, _ := e.Take(at); ok {
				mu.Lock()
				let++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, 1, let)
}
