package rls_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/rls"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// serverPool is a pool as the role the server runs as in tests: no
// superuser, no BYPASSRLS, owns nothing, a member of appdor_server.
func serverPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), testenv.ServerURL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// member is a realm with one member, a token with a ceiling, a session and
// an audit row, made as the owner.
type member struct {
	realm, user         uuid.UUID
	email               string
	tokenHash, sessHash []byte
}

func newMember(t *testing.T) member {
	t.Helper()
	ctx := t.Context()
	owner := tenancy.New(testenv.Pool(t))
	r, err := owner.CreateRealm(ctx, "privilege "+uuid.NewString()[:8])
	require.NoError(t, err)
	email := uuid.NewString()[:12] + "@example.test"
	m, err := owner.CreateUser(ctx, r.ID, email, "correct horse", tenancy.RoleOwner)
	require.NoError(t, err)
	rpm := 60
	_, secret, err := owner.CreateToken(ctx, r.ID, email, "probe", &rpm)
	require.NoError(t, err)
	th := sha256.Sum256([]byte(secret))
	sh := sha256.Sum256([]byte("aps_" + uuid.NewString()))
	_, err = testenv.Pool(t).Exec(ctx,
		`INSERT INTO sessions (hash, user_id, expires_at) VALUES ($1, $2, now() + interval '1 hour')`, sh[:], m.ID)
	require.NoError(t, err)
	_, err = testenv.Pool(t).Exec(ctx, `INSERT INTO audit_log (realm_id, actor, action) VALUES ($1, 'test', 'seeded')`, r.ID)
	require.NoError(t, err)
	return member{realm: r.ID, user: m.ID, email: email, tokenHash: th[:], sessHash: sh[:]}
}

func count(t *testing.T, run func(scan func(pgx.Rows) error) error) int {
	t.Helper()
	n := -1
	require.NoError(t, run(func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&n); err != nil {
				return err
			}
		}
		return rows.Err()
	}))
	return n
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

func TestServingRoleStanding(t *testing.T) {
	t.Parallel()
	st, err := rls.ServingRole(t.Context(), serverPool(t))
	require.NoError(t, err)
	require.Equal(t, testenv.ServerRole, st.Role)
	require.True(t, st.Sound(), "the test server role: %v", st.Problems())

	// The tests' admin role is a superuser (APPDOR_TEST_DATABASE_URL).
	st, err = rls.ServingRole(t.Context(), testenv.Pool(t))
	require.NoError(t, err)
	require.True(t, st.Superuser)
	require.False(t, st.Sound())
	require.Contains(t, st.Problems(), "is a superuser")
}

