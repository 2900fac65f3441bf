package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/test/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// cli runs one appdor command against the test database and decodes its one
// line of JSON.
func cli(t *testing.T, args ...string) map[string]any {
	t.Helper()
	var out bytes.Buffer
	args = append(args, "--database-url", testenv.DatabaseURL(t))
	require.NoError(t, run(t.Context(), args, &out), strings.Join(args, " "))
	require.Equal(t, 1, strings.Count(out.String(), "\n"), "one line of JSON: %q", out.String())
	var v map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &v))
	return v
}

func TestAdminCommandsPrintOneJSONObject(t *testing.T) {
	realm := cli(t, "realm", "create", "Finance")
	require.Equal(t, "Finance", realm["name"])
	realmID := realm["id"].(string)

	user := cli(t, "user", "create", "--realm", realmID, "--email", "ann@finance.test", "--password", "long enough", "--role", "owner")
	require.Equal(t, "ann@finance.test", user["email"])
	require.Equal(t, "owner", user["role"])
	require.NotContains(t, user, "password_hash")

	tok := cli(t, "token", "create", "--realm", realmID, "--user", "ann@finance.test", "--name", "nightly", "--requests-per-minute", "60")
	secret := tok["token"].(string)
	require.True(t, strings.HasPrefix(secret, "apd_"))
	require.EqualValues(t, 60, tok["requests_per_minute"])

	// Only the hash is stored.
	var stored int
	require.NoError(t, testenv.Pool(t).QueryRow(t.Context(),
		`SELECT count(*) FROM api_tokens WHERE hash = sha256(convert_to($1, 'UTF8'))`, secret).Scan(&stored))
	require.Equal(t, 1, stored)
	require.NoError(t, testenv.Pool(t).QueryRow(t.Context(),
		`SELECT count(*) FROM api_tokens WHERE encode(hash, 'escape') LIKE '%' || $1 || '%'`, secret).Scan(&stored))
	require.Zero(t, stored)

	revoked := cli(t, "token", "revoke", tok["id"].(string))
	require.NotEmpty(t, revoked["revoked_at"])

	v := cli(t, "migrate", "version")
	require.Equal(t, v["latest"], v["version"])
	require.Equal(t, false, v["dirty"])
}

func TestBadInputIsOneLineError(t *testing.T) {
	for name, args := range map[string][]string{
		"bad role":    {"user", "create", "--realm", "00000000-0000-0000-0000-000000000001", "--email", "a@b.c", "--password", "long enough", "--role", "god"},
		"bad realm":   {"user", "create", "--realm", "nope", "--email", "a@b.c", "--password", "long enough"},
		"bad limit":   {"token", "create", "--realm", "00000000-0000-0000-0000-000000000001", "--user", "a@b.c", "--name", "n", "--requests-per-minute", "-3"},
		"empty realm": {"realm", "create", " "},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(t.Context(), append(args, "--database-url", testenv.DatabaseURL(t)), &out)
			require.Error(t, err)
			require.NotContains(t, err.Error(), "\n")
			require.Empty(t, out.String())
		})
	}
}

func TestUnreachableDatabaseNamesTheVariableAndRedactsThePassword(t *testing.T) {
	var out bytes.Buffer
	err := run(t.Context(), []string{"serve", "--database-url", "postgres://appdor:hunter22@127.0.0.1:1/appdor?connect_timeout=2",
		"--listen", "127.0.0.1:0"}, &out)
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, "APPDOR_DATABASE_URL")
	require.NotContains(t, msg, "hunter22")
	require.Contains(t, msg, "127.0.0.1:1")
	require.NotContains(t, msg, "\n")

	// An unreachable Redis does not stop the start (TestServeStartsWithoutRedis);
	// a Redis URL that cannot be right does.
	err = run(t.Context(), []string{"serve", "--database-url", testenv.DatabaseURL(t), "--redis-url", "redis://:sekrit@127.0.0.1:1/zero",
		"--listen", "127.0.0.1:0", "--migrate=false"}, &out)
	require.Error(t, err)
	require.Contains(t, err.Error(), "APPDOR_REDIS_URL")
	require.NotContains(t, err.Error(), "sekrit")
}

// TestServeStartsWithoutRedis: `appdor serve` with nothing at its Redis URL
// starts, says "degraded" but ready, and ends with no error on its signal.
func TestServeStartsWithoutRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--database-url", testenv.DatabaseURL(t), "--redis-url", "redis://127.0.0.1:1/0",
			"--listen", addr, "--migrate=false", "--log-level", "error"}, io.Discard)
	}()
	var body struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}
	require.Eventually(t, func() bool {
		res, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		return res.StatusCode == http.StatusOK && json.NewDecoder(res.Body).Decode(&body) == nil
	}, 30*time.Second, 50*time.Millisecond, "serve did not start without Redis")
	require.Equal(t, "degraded", body.Status)
	require.Equal(t, map[string]string{"database": "ok", "redis": "unreachable"}, body.Checks)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop on its signal")
	}
}

