package usage_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/test/testenv"
	"github.com/appdor/appdor/usage"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func redis(t *testing.T) rueidis.Client {
	t.Helper()
	opt, err := rueidis.ParseURL(testenv.RedisURL(t))
	require.NoError(t, err)
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// TestTwoReplicasSumInRedis: two replicas record one realm's requests at
// once; what is read back is their sum, the p95 of both together, each
// token's use, and the realm among the active ones.
func TestTwoReplicasSumInRedis(t *testing.T) {
	t.Parallel()
	rdb := redis(t)
	realm, token := uuid.New(), uuid.New()
	var episodes []int64
	var mu sync.Mutex
	replicas := []*usage.Recorder{usage.New(rdb, time.Hour, nil), usage.New(rdb, time.Hour, nil)}
	for _, r := range replicas {
		r.Episode = func(got uuid.UUID, reason string, n int64) {
			require.Equal(t, realm, got)
			require.Equal(t, usage.ConcurrencyLimited, reason)
			mu.Lock()
			episodes = append(episodes, n)
			mu.Unlock()
		}
	}
	var wg sync.WaitGroup
	for i, r := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range 500 {
				d := 3 * time.Millisecond // 95% fast
				if n%20 == 0 {
					d = 300 * time.Millisecond
				}
				refused := ""
				if i == 1 && n%50 == 0 {
					refused = usage.ConcurrencyLimited
				}
				r.Request(realm, token, d, refused)
				r.Seat(realm.String(), time.Millisecond, 6*time.Second/500)
			}
		}()
	}
	wg.Wait()
	ctx := context.Background()
	for _, r := range replicas {
		r.Flush(ctx)
	}
	rep, err := usage.Read(ctx, rdb, realm, time.Now())
	require.NoError(t, err)
	require.Len(t, rep.Minutes, 60)
	requests, refused := rep.Totals()
	require.EqualValues(t, 1000, requests)
	require.EqualValues(t, 10, refused)
	last := rep.Minutes[59]
	if last.Requests == 0 { // the minute turned between recording and reading
		last = rep.Minutes[58]
	}
	require.NotNil(t, last.P95Ms)
	require.InDelta(t, 5, *last.P95Ms, 5, "the 95th of 1,000 with 5%% at 300 ms is at the fast ones' edge")
	require.InDelta(t, 0.2, last.Seats, 0.01, "12 s of seat time in a minute is 0.2 seats")
	require.EqualValues(t, 1000, last.QueueWaits)
	require.InDelta(t, 1, *last.MeanWaitMs, 0.01)
	require.EqualValues(t, 1000, rep.Tokens[token].Requests)
	require.EqualValues(t, 10, rep.Tokens[token].Refused)
	require.NotNil(t, rep.Tokens[token].LastUsed)
	require.Equal(t, []int64{10}, episodes, "one replica saw refusals: one episode")

	// A flush with refusals again is the same episode; one without ends it.
	replicas[1].Request(realm, token, time.Millisecond, usage.ConcurrencyLimited)
	replicas[1].Flush(ctx)
	replicas[1].Flush(ctx)
	replicas[1].Request(realm, token, time.Millisecond, usage.ConcurrencyLimited)
	replicas[1].Flush(ctx)
	require.Equal(t, []int64{10, 1}, episodes)

	active, err := usage.Active(ctx, rdb, time.Now())
	require.NoError(t, err)
	require.Contains(t, active, realm)
}

// TestRunFlushesOnClose: what is recorded before Close is written.
func TestRunFlushesOnClose(t *testing.T) {
	t.Parallel()
	rdb := redis(t)
	realm := uuid.New()
	r := usage.New(rdb, time.Hour, nil)
	r.Run()
	r.Request(realm, uuid.Nil, time.Millisecond, "")
	r.Close()
	rep, err := usage.Read(context.Background(), rdb, realm, time.Now())
	require.NoError(t, err)
	n, _ := rep.Totals()
	require.EqualValues(t, 1, n)
}
