package test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// tokenQueries counts the token lookups a pool sends once armed, and holds
// each at its gate, when it has one, until the test opens it.
type tokenQueries struct {
	armed atomic.Bool
	count atomic.Int64
	mu    sync.Mutex
	gate  chan struct{}
}

// hold gives the lookups from now on a new, closed gate, and returns it.
func (q *tokenQueries) hold() chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.gate = make(chan struct{})
	return q.gate
}

func (q *tokenQueries) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if q.armed.Load() && strings.Contains(data.SQL, "FROM api_tokens") {
		q.count.Add(1)
		q.mu.Lock()
		gate := q.gate
		q.mu.Unlock()
		if gate != nil {
			<-gate
		}
	}
	return ctx
}

func (q *tokenQueries) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A lookup travels in a batch with the settings that name what it may see.
func (q *tokenQueries) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	for _, qq := range data.Batch.QueuedQueries {
		q.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: qq.SQL})
	}
	return ctx
}

func (q *tokenQueries) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (q *tokenQueries) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// tokenCounted makes a realm named name with one owner (email) and a token, on a
// pool of its own whose token lookups q counts and holds.
func tokenCounted(t *testing.T, q *tokenQueries, name, email string) (*tenancy.Service, *pgxpool.Pool, tenancy.Realm, string) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(t))
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = q
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	svc := tenancy.New(pool)
	realm, err := svc.CreateRealm(ctx, name)
	require.NoError(t, err)
	_, err = svc.CreateUser(ctx, realm.ID, email, "a long password", tenancy.RoleOwner)
	require.NoError(t, err)
	_, secret, err := svc.CreateToken(ctx, realm.ID, email, "a job", nil)
	require.NoError(t, err)
	return svc, pool, realm, secret
}

// TestClientsOfOneTokenShareItsLookup: many requests with the same token
// arriving together while its cached answer is missing (it expired, or the
// server just started) send one lookup to PostgreSQL, not one each — those
// lookups run before the fairness controller and would take the pool from
// every other realm.
func TestClientsOfOneTokenShareItsLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := &tokenQueries{}
	gate := q.hold()
	svc, _, realm, secret := tokenCounted(t, q, "one token, many clients", "many@example.com")
	stop := svc.StartTokenCache(ctx, time.Minute, nil)
	defer stop()

	q.armed.Store(true)
	const clients = 40
	var wg sync.WaitGroup
	var asked atomic.Int64
	principals := make([]*tenancy.Principal, clients)
	errs := make([]error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			asked.Add(1)
			principals[i], errs[i] = svc.LookupToken(ctx, secret)
		}()
	}
	// Every client has asked, and the first lookup waits at the gate; the
	// moment lets the others reach theirs, if they make one.
	require.Eventually(t, func() bool { return asked.Load() == clients && q.count.Load() >= 1 }, 5*time.Second, time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	close(gate)
	wg.Wait()

	require.EqualValues(t, 1, q.count.Load(), "lookups sent to PostgreSQL for %d concurrent requests", clients)
	for i := range clients {
		require.NoError(t, errs[i])
		require.Equal(t, realm.ID, principals[i].RealmID)
	}
	principals[0].Role = tenancy.RoleViewer
	require.Equal(t, tenancy.RoleOwner, principals[1].Role, "each request has its own principal")
}

// TestATokenInUseIsLookedUpAheadOfItsEnd: a token used after half its cached
// answer's life is looked up again in the background, the request answered
// from the cache meanwhile, so no request of a token in use waits for its
// lookup when the answer would have expired; and a token revoked behind the
// cache's back (no notification) is dropped by that lookup.
func TestATokenInUseIsLookedUpAheadOfItsEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := &tokenQueries{}
	h.armed.Store(true)
	svc, pool, realm, secret := tokenCounted(t, h, "a token in use", "busy@example.com")
	const ttl = 2 * time.Second
	stop := svc.StartTokenCache(ctx, ttl, nil)
	defer stop()

	lookup := func() <-chan error {
		done := make(chan error, 1)
		go func() {
			p, err := svc.LookupToken(ctx, secret)
			if err == nil && p.RealmID != realm.ID {
				err = fmt.Errorf("realm %s, want %s", p.RealmID, realm.ID)
			}
			done <- err
		}()
		return done
	}
	answered := func(done <-chan error, why string) {
		t.Helper()
		select {
		case err := <-done:
			require.NoError(t, err, why)
		case <-time.After(5 * time.Second):
			t.Fatal(why + ": the request waited for a lookup held at its gate")
		}
	}

	start := time.Now()
	require.NoError(t, <-lookup(), "the first request looks the token up")
	require.EqualValues(t, 1, h.count.Load())

	// Past half its life, the answer is still used, and a lookup starts
	// behind it: held at the gate, it does not hold the request.
	time.Sleep(time.Until(start.Add(ttl/2 + 100*time.Millisecond)))
	gate := h.hold()
	answered(lookup(), "a request past half the answer's life")
	require.Eventually(t, func() bool { return h.count.Load() == 2 }, 5*time.Second, time.Millisecond,
		"a lookup ahead of the answer's end started")
	close(gate)

	// Past the first answer's end, the refreshed one answers: with every
	// lookup held again, the request still does not wait.
	time.Sleep(time.Until(start.Add(ttl + 100*time.Millisecond)))
	gate = h.hold()
	answered(lookup(), "a request past the first answer's end")
	close(gate)

	// Revoked behind the cache's back: the next lookup ahead finds it gone
	// and drops it, and the request after that is refused.
	_, err := pool.Exec(ctx, "UPDATE api_tokens SET revoked_at = now() WHERE realm_id = $1", realm.ID)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := svc.LookupToken(ctx, secret)
		return err != nil
	}, 3*ttl, 20*time.Millisecond, "a revoked token stops answering once looked up ahead")
}
