package main

import (
	"bytes"
	"math"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// gcCmd is a command with the collector's settings, given args.
func gcCmd(t *testing.T, args ...string) *cobra.Command {
	t.Helper()
	cmd := &cobra.Command{}
	for _, s := range gcSettings {
		s.register(cmd.Flags())
	}
	require.NoError(t, cmd.Flags().Parse(args))
	return cmd
}

func noEnv(string) string { return "" }

func TestBadGCSettingsNameTheVariable(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
	}{
		{[]string{"--gc-percent", "lots"}, "APPDOR_GC_PERCENT"},
		{[]string{"--gc-percent", "5"}, "APPDOR_GC_PERCENT"},
		{[]string{"--gc-percent", "-1"}, "APPDOR_GC_PERCENT"},
		{[]string{"--gc-percent", "off", "--memory-limit", "off"}, "APPDOR_GC_PERCENT"},
		{[]string{"--memory-limit", "plenty"}, "APPDOR_MEMORY_LIMIT"},
		{[]string{"--memory-limit", "512"}, "APPDOR_MEMORY_LIMIT"}, // bytes, not megabytes: refused
		{[]string{"--memory-limit", "-1G"}, "APPDOR_MEMORY_LIMIT"},
	} {
		_, err := gcConfig(gcCmd(t, c.args...), 0, noEnv)
		require.ErrorContains(t, err, c.env, "%v", c.args)
		require.NotContains(t, err.Error(), "\n")
	}
	// And from the command line, before anything is started.
	var out bytes.Buffer
	err := run(t.Context(), []string{"serve", "--memory-limit", "lots"}, &out)
	require.ErrorContains(t, err, "APPDOR_MEMORY_LIMIT")
}

func TestGCPolicy(t *testing.T) {
	p, err := gcConfig(gcCmd(t), 0, noEnv)
	require.NoError(t, err)
	require.Equal(t, 400, p.percent)
	require.Equal(t, int64(math.MaxInt64), p.memoryLimit, "no container limit: no memory limit")

	p, err = gcConfig(gcCmd(t), 1000<<20, noEnv)
	require.NoError(t, err)
	require.Equal(t, int64(900<<20), p.memoryLimit, "90% of the container's limit")

	p, err = gcConfig(gcCmd(t, "--gc-percent", "off", "--memory-limit", "2GiB"), 1000<<20, noEnv)
	require.NoError(t, err)
	require.Equal(t, -1, p.percent)
	require.Equal(t, int64(2<<30), p.memoryLimit)

	p, err = gcConfig(gcCmd(t, "--memory-limit", "900M"), 0, noEnv)
	require.NoError(t, err)
	require.Equal(t, int64(900_000_000), p.memoryLimit, "M is decimal, as in the other size settings")
	require.Equal(t, "APPDOR_MEMORY_LIMIT", p.limitFrom)

	// The runtime's own variables win: the values are left as it set them.
	env := map[string]string{"GOGC": "150", "GOMEMLIMIT": "3GiB"}
	p, err = gcConfig(gcCmd(t, "--gc-percent", "200"), 0, func(k string) string { return env[k] })
	require.NoError(t, err)
	require.Equal(t, "GOGC", p.percentFrom)
	require.Equal(t, "GOMEMLIMIT", p.limitFrom)
	require.NotEqual(t, 200, p.percent)
}
