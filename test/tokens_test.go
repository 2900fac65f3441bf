package test

import (
	"context"
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
// each at a gate until the test opens it.
type tokenQueries struct {
	armed atomic.Bool
	count atomic.Int64
	gate  chan struct{}
}

func (q *tokenQueries) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if q.armed.Load() && strings.Contains(data.SQL, "FROM api_tokens") {
		q.count.Add(1)
		<-q.gate
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

// TestClientsOfOneTokenShareItsLookup: many requests with the same token
// arriving together while its cached answer is missing (it expired, or the
// server just started) send one lookup to PostgreSQL, not one each — those
// lookups run before the fairness controller and would take the pool from
// every other realm.
func TestClientsOfOneTokenShareItsLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(t))
	require.NoError(t, err)
	q := &tokenQueries{gate: make(chan struct{})}
	cfg.ConnConfig.Tracer = q
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()

	svc := tenancy.New(pool)
	realm, err := svc.CreateRealm(ctx, "one token, many clients")
	require.NoError(t, err)
	_, err = svc.CreateUser(ctx, realm.ID, "many@example.com", "a long password", tenancy.RoleOwner)
	require.NoError(t, err)
	_, secret, err := svc.CreateToken(ctx, realm.ID, "many@example.com", "batch job", nil)
	require.NoError(t, err)
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
	close(q.gate)
	wg.Wait()

	require.EqualValues(t, 1, q.count.Load(), "lookups sent to PostgreSQL for %d concurrent requests", clients)
	for i := range clients {
		require.NoError(t, errs[i])
		require.Equal(t, realm.ID, principals[i].RealmID)
	}
	principals[0].Role = tenancy.RoleViewer
	require.Equal(t, tenancy.RoleOwner, principals[1].Role, "each request has its own principal")
}
