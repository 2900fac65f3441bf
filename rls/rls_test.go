package rls_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/rls"
	"github.com/appdor/appdor/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// onePool is a pool with a single connection as the serving role, so every
// call reuses the connection the previous one left behind.
func onePool(t *testing.T) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(testenv.ServerURL(t))
	require.NoError(t, err)
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

type scoped struct {
	User, Realm, Timeout string
}

func scanScoped(dst *scoped) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&dst.User, &dst.Realm, &dst.Timeout); err != nil {
				return err
			}
		}
		return rows.Err()
	}
}

const whoAmI = `SELECT current_user::text, current_setting('appdor.realm_id', true), current_setting('statement_timeout')`

func TestQueryAndTxAreScopedAndLeaveNothingBehind(t *testing.T) {
	t.Parallel()
	pool := onePool(t)
	db := rls.New(pool, 1500*time.Millisecond, 0)
	realm := uuid.New()
	ctx := t.Context()

	var got scoped
	require.NoError(t, db.Query(ctx, realm, scanScoped(&got), whoAmI))
	require.Equal(t, scoped{User: rls.TenantRole, Realm: realm.String(), Timeout: "1500ms"}, got)

	var after scoped
	require.NoError(t, pool.QueryRow(ctx, whoAmI).Scan(&after.User, &after.Realm, &after.Timeout))
	require.NotEqual(t, rls.TenantRole, after.User, "the role outlived the batch")
	require.Equal(t, "", after.Realm, "the realm outlived the batch")
	require.NotEqual(t, "1500ms", after.Timeout)

	got = scoped{}
	require.NoError(t, db.Tx(ctx, realm, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, whoAmI).Scan(&got.User, &got.Realm, &got.Timeout)
	}))
	require.Equal(t, scoped{User: rls.TenantRole, Realm: realm.String(), Timeout: "1500ms"}, got)
	require.NoError(t, pool.QueryRow(ctx, whoAmI).Scan(&after.User, &after.Realm, &after.Timeout))
	require.NotEqual(t, rls.TenantRole, after.User, "the role outlived the transaction")
	require.Equal(t, "", after.Realm, "the realm outlived the transaction")
}