// TestServingRoleLooksUpOnlyWhatItNames: outside a tenant transaction the
// serving role sees, in the tables authentication reads, only the rows a
// lookup key names — nothing without one — and no grid table or audit row.
func TestServingRoleLooksUpOnlyWhatItNames(t *testing.T) {
	t.Parallel()
	a, b := newMember(t), newMember(t)
	db := rls.New(serverPool(t), 0, 0)
	ctx := t.Context()
	countBy := func(keys rls.Keys, table string, realm uuid.UUID) int {
		col := "realm_id"
		if table == "realms" {
			col = "id"
		}
		return count(t, func(scan func(pgx.Rows) error) error {
			return db.Lookup(ctx, keys, scan, "SELECT count(*) FROM "+table+" WHERE "+col+" = $1", realm)
		})
	}
	for _, table := range []string{"realms", "memberships", "api_tokens", "token_limits"} {
		t.Run(table, func(t *testing.T) {
			require.Zero(t, countBy(rls.Keys{}, table, a.realm), "no key")
			require.Equal(t, 1, countBy(rls.Keys{TokenHash: a.tokenHash}, table, a.realm), "A's token")
			require.Zero(t, countBy(rls.Keys{TokenHash: a.tokenHash}, table, b.realm), "A's token sees B")
			require.Zero(t, countBy(rls.Keys{TokenHash: b.tokenHash}, table, a.realm), "B's token sees A")
			if table == "realms" || table == "memberships" {
				require.Equal(t, 1, countBy(rls.Keys{SessionHash: b.sessHash}, table, b.realm), "B's session")
				require.Zero(t, countBy(rls.Keys{SessionHash: b.sessHash}, table, a.realm), "B's session sees A")
				require.Equal(t, 1, countBy(rls.Keys{User: a.user}, table, a.realm), "A's user")
				require.Zero(t, countBy(rls.Keys{User: a.user}, table, b.realm), "A's user sees B")
			} else {
				require.Zero(t, countBy(rls.Keys{SessionHash: b.sessHash}, table, b.realm), "a session names no token")
				require.Zero(t, countBy(rls.Keys{User: a.user}, table, a.realm), "a user names no token")
			}
		})
	}
	// People and sessions: by email, by id, by the session's hash.
	people := func(keys rls.Keys, sql string, args ...any) int {
		return count(t, func(scan func(pgx.Rows) error) error { return db.Lookup(ctx, keys, scan, sql, args...) })
	}
	require.Zero(t, people(rls.Keys{}, `SELECT count(*) FROM users`))
	require.Zero(t, people(rls.Keys{}, `SELECT count(*) FROM sessions`))
	require.Equal(t, 1, people(rls.Keys{Email: strings.ToUpper(a.email)}, `SELECT count(*) FROM users`))
	require.Equal(t, 1, people(rls.Keys{Email: a.email}, `SELECT count(*) FROM users WHERE id = $1`, a.user))
	require.Zero(t, people(rls.Keys{Email: a.email}, `SELECT count(*) FROM sessions`))
	require.Equal(t, 1, people(rls.Keys{User: b.user}, `SELECT count(*) FROM users WHERE id = $1`, b.user))
	require.Zero(t, people(rls.Keys{User: b.user}, `SELECT count(*) FROM users WHERE id = $1`, a.user))
	require.Equal(t, 1, people(rls.Keys{SessionHash: b.sessHash}, `SELECT count(*) FROM sessions`))
	require.Zero(t, people(rls.Keys{SessionHash: b.sessHash}, `SELECT count(*) FROM users`))
	require.Zero(t, people(rls.Keys{SessionHash: b.sessHash}, `SELECT count(*) FROM sessions WHERE user_id = $1`, a.user))
	// Ending or starting someone else's session needs their key.
	require.NoError(t, db.Lookup(ctx, rls.Keys{SessionHash: a.sessHash}, func(rows pgx.Rows) error { return rows.Err() },
		`DELETE FROM sessions WHERE user_id = $1`, b.user))
	err := db.Lookup(ctx, rls.Keys{User: a.user}, func(rows pgx.Rows) error { return rows.Err() },
		`INSERT INTO sessions (hash, user_id, expires_at) VALUES ('\x01', $1, now() + interval '1 hour')`, b.user)
	require.Equal(t, "42501", sqlState(err), "%v", err) // new row violates row-level security policy
	var live int
	require.NoError(t, testenv.Pool(t).QueryRow(ctx, `SELECT count(*) FROM sessions WHERE user_id = $1`, b.user).Scan(&live))
	require.Equal(t, 1, live, "B's session survives")

	for _, table := range []string{"audit_log", "apps", "rows"} {
		err := db.Lookup(ctx, rls.Keys{TokenHash: a.tokenHash}, func(pgx.Rows) error { return nil },
			"SELECT count(*) FROM "+table)
		require.Error(t, err, table)
		require.Equal(t, "42501", sqlState(err), "%s: %v", table, err) // insufficient_privilege
	}
}

