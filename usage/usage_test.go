package usage

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPercentile(t *testing.T) {
	require.Nil(t, Percentile(make([]int64, 14), 0.95))
	b := make([]int64, 14)
	b[0] = 100 // all at most 1 ms
	require.InDelta(t, 0.95, *Percentile(b, 0.95), 1e-9)
	b = make([]int64, 14)
	b[3], b[6] = 90, 10 // 90 in (5, 10] ms, 10 in (50, 100] ms
	require.InDelta(t, 75, *Percentile(b, 0.95), 1e-9, "halfway into (50, 100]")
	b = make([]int64, 14)
	b[13] = 1 // slower than the last bound
	require.Equal(t, 10000.0, *Percentile(b, 0.95))
}
