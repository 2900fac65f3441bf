package test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/migrations"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// realmTables lists, from the catalogue, every table in the schema that has a
// realm_id column.
func realmTables(t *testing.T, conn interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) []string {
	t.Helper()
	rows, err := conn.Query(t.Context(), `
		SELECT c.relname FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'realm_id' AND NOT a.attisdropped
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
		ORDER BY c.relname`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, names)
	return names
}

// TestEveryRealmTableForcesRLS fails when any table with a realm_id column
// lacks ENABLE and FORCE ROW LEVEL SECURITY or the realm_isolation policy, or
// when realm_id does not lead its primary key: a future migration that
// forgets is caught here.
func TestEveryRealmTableForcesRLS(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	for _, name := range realmTables(t, pool) {
		var enabled, forced, policy, leads bool
		err := pool.QueryRow(t.Context(), `
			SELECT c.relrowsecurity, c.relforcerowsecurity,
			       EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = 'realm_isolation'
			               AND pg_get_expr(p.polqual, p.polrelid) LIKE '%current_setting(''appdor.realm_id''%'
			               AND pg_get_expr(p.polwithcheck, p.polrelid) LIKE '%current_setting(''appdor.realm_id''%'),
			       EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
			               WHERE i.indrelid = c.oid AND i.indisprimary AND a.attname = 'realm_id')
			FROM pg_class c WHERE c.relname = $1 AND c.relnamespace = 'public'::regnamespace`, name).
			Scan(&enabled, &forced, &policy, &leads)
		require.NoError(t, err)
		require.True(t, enabled, "%s: ROW LEVEL SECURITY is not enabled", name)
		require.True(t, forced, "%s: ROW LEVEL SECURITY is not forced", name)
		require.True(t, policy, "%s: no realm_isolation policy on appdor.realm_id", name)
		require.True(t, leads, "%s: realm_id does not lead the primary key", name)
	}
}

// TestTenantRole checks the tenant role cannot log in, cannot bypass RLS, and
// owns nothing.
func TestTenantRole(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	var login, bypass, super bool
	require.NoError(t, pool.QueryRow(t.Context(),
		`SELECT rolcanlogin, rolbypassrls, rolsuper FROM pg_roles WHERE rolname = 'appdor_tenant'`).Scan(&login, &bypass, &super))
	require.False(t, login)
	require.False(t, bypass)
	require.False(t, super)
	var owned int
	require.NoError(t, pool.QueryRow(t.Context(),
		`SELECT count(*) FROM pg_class WHERE relowner = 'appdor_tenant'::regrole`).Scan(&owned))
	require.Zero(t, owned)
}