// TestCraftedQueryInRealmTransactionSeesNoOtherRealm: whatever the SQL says
// inside realm A's transaction — another realm's id in the WHERE clause, a
// write aimed at it, dropping the tenant role — realm B's tokens and
// memberships stay out of sight.
func TestCraftedQueryInRealmTransactionSeesNoOtherRealm(t *testing.T) {
	t.Parallel()
	a, b := newMember(t), newMember(t)
	db := rls.New(serverPool(t), 0, 0)
	ctx := t.Context()
	scalar := func(tx pgx.Tx, sql string, args ...any) int {
		var n int
		require.NoError(t, tx.QueryRow(ctx, sql, args...).Scan(&n), sql)
		return n
	}
	probe := func(tx pgx.Tx, asServer bool) {
		require.Zero(t, scalar(tx, `SELECT count(*) FROM api_tokens WHERE realm_id = $1`, b.realm))
		require.Zero(t, scalar(tx, `SELECT count(*) FROM api_tokens WHERE hash = $1`, b.tokenHash))
		require.Zero(t, scalar(tx, `SELECT count(*) FROM memberships WHERE realm_id = $1 OR user_id = $2`, b.realm, b.user))
		require.Zero(t, scalar(tx, `SELECT count(*) FROM token_limits WHERE realm_id = $1`, b.realm))
		require.Zero(t, scalar(tx, `SELECT count(*) FROM realms WHERE id = $1`, b.realm))
		if asServer { // the tenant may not read people or sessions at all
			require.Zero(t, scalar(tx, `SELECT count(*) FROM memberships m JOIN sessions s ON s.user_id = m.user_id
				WHERE s.hash = $1`, b.sessHash))
			require.Zero(t, scalar(tx, `SELECT count(*) FROM sessions`))
			require.Zero(t, scalar(tx, `SELECT count(*) FROM users`))
		}
		require.Equal(t, 1, scalar(tx, `SELECT count(*) FROM api_tokens`), "its own token, and only it")
	}
	require.NoError(t, db.Tx(ctx, a.realm, func(tx pgx.Tx) error {
		probe(tx, false)
		tag, err := tx.Exec(ctx, `UPDATE api_tokens SET revoked_at = now() WHERE realm_id = $1`, b.realm)
		require.NoError(t, err)
		require.Zero(t, tag.RowsAffected(), "revoked another realm's token")
		// Back to the serving role: its lookup policies need keys it was
		// not given, and realm_isolation still holds the realm to A.
		_, err = tx.Exec(ctx, `RESET ROLE`)
		require.NoError(t, err)
		probe(tx, true)
		return nil
	}))
	var revoked bool
	require.NoError(t, testenv.Pool(t).QueryRow(ctx,
		`SELECT revoked_at IS NOT NULL FROM api_tokens WHERE hash = $1`, b.tokenHash).Scan(&revoked))
	require.False(t, revoked)
}

// TestServingRoleCannotChangeTheSchema: the serving role owns nothing, so it
// can neither alter, drop nor switch off the tables' policies, nor create
// tables, nor write where it has no grant — inside a tenant transaction or not.
func TestServingRoleCannotChangeTheSchema(t *testing.T) {
	t.Parallel()
	pool := serverPool(t)
	db := rls.New(pool, 0, 0)
	statements := []struct {
		sql string
		// tenant: the tenant role may run it (within its realm, which RLS
		// holds it to); only the serving role is refused.
		tenant bool
	}{
		{sql: `ALTER TABLE api_tokens DISABLE ROW LEVEL SECURITY`},
		{sql: `ALTER TABLE rows NO FORCE ROW LEVEL SECURITY`},
		{sql: `ALTER TABLE memberships ADD COLUMN smuggled text`},
		{sql: `DROP POLICY realm_isolation ON apps`},
		{sql: `DROP TABLE audit_log`},
		{sql: `TRUNCATE rows`},
		{sql: `CREATE TABLE smuggled (x int)`},
		{sql: `INSERT INTO realms (name) VALUES ('smuggled')`},
		// Owners remove members in their realm's transaction.
		{sql: `DELETE FROM memberships`, tenant: true},
		{sql: `UPDATE users SET password_hash = 'x'`},
		{sql: `UPDATE api_tokens SET revoked_at = now()`, tenant: true},
		{sql: `DELETE FROM apps`, tenant: true},
	}
	for _, st := range statements {
		sql := st.sql
		_, err := pool.Exec(t.Context(), sql)
		require.Equal(t, "42501", sqlState(err), "%s: %v", sql, err) // insufficient_privilege
		if st.tenant {
			continue
		}
		err = db.Tx(t.Context(), uuid.New(), func(tx pgx.Tx) error {
			_, err := tx.Exec(t.Context(), sql)
			return err
		})
		require.Equal(t, "42501", sqlState(err), "as the tenant: %s: %v", sql, err)
	}
	var exists bool
	require.NoError(t, testenv.Pool(t).QueryRow(t.Context(),
		`SELECT relforcerowsecurity FROM pg_class WHERE oid = 'rows'::regclass`).Scan(&exists))
	require.True(t, exists)
}

