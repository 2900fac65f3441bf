package grid_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/grid"
	"github.com/appdor/appdor/rls"
	"github.com/appdor/appdor/test/testenv"
)

// What a write asks to run after its commit runs once the transaction has
// committed, as seen from another connection, and never when it rolls back;
// outside a write it runs at once.
func TestAfterCommitRunsOnlyOnceCommitted(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, testenv.ServerURL(t))
	require.NoError(t, err)
	defer pool.Close()
	h := grid.New(rls.New(pool, 0, 0))
	realm := uuid.New()

	var txid int64
	var status string
	err = h.WriteTx(ctx, realm, func(ctx context.Context, tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT txid_current()").Scan(&txid); err != nil {
			return err
		}
		grid.AfterCommit(ctx, func() {
			require.NoError(t, pool.QueryRow(ctx, "SELECT txid_status($1)", txid).Scan(&status))
		})
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, "committed", status)

	ran := false
	failed := errors.New("the write failed")
	err = h.WriteTx(ctx, realm, func(ctx context.Context, tx pgx.Tx) error {
		grid.AfterCommit(ctx, func() { ran = true })
		return failed
	})
	require.ErrorIs(t, err, failed)
	require.False(t, ran)

	grid.AfterCommit(ctx, func() { ran = true })
	require.True(t, ran)
}
