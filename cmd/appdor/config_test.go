package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/server"
)

// parsedServe parses args as `appdor serve` flags and reads the config.
func parsedServe(t *testing.T, args ...string) (server.Config, error) {
	t.Helper()
	cmd := serveCmd()
	for _, s := range connSettings { // the root's, in `appdor serve`
		s.register(cmd.Flags())
	}
	require.NoError(t, cmd.ParseFlags(args))
	return serverConfig(cmd)
}

func TestHardeningSettings(t *testing.T) {
	cfg, err := parsedServe(t)
	require.NoError(t, err)
	require.False(t, cfg.HSTS)
	require.Empty(t, cfg.MetricsListen)
	require.Empty(t, cfg.MetricsToken)
	require.False(t, cfg.Pprof)
	require.Equal(t, 10*time.Minute, cfg.MetricsRealmIdle)
	require.Equal(t, 30, cfg.LoginAddressPerMinute)
	require.Equal(t, 10, cfg.LoginAccountPerMinute)
	require.Equal(t, time.Second, cfg.LookupTimeout)
	require.Zero(t, cfg.RelookupConcurrency, "0 is half the cores, decided by tenancy")

	cfg, err = parsedServe(t, "--lookup-timeout", "250ms", "--relookup-concurrency", "3")
	require.NoError(t, err)
	require.Equal(t, 250*time.Millisecond, cfg.LookupTimeout)
	require.Equal(t, 3, cfg.RelookupConcurrency)

	cfg, err = parsedServe(t, "--hsts", "on", "--metrics-listen", "127.0.0.1:9090", "--metrics-realm-idle", "5m", "--pprof", "on",
		"--login-address-attempts-per-minute", "0", "--login-account-attempts-per-minute", "3")
	require.NoError(t, err)
	require.True(t, cfg.HSTS)
	require.Equal(t, "127.0.0.1:9090", cfg.MetricsListen)
	require.Equal(t, 5*time.Minute, cfg.MetricsRealmIdle)
	require.True(t, cfg.Pprof)
	require.Negative(t, cfg.LoginAddressPerMinute, "0 turns it off")
	require.Equal(t, 3, cfg.LoginAccountPerMinute)

	for _, c := range []struct {
		args []string
		env  string
	}{
		{[]string{"--hsts", "maybe"}, "APPDOR_HSTS"},
		{[]string{"--metrics-listen", "9090"}, "APPDOR_METRICS_LISTEN"},
		{[]string{"--metrics-listen", ":8080", "--listen", ":8080"}, "APPDOR_METRICS_LISTEN"},
		{[]string{"--metrics-token", "tiny-secret"}, "APPDOR_METRICS_TOKEN"},
		{[]string{"--metrics-realm-idle", "30s"}, "APPDOR_METRICS_REALM_IDLE"},
		{[]string{"--pprof", "on"}, "APPDOR_PPROF"}, // without --metrics-listen
		{[]string{"--login-address-attempts-per-minute", "-1"}, "APPDOR_LOGIN_ADDRESS_ATTEMPTS_PER_MINUTE"},
		{[]string{"--login-account-attempts-per-minute", "many"}, "APPDOR_LOGIN_ACCOUNT_ATTEMPTS_PER_MINUTE"},
		{[]string{"--lookup-timeout", "0s"}, "APPDOR_LOOKUP_TIMEOUT"},
		{[]string{"--relookup-concurrency", "-2"}, "APPDOR_RELOOKUP_CONCURRENCY"},
	} {
		_, err := parsedServe(t, c.args...)
		require.ErrorContains(t, err, c.env, "%v", c.args)
	}
	_, err = parsedServe(t, "--metrics-token", "tiny-secret")
	require.NotContains(t, err.Error(), "tiny-secret", "the token is never in a message")
}

// TestMetricsTokenStaysSecret: the token comes from its variable, and
// --help does not show it as the flag's default.
func TestMetricsTokenStaysSecret(t *testing.T) {
	const token = "s3cret-metrics-token-value"
	t.Setenv("APPDOR_METRICS_TOKEN", token)
	cfg, err := parsedServe(t)
	require.NoError(t, err)
	require.Equal(t, token, cfg.MetricsToken)

	cmd := serveCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	require.NoError(t, cmd.Usage())
	require.Contains(t, out.String(), "--metrics-token")
	require.NotContains(t, out.String(), token)

	cfg, err = parsedServe(t, "--metrics-token", "another-token-0123456789")
	require.NoError(t, err)
	require.Equal(t, "another-token-0123456789", cfg.MetricsToken, "the flag wins")
}
