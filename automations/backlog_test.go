package automations_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/automations"
	"github.com/appdor/appdor/test/testenv"
)

func TestParseSnapshot(t *testing.T) {
	t.Parallel()
	finished, err := automations.ParseSnapshot("10:20:12,15")
	require.NoError(t, err)
	require.True(t, finished(9), "below xmin")
	require.True(t, finished(11), "between, not running")
	require.False(t, finished(12), "running")
	require.False(t, finished(20), "not begun")
	require.False(t, finished(25), "not begun")

	finished, err = automations.ParseSnapshot("7:7:")
	require.NoError(t, err)
	require.True(t, finished(6))
	require.False(t, finished(7))

	for _, bad := range []string{"", "1:2", "a:2:", "1:b:", "1:2:x", "1:2:3:4"} {
		_, err := automations.ParseSnapshot(bad)
		require.Error(t, err, bad)
	}
}

// TestBacklogKnowsWhichEventsASampleSaw: an event whose transaction is open
// while the queue is sampled is carried past the sample; once it commits and
// a sample sees it, it is counted once, not twice; an event rolled back is
// dropped by the next sample.
func TestBacklogKnowsWhichEventsASampleSaw(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testenv.Pool(t)
	snapshotNow := func() string {
		var s string
		require.NoError(t, pool.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&s))
		return s
	}
	xact := func() (func(commit bool), uint64) {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		var xid int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&xid))
		return func(commit bool) {
			if commit {
				require.NoError(t, tx.Commit(ctx))
			} else {
				require.NoError(t, tx.Rollback(ctx))
			}
		}, uint64(xid)
	}

	realm := uuid.New()
	b := automations.NewBacklog()
	endA, a := xact()
	b.Add(realm, a)
	endB, x := xact()
	b.Add(realm, x)

	// Sampled while both are open: neither is in the sample; both are carried.
	require.NoError(t, b.Reset(map[uuid.UUID]int{}, snapshotNow()))
	require.Equal(t, 2, b.Pending(realm))

	// A commits and B rolls back before the next sample; an event added
	// after that sample's snapshot was taken is carried.
	endA(true)
	endB(false)
	snap := snapshotNow()
	endC, c := xact()
	b.Add(realm, c)
	require.NoError(t, b.Reset(map[uuid.UUID]int{realm: 1}, snap)) // the sample saw A's event
	require.Equal(t, 2, b.Pending(realm), "A's event once, from the sample, and C's, carried")
	require.Equal(t, 1, b.Carried())

	endC(true)
	require.NoError(t, b.Reset(map[uuid.UUID]int{realm: 2}, snapshotNow()))
	require.Equal(t, 2, b.Pending(realm))
	require.Zero(t, b.Carried())
}