// TestIsolationInSQL checks the policies with no Go code in the way: plain SQL
// as appdor_tenant. Realm B's setting sees none of realm A's rows in any realm
// table, no setting sees nothing at all, and realm A's setting sees its own.
func TestIsolationInSQL(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleOwner, nil)
	b := app.NewTenant(t, tenancy.RoleOwner, nil)
	sa := seed(t, app, a.Token, 5)
	sb := seed(t, app, b.Token, 5)
	pool := testenv.Pool(t)
	_, err := pool.Exec(t.Context(),
		`INSERT INTO audit_log (realm_id, actor, action) VALUES ($1, 'test', 'seeded'), ($2, 'test', 'seeded')`, a.RealmID, b.RealmID)
	require.NoError(t, err)
	_, err = pool.Exec(t.Context(),
		`INSERT INTO token_limits (realm_id, token_id, requests_per_minute) VALUES ($1, $2, 60), ($3, $4, 60)`,
		a.RealmID, a.TokenID, b.RealmID, b.TokenID)
	require.NoError(t, err)
	_, err = pool.Exec(t.Context(),
		`INSERT INTO idempotency_keys (realm_id, route, key, request_hash) VALUES ($1, 'POST /x', 'k', '\x00'), ($2, 'POST /x', 'k', '\x00')`,
		a.RealmID, b.RealmID)
	require.NoError(t, err)

	// Automations; the queue row is not due for an hour, so no worker takes it.
	for _, r := range []struct {
		realm uuid.UUID
		table string
	}{{a.RealmID, sa.TableID}, {b.RealmID, sb.TableID}} {
		auto, run := uuid.New(), uuid.New()
		_, err = pool.Exec(t.Context(), `INSERT INTO automations (realm_id, id, table_id, name, trigger, actions)
			VALUES ($1, $2, $3, 'a', '{"event": "row.created"}', '[]')`, r.realm, auto, r.table)
		require.NoError(t, err)
		_, err = pool.Exec(t.Context(), `INSERT INTO automation_events (realm_id, table_id, event, row_ids, versions, run_at)
			VALUES ($1, $2, 'row.created', '{}', '{}', now() + interval '1 hour')`, r.realm, r.table)
		require.NoError(t, err)
		_, err = pool.Exec(t.Context(), `INSERT INTO automation_runs (realm_id, id, automation_id, event, event_id, row_ids, hop, status, queued_at)
			VALUES ($1, $2, $3, 'row.created', 1, '{}', 0, 'succeeded', now())`, r.realm, run, auto)
		require.NoError(t, err)
		_, err = pool.Exec(t.Context(), `INSERT INTO webhook_deliveries (realm_id, id, automation_id, action_id, run_id, url, state, payload, queued_at)
			VALUES ($1, $2, $3, 'act_1', $4, 'https://example.com', 'delivered', '\x7b7d', now())`, r.realm, "msg_"+run.String(), auto, run)
		require.NoError(t, err)
	}

	// An invite of a member of each realm.
	for _, r := range []uuid.UUID{a.RealmID, b.RealmID} {
		_, err = pool.Exec(t.Context(), `INSERT INTO invites (realm_id, hash, user_id, expires_at)
			SELECT realm_id, gen_random_uuid()::text::bytea, user_id, now() + interval '1 day' FROM memberships WHERE realm_id = $1`, r)
		require.NoError(t, err)
	}

	tables := realmTables(t, pool)
	tables = append(tables, "realms")
	// countAs runs one count inside a transaction as the tenant role with
	// the given realm setting ("" for none), in plain SQL.
	countAs := func(setting, table, where string, args ...any) int {
		t.Helper()
		tx, err := pool.Begin(t.Context())
		require.NoError(t, err)
		defer tx.Rollback(t.Context())
		_, err = tx.Exec(t.Context(), "SET LOCAL ROLE appdor_tenant")
		require.NoError(t, err)
		if setting != "" {
			_, err = tx.Exec(t.Context(), "SELECT set_config('appdor.realm_id', $1, true)", setting)
			require.NoError(t, err)
		}
		var n int
		require.NoError(t, tx.QueryRow(t.Context(), "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()+" "+where, args...).Scan(&n))
		return n
	}
	col := func(table string) string {
		if table == "realms" {
			return "id"
		}
		return "realm_id"
	}
	for _, table := range tables {
		t.Run(table, func(t *testing.T) {
			own := "WHERE " + col(table) + " = $1"
			require.Zero(t, countAs(b.RealmID.String(), table, own, a.RealmID), "realm B sees realm A's %s", table)
			require.Zero(t, countAs(a.RealmID.String(), table, own, b.RealmID), "realm A sees realm B's %s", table)
			require.Zero(t, countAs("", table, ""), "no realm setting sees %s", table)
			if table != "sessions" {
				require.Positive(t, countAs(a.RealmID.String(), table, own, a.RealmID), "realm A does not see its own %s", table)
				require.Positive(t, countAs(b.RealmID.String(), table, own, b.RealmID), "realm B does not see its own %s", table)
			}
		})
	}

	// A write into another realm is refused by WITH CHECK.
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer tx.Rollback(t.Context())
	_, err = tx.Exec(t.Context(), "SET LOCAL ROLE appdor_tenant")
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), "SELECT set_config('appdor.realm_id', $1, true)", b.RealmID.String())
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), "INSERT INTO apps (realm_id, name) VALUES ($1, 'smuggled')", a.RealmID)
	require.ErrorContains(t, err, "row-level security")
}

// TestSettingDoesNotOutliveTransaction: on a pooled connection that has run
// a tenant transaction, the setting reads ” afterwards and the tenant role
// sees nothing: the policy fails closed, not with a cast error.
func TestSettingDoesNotOutliveTransaction(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleOwner, nil)
	seed(t, app, a.Token, 2)
	conn, err := pgx.Connect(t.Context(), testenv.DatabaseURL(t))
	require.NoError(t, err)
	defer conn.Close(t.Context())
	tx, err := conn.Begin(t.Context())
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), "SET LOCAL ROLE appdor_tenant")
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), "SELECT set_config('appdor.realm_id', $1, true)", a.RealmID.String())
	require.NoError(t, err)
	var n int
	require.NoError(t, tx.QueryRow(t.Context(), "SELECT count(*) FROM apps").Scan(&n))
	require.Equal(t, 1, n)
	require.NoError(t, tx.Commit(t.Context()))

	var setting, user string
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT current_setting('appdor.realm_id', true), current_user").Scan(&setting, &user))
	require.Equal(t, "", setting)
	require.NotEqual(t, "appdor_tenant", user)
	tx, err = conn.Begin(t.Context())
	require.NoError(t, err)
	defer tx.Rollback(t.Context())
	_, err = tx.Exec(t.Context(), "SET LOCAL ROLE appdor_tenant")
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(t.Context(), "SELECT count(*) FROM apps").Scan(&n))
	require.Zero(t, n)
}

// TestMigrateDownAndUp: the migrations revert and reapply cleanly, on a
// database of the test's own.
func TestMigrateDownAndUp(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url, name, err := testenv.CreateDatabase(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = testenv.DropDatabase(context.Background(), name) })
	m, err := migrations.Open(ctx, url)
	require.NoError(t, err)
	defer m.Close()
	latest, err := migrations.Latest()
	require.NoError(t, err)
	// Versions may have gaps (golang-migrate allows them): step down until none is applied.
	for steps := 0; ; steps++ {
		v, _, err := m.Version()
		require.NoError(t, err)
		if v == 0 {
			break
		}
		require.Less(t, steps, int(latest), "more down steps than versions")
		require.NoError(t, m.Down())
	}
	v, dirty, err := m.Version()
	require.NoError(t, err)
	require.Zero(t, v)
	require.False(t, dirty)
	require.NoError(t, m.Up())
	v, _, err = m.Version()
	require.NoError(t, err)
	require.Equal(t, latest, v)
}
