package tenancy

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	s.SetGuard(Guard{Gate: func(context.Context) (func(), error) { gated.Add(1); return func() {}, nil }, Timeout: 50 * time.Millisecond})
	room := cap(s.relookups)
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

	// A credential nobody knows goes through the Gate, not these slots.
	unknown := sha256.Sum256([]byte("unknown"))
	err := s.guarded(context.Background(), unknown, errUnauthorized, func(context.Context) error { return errUnauthorized })
	require.True(t, errors.Is(err, errUnauthorized))
	require.Equal(t, int32(1), gated.Load())
}
