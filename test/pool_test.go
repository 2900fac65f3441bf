package test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/test/testenv"
)

// A query whose request went away keeps its connection: a short one runs
// on to its end, a long one is cancelled by the server (57014). Closing the
// connection instead, pgx's default, cost the pool a PostgreSQL backend for
// every client that gave up on a read, and the requests after it a new one.
func TestAQueryWhoseClientLeftKeepsItsConnection(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	conn, err := app.Pool().Acquire(t.Context())
	require.NoError(t, err)
	defer conn.Release()
	pid := conn.Conn().PgConn().PID()
	same := func(what string) {
		t.Helper()
		require.False(t, conn.Conn().IsClosed(), what+": the connection was closed")
		var now uint32
		require.NoError(t, conn.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&now), what)
		require.Equal(t, pid, now, what+": another backend")
	}

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Millisecond)
	_, _ = conn.Exec(ctx, "SELECT pg_sleep(0.03)") // ends within the grace
	cancel()
	same("a short query past its context")

	ctx, cancel = context.WithTimeout(t.Context(), 5*time.Millisecond)
	_, err = conn.Exec(ctx, "SELECT pg_sleep(30)")
	cancel()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr) && pgErr.Code == "57014", "cancelled by the server: %v", err)
	same("a long query past its context")
}