// TestLookupSettingsEndWithTheStatement: the keys of a lookup do not outlive
// it on the pooled connection.
func TestLookupSettingsEndWithTheStatement(t *testing.T) {
	t.Parallel()
	a := newMember(t)
	cfg, err := pgxpool.ParseConfig(testenv.ServerURL(t))
	require.NoError(t, err)
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	defer pool.Close()
	db := rls.New(pool, 1500*time.Millisecond, 0)
	require.Equal(t, 1, count(t, func(scan func(pgx.Rows) error) error {
		return db.Lookup(t.Context(), rls.Keys{TokenHash: a.tokenHash, User: a.user}, scan, `SELECT count(*) FROM api_tokens`)
	}))
	var token, user string
	require.NoError(t, pool.QueryRow(t.Context(),
		`SELECT current_setting('appdor.token_hash', true), current_setting('appdor.user_id', true)`).Scan(&token, &user))
	require.Empty(t, token)
	require.Empty(t, user)
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM api_tokens`).Scan(&n))
	require.Zero(t, n)
}

// TestServingRoleStandingOfAnOwner: a role that owns a table of the schema is
// not sound, superuser or not. The role is this test's own (roles belong to
// the whole cluster): a unique name, dropped when done.
func TestServingRoleStandingOfAnOwner(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	admin := testenv.Pool(t)
	name := "appdor_test_owner_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "")
	role, table := pgx.Identifier{name}.Sanitize(), pgx.Identifier{name + "_table"}.Sanitize()
	_, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN NOSUPERUSER NOBYPASSRLS PASSWORD '"+name+"'")
	require.NoError(t, err)
	t.Cleanup(func() {
		bg := context.Background()
		_, _ = admin.Exec(bg, "DROP TABLE IF EXISTS "+table)
		_, _ = admin.Exec(bg, "DROP ROLE IF EXISTS "+role)
	})
	_, err = admin.Exec(ctx, "CREATE TABLE "+table+" (x int)")
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "ALTER TABLE "+table+" OWNER TO "+role)
	require.NoError(t, err)

	u, err := url.Parse(testenv.DatabaseURL(t))
	require.NoError(t, err)
	u.User = url.UserPassword(name, name)
	pool, err := pgxpool.New(ctx, u.String())
	require.NoError(t, err)
	defer pool.Close()
	st, err := rls.ServingRole(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, name, st.Role)
	require.False(t, st.Superuser)
	require.Equal(t, []string{name + "_table"}, st.Owns)
	require.False(t, st.Sound())
	require.Equal(t, []string{"owns the tables (" + name + "_table)"}, st.Problems())
}

// TestServerRolePoliciesNeedAKey fails when a migration gives appdor_server a
// policy that does not ask for a lookup key or the realm (a USING (true) by
// another name), or gives appdor_server a login, RLS bypass or a table.
func TestServerRolePoliciesNeedAKey(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	var login, inherit, bypass, super bool
	var owned int
	require.NoError(t, pool.QueryRow(t.Context(), `
		SELECT rolcanlogin, rolinherit, rolbypassrls, rolsuper,
		       (SELECT count(*) FROM pg_class WHERE relowner = r.oid)
		FROM pg_roles r WHERE rolname = 'appdor_server'`).Scan(&login, &inherit, &bypass, &super, &owned))
	require.False(t, login)
	require.False(t, inherit, "appdor_server would pass the tenant's grants on outside tenant transactions")
	require.False(t, bypass)
	require.False(t, super)
	require.Zero(t, owned)

	rows, err := pool.Query(t.Context(), `
		SELECT p.polrelid::regclass::text, p.polname::text,
		       coalesce(pg_get_expr(p.polqual, p.polrelid), ''), coalesce(pg_get_expr(p.polwithcheck, p.polrelid), '')
		FROM pg_policy p
		WHERE 'appdor_server'::regrole = ANY (p.polroles) OR 0::oid = ANY (p.polroles)`)
	require.NoError(t, err)
	type policy struct{ Table, Name, Using, Check string }
	policies, err := pgx.CollectRows(rows, pgx.RowToStructByPos[policy])
	require.NoError(t, err)
	require.NotEmpty(t, policies)
	for _, p := range policies {
		for _, expr := range []string{p.Using, p.Check} {
			if expr == "" {
				continue
			}
			require.Contains(t, expr, "current_setting('appdor.", "%s on %s: %s", p.Name, p.Table, expr)
		}
	}
}