func TestBadSettingsNameTheVariable(t *testing.T) {
	for _, c := range []struct{ flag, env, value string }{
		{"--db-max-conns", "APPDOR_DB_MAX_CONNS", "lots"},
		{"--live-writers", "APPDOR_LIVE_WRITERS", "-1"},
		{"--live-writers", "APPDOR_LIVE_WRITERS", "all"},
		{"--read-header-timeout", "APPDOR_READ_HEADER_TIMEOUT", "soon"},
		{"--read-timeout", "APPDOR_READ_TIMEOUT", "0s"},
		{"--write-timeout", "APPDOR_WRITE_TIMEOUT", "-1s"},
		{"--write-timeout", "APPDOR_WRITE_TIMEOUT", "2s"}, // within the default statement timeout
		{"--idle-timeout", "APPDOR_IDLE_TIMEOUT", "x"},
		{"--stream-timeout", "APPDOR_STREAM_TIMEOUT", "0"},
		{"--shutdown-drain", "APPDOR_SHUTDOWN_DRAIN", "later"},
	} {
		var out bytes.Buffer
		err := run(t.Context(), []string{"serve", c.flag, c.value}, &out)
		require.ErrorContains(t, err, c.env, "%s %s", c.flag, c.value)
	}
}

func TestBadFairnessSettingsNameTheVariable(t *testing.T) {
	for _, c := range []struct{ flag, env string }{
		{"--fairness-seats", "APPDOR_FAIRNESS_SEATS"},
		{"--fairness-background-seats", "APPDOR_FAIRNESS_BACKGROUND_SEATS"},
		{"--fairness-background-rest", "APPDOR_FAIRNESS_BACKGROUND_REST"},
		{"--fairness-backlogged-rest", "APPDOR_FAIRNESS_BACKLOGGED_REST"},
		{"--fairness-queue-length", "APPDOR_FAIRNESS_QUEUE_LENGTH"},
		{"--fairness-wait-bound", "APPDOR_FAIRNESS_WAIT_BOUND"},
		{"--fairness-retry-after", "APPDOR_FAIRNESS_RETRY_AFTER"},
	} {
		for _, v := range []string{"soon", "-1", "0s"} {
			if v == "0s" && !strings.Contains(c.flag, "wait") && !strings.Contains(c.flag, "retry") {
				v = "1000001"
			}
			var out bytes.Buffer
			err := run(t.Context(), []string{"serve", c.flag, v}, &out)
			require.ErrorContains(t, err, c.env, "%s %s", c.flag, v)
		}
	}
}

// TestServeWarnsWhenRLSDoesNotBindTheServingRole: a superuser serving role
// draws one WARN line that says what is wrong and what to set; the role the
// tests serve as (no superuser, no BYPASSRLS, owns nothing) draws none.
func TestServeWarnsWhenRLSDoesNotBindTheServingRole(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	warnServingRole(t.Context(), testenv.Pool(t), log, false) // the tests' admin role: a superuser
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 1, buf.String())
	var line map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &line))
	require.Equal(t, "WARN", line["level"])
	require.Contains(t, line["msg"], "serving_role")
	require.Contains(t, line["msg"], "is a superuser")
	require.Contains(t, line["msg"], "APPDOR_MIGRATE_DATABASE_URL")
	require.Equal(t, true, line["superuser"])

	buf.Reset()
	pool, err := pgxpool.New(t.Context(), testenv.ServerURL(t))
	require.NoError(t, err)
	defer pool.Close()
	warnServingRole(t.Context(), pool, log, true)
	require.Empty(t, buf.String())
}

// TestAdminCommandsRunAsTheOwner: with the two roles configured, the admin
// commands use the migration URL's role (the owner); the serving role alone
// may not create a realm.
func TestAdminCommandsRunAsTheOwner(t *testing.T) {
	var out bytes.Buffer
	err := run(t.Context(), []string{"realm", "create", "Refused", "--database-url", testenv.ServerURL(t)}, &out)
	require.ErrorContains(t, err, "permission denied")

	out.Reset()
	require.NoError(t, run(t.Context(), []string{"realm", "create", "Owned",
		"--database-url", testenv.ServerURL(t), "--migrate-database-url", testenv.DatabaseURL(t)}, &out))
	var realm map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &realm))
	require.Equal(t, "Owned", realm["name"])

	out.Reset()
	require.NoError(t, run(t.Context(), []string{"migrate", "version",
		"--database-url", testenv.ServerURL(t), "--migrate-database-url", testenv.DatabaseURL(t)}, &out))
	require.Contains(t, out.String(), `"dirty":false`)

	err = run(t.Context(), []string{"migrate", "version", "--migrate-database-url", "postgres://appdor:hunter22@127.0.0.1:1/appdor?connect_timeout=2"}, &out)
	require.ErrorContains(t, err, "APPDOR_MIGRATE_DATABASE_URL")
	require.NotContains(t, err.Error(), "hunter22")
}
