// Package testenv gives tests the real services Appdor runs on: PostgreSQL and
// Redis, never mocks.
//
// The URLs come from APPDOR_TEST_DATABASE_URL and APPDOR_TEST_REDIS_URL when
// set (CI sets them to the local services); otherwise testcontainers-go starts
// both when a Docker engine answers; otherwise the test fails and says which
// variable to set. A missing service is never a skip.
//
// Each test binary gets its own database, copied from a template that holds
// the migrated schema (one template per migration fingerprint), and drops it
// when done. Tests inside a binary share that database and isolate themselves
// by creating their own realms, which is the product's own isolation.
//
// The schema belongs to the role of APPDOR_TEST_DATABASE_URL (DatabaseURL,
// Pool: what the tests seed and inspect with). The server runs as ServerRole
// (ServerURL), a login role that is no superuser, cannot bypass RLS, owns
// nothing and holds only appdor_server's grants, as in production.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/appdor/appdor/migrations"
)

// Variables that point tests at their services.
const (
	DatabaseEnv = "APPDOR_TEST_DATABASE_URL"
	RedisEnv    = "APPDOR_TEST_REDIS_URL"
)

var (
	servicesOnce sync.Once
	baseDBURL    string
	baseRedisURL string
	servicesErr  error

	dbOnce   sync.Once
	dbURL    string
	dbName   string
	dbErr    error
	poolOnce sync.Once
	pool     *pgxpool.Pool
	poolErr  error
)

func services() (string, string, error) {
	servicesOnce.Do(func() {
		baseDBURL, baseRedisURL = os.Getenv(DatabaseEnv), os.Getenv(RedisEnv)
		if baseDBURL != "" && baseRedisURL != "" {
			return
		}
		if os.Getenv("CI") == "true" {
			servicesErr = fmt.Errorf("CI=true but %s or %s is not set; .ci/run exports both", DatabaseEnv, RedisEnv)
			return
		}
		baseDBURL, baseRedisURL, servicesErr = startContainers(baseDBURL, baseRedisURL)
	})
	return baseDBURL, baseRedisURL, servicesErr
}

// AdminURL is the URL of the PostgreSQL server tests run on, as given: a role
// that may create databases.
func AdminURL(t testing.TB) string {
	t.Helper()
	u, _, err := services()
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// RedisURL is the Redis tests use. Keys carry realm ids, which every test
// makes fresh, so tests share it safely.
func RedisURL(t testing.TB) string {
	t.Helper()
	_, r, err := services()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// withDatabase returns base with its database name replaced.
func withDatabase(base, name string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("%s: %w", DatabaseEnv, err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// ServerRole is the login role tests serve as. Roles belong to the whole
// cluster: it is made once, idempotently, and never dropped, since another
// test binary may be using it. Its password matters only where the server
// asks for one (testcontainers); it guards nothing but test databases.
const ServerRole = "appdor_test_server"

// ensureServerRole makes ServerRole, a member of appdor_server, unless it is
// there. It runs under template's lock, so binaries do not race to make it.
func ensureServerRole(ctx context.Context, admin *pgx.Conn) error {
	_, err := admin.Exec(ctx, `DO $$
		BEGIN
			IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '`+ServerRole+`') THEN
				CREATE ROLE `+ServerRole+` LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE INHERIT
					PASSWORD '`+ServerRole+`';
			END IF;
			IF NOT pg_has_role('`+ServerRole+`', 'appdor_server', 'MEMBER') THEN
				GRANT appdor_server TO `+ServerRole+`;
			END IF;
		END
		$$`)
	if err != nil {
		return fmt.Errorf("making the test server role %s: %w", ServerRole, err)
	}
	return nil
}

// template makes (once per fingerprint, across processes) a database holding
// the migrated schema, and returns its name. It also makes ServerRole.
func template(ctx context.Context, admin *pgx.Conn, base string) (name string, err error) {
	name = "appdor_tpl_" + migrations.Fingerprint()
	// Serialize template building and copying across parallel test binaries.
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(4242001)"); err != nil {
		return "", err
	}
	defer admin.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(4242001)")
	// The role needs appdor_server, which the migrations make.
	defer func() {
		if err == nil {
			err = ensureServerRole(ctx, admin)
		}
	}()
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	building := name + "_building"
	_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+building)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+building); err != nil {
		return "", err
	}
	u, err := withDatabase(base, building)
	if err != nil {
		return "", err
	}
	m, err := migrations.Open(ctx, u)
	if err != nil {
		return "", err
	}
	err = m.Up()
	m.Close()
	if err != nil {
		return "", fmt.Errorf("migrating the test template: %w", err)
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+building+" RENAME TO "+name); err != nil {
		return "", err
	}
	return name, nil
}

// CreateDatabase makes a new migrated database and returns its URL and name.
// The caller drops it with DropDatabase.
func CreateDatabase(ctx context.Context) (string, string, error) {
	base, _, err := services()
	if err != nil {
		return "", "", err
	}
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", "", fmt.Errorf("%s=%s: %w", DatabaseEnv, redact(base), err)
	}
	defer admin.Close(ctx)
	tpl, err := template(ctx, admin, base)
	if err != nil {
		return "", "", err
	}
	name := fmt.Sprintf("appdor_test_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000_000)
	for attempt := 0; ; attempt++ {
		_, err = admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+tpl)
		var pgErr *pgconn.PgError
		if err == nil || attempt == 20 || !(asPgErr(err, &pgErr) && pgErr.Code == "55006") { // object_in_use
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return "", "", fmt.Errorf("creating test database: %w", err)
	}
	u, err := withDatabase(base, name)
	return u, name, err
}

// DropDatabase removes a database made by CreateDatabase.
func DropDatabase(ctx context.Context, name string) error {
	base, _, err := services()
	if err != nil {
		return err
	}
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

// DatabaseURL is this test binary's migrated database. Call Main from
// TestMain so it is dropped at the end.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	dbOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		dbURL, dbName, dbErr = CreateDatabase(ctx)
	})
	if dbErr != nil {
		t.Fatal(dbErr)
	}
	return dbURL
}

// ServerURL is this binary's database as ServerRole: the URL the server
// under test serves with.
func ServerURL(t testing.TB) string {
	t.Helper()
	u, err := AsServer(DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// AsServer returns a database URL of CreateDatabase with ServerRole as its user.
func AsServer(dbURL string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", err
	}
	u.User = url.UserPassword(ServerRole, ServerRole)
	return u.String(), nil
}

// Pool is a pool on this binary's database as the schema's owner (the role
// of APPDOR_TEST_DATABASE_URL), shared by its tests to seed and inspect.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	u := DatabaseURL(t)
	poolOnce.Do(func() {
		pool, poolErr = pgxpool.New(context.Background(), u)
	})
	if poolErr != nil {
		t.Fatal(poolErr)
	}
	return pool
}

// Main runs the tests and then drops the database they used.
func Main(m *testing.M) {
	code := m.Run()
	if pool != nil {
		pool.Close()
	}
	if dbName != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := DropDatabase(ctx, dbName); err != nil {
			fmt.Fprintln(os.Stderr, "testenv: dropping", dbName+":", err)
		}
		cancel()
	}
	stopContainers()
	os.Exit(code)
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable)"
	}
	return u.Redacted()
}

func asPgErr(err error, target **pgconn.PgError) bool { return errors.As(err, target) }
