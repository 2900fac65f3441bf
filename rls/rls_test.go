package rls_test

import (
	"context"
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
	var n int
	require.NoError(t, db.Query(ctx, realm, func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&n); err != nil {
				return err
			}
		}
		return rows.Err()
	}, `SELECT count(*) FROM apps WHERE realm_id = $1`, realm))
	require.Zero(t, n)
	require.NoError(t, pool.Ping(ctx), "the connection survived the panic")
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