func TestTxRollsBackOnErrorAndPanic(t *testing.T) {
	t.Parallel()
	pool := onePool(t)
	db := rls.New(pool, 0, 0)
	ctx := t.Context()
	var realm uuid.UUID
	require.NoError(t, testenv.Pool(t).QueryRow(ctx, `INSERT INTO realms (name) VALUES ('rollback') RETURNING id`).Scan(&realm))

	insert := func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO apps (realm_id, name) VALUES ($1, 'x')`, realm)
		return err
	}
	err := db.Tx(ctx, realm, func(tx pgx.Tx) error {
		require.NoError(t, insert(tx))
		return appdor.Errorf(appdor.EValidation, "no")
	})
	require.Equal(t, appdor.EValidation, appdor.ErrorCode(err))
	require.Panics(t, func() {
		_ = db.Tx(ctx, realm, func(tx pgx.Tx) error {
			require.NoError(t, insert(tx))
			panic("boom")
		})
	})
	require.Zero(t, countApps(t, db, realm))
	require.NoError(t, pool.Ping(ctx), "the connection survived the panic")
}

// countApps counts realm's apps, as realm.
func countApps(t *testing.T, db *rls.DB, realm uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, db.Query(t.Context(), realm, func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&n); err != nil {
				return err
			}
		}
		return rows.Err()
	}, `SELECT count(*) FROM apps WHERE realm_id = $1`, realm))
	return n
}

func TestStatementTimeoutIsUnavailable(t *testing.T) {
	t.Parallel()
	db := rls.New(onePool(t), 50*time.Millisecond, 0)
	err := db.Query(t.Context(), uuid.New(), func(pgx.Rows) error { return nil }, `SELECT pg_sleep(2)`)
	require.Equal(t, appdor.EUnavailable, appdor.ErrorCode(err))
	err = db.Tx(t.Context(), uuid.New(), func(tx pgx.Tx) error {
		_, err := tx.Exec(t.Context(), `SELECT pg_sleep(2)`)
		return err
	})
	require.Equal(t, appdor.EUnavailable, appdor.ErrorCode(err))
}

func TestBusyPoolIsUnavailableNotAHang(t *testing.T) {
	t.Parallel()
	pool := onePool(t)
	db := rls.New(pool, 0, 20*time.Millisecond)
	held, err := pool.Acquire(t.Context())
	require.NoError(t, err)
	defer held.Release()
	err = db.Query(t.Context(), uuid.New(), func(pgx.Rows) error { return nil }, `SELECT 1`)
	require.Equal(t, appdor.EUnavailable, appdor.ErrorCode(err))
	var ae *appdor.Error
	require.ErrorAs(t, err, &ae)
	require.Positive(t, ae.RetryAfter)
}

func TestNoRealmIsRefused(t *testing.T) {
	t.Parallel()
	db := rls.New(onePool(t), 0, 0)
	require.Error(t, db.Query(t.Context(), uuid.Nil, func(pgx.Rows) error { return nil }, `SELECT 1`))
	require.Error(t, db.Tx(t.Context(), uuid.Nil, func(pgx.Tx) error { return nil }))
}

// TestTextPostgreSQLCannotStoreIsValidation: text that reaches PostgreSQL
// with NUL (22P05 in jsonb, 22021 in text) or bytes that are not UTF-8
// (22021) — which the checks in Go are there to stop first — is a
// validation error, not an internal one.
func TestTextPostgreSQLCannotStoreIsValidation(t *testing.T) {
	t.Parallel()
	db := rls.New(testenv.Pool(t), 0, 0)
	for _, c := range []struct{ name, sql, arg string }{
		{"NUL in jsonb", `SELECT $1::jsonb`, `{"a":"\u0000"}`},
		{"NUL in text", `SELECT $1::text`, "a\x00b"},
		{"not UTF-8", `SELECT convert_from('\xff'::bytea, 'UTF8') || $1::text`, "x"},
	} {
		err := db.Query(t.Context(), uuid.New(), func(rows pgx.Rows) error {
			for rows.Next() {
			}
			return rows.Err()
		}, c.sql, c.arg)
		require.Error(t, err, c.name)
		require.Equal(t, appdor.EValidation, appdor.ErrorCode(err), "%s: %v", c.name, err)
	}
}

// sends counts the statements and batches a connection sends: each is a
// round trip.
type sends struct{ n atomic.Int64 }

func (s *sends) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}
func (s *sends) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (s *sends) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	s.n.Add(1)
	return ctx
}
func (s *sends) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (s *sends) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func TestTxBatchSendsBeginWithTheFirstBatchAndCommitWithTheLast(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(testenv.ServerURL(t))
	require.NoError(t, err)
	cfg.MaxConns = 1
	counter := &sends{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	db := rls.New(pool, 1500*time.Millisecond, 0)
	ctx := t.Context()
	var realm uuid.UUID
	require.NoError(t, testenv.Pool(t).QueryRow(ctx, `INSERT INTO realms (name) VALUES ('txbatch') RETURNING id`).Scan(&realm))
	apps := func() int { return countApps(t, db, realm) }
	tx := func(name string, last string) error {
		first := &pgx.Batch{}
		var got scoped
		first.Queue(whoAmI).QueryRow(func(row pgx.Row) error { return row.Scan(&got.User, &got.Realm, &got.Timeout) })
		first.Queue(`INSERT INTO apps (realm_id, name) VALUES ($1, $2)`, realm, name)
		return db.TxBatch(ctx, realm, first, func(tx pgx.Tx) (*pgx.Batch, error) {
			require.Equal(t, scoped{User: rls.TenantRole, Realm: realm.String(), Timeout: "1500ms"}, got,
				"the setup ran before the first batch's statements")
			b := &pgx.Batch{}
			b.Queue(`INSERT INTO apps (realm_id, name) VALUES ($1, $2)`, realm, last)
			return b, nil
		})
	}
	require.NoError(t, pool.Ping(ctx)) // the connection, made
	counter.n.Store(0)
	require.NoError(t, tx("first", "last"))
	require.Equal(t, int64(2), counter.n.Load(), "BEGIN with the first batch, COMMIT with the last: two round trips")
	require.Equal(t, 2, apps())

	// With no fn, the first batch is the whole transaction: one round trip.
	counter.n.Store(0)
	one := &pgx.Batch{}
	one.Queue(`INSERT INTO apps (realm_id, name) VALUES ($1, 'one')`, realm)
	require.NoError(t, db.TxBatch(ctx, realm, one, nil))
	require.Equal(t, int64(1), counter.n.Load(), "BEGIN, the batch and COMMIT: one round trip")
	require.Equal(t, 3, apps())

	// A statement of the last batch that fails rolls back the first batch's
	// work too; one of the first batch's, everything.
	err = tx("kept?", strings.Repeat("x", 1000)) // apps.name is at most 200 characters
	require.Equal(t, appdor.EValidation, appdor.ErrorCode(err), "%v", err)
	err = db.TxBatch(ctx, realm, func() *pgx.Batch {
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO apps (realm_id, name) VALUES ($1, $2)`, realm, strings.Repeat("x", 1000))
		return b
	}(), func(pgx.Tx) (*pgx.Batch, error) { t.Fatal("fn ran after its first batch failed"); return nil, nil })
	require.Equal(t, appdor.EValidation, appdor.ErrorCode(err), "%v", err)
	one = &pgx.Batch{}
	one.Queue(`INSERT INTO apps (realm_id, name) VALUES ($1, 'two')`, realm)
	one.Queue(`INSERT INTO apps (realm_id, name) VALUES ($1, $2)`, realm, strings.Repeat("x", 1000))
	err = db.TxBatch(ctx, realm, one, nil)
	require.Equal(t, appdor.EValidation, appdor.ErrorCode(err), "%v", err)
	require.Equal(t, 3, apps())

	var after scoped
	require.NoError(t, pool.QueryRow(ctx, whoAmI).Scan(&after.User, &after.Realm, &after.Timeout))
	require.NotEqual(t, rls.TenantRole, after.User, "the role outlived the transaction")
	require.Equal(t, "", after.Realm, "the realm outlived the transaction")
}
