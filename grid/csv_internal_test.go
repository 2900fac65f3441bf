package grid

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor"
)

// TestPartialReportsRowsOnAnyError: the error that stops an import carries
// what it had written, whether it is the client's (coded) or not.
func TestPartialReportsRowsOnAnyError(t *testing.T) {
	t.Parallel()
	res := &csvImport{Inserted: 2000, Errors: []csvError{}}

	err := partial(errors.New("database: connection reset"), res)
	require.Equal(t, appdor.EInternal, appdor.ErrorCode(err))
	require.Same(t, res, appdor.DetailsOf(err))

	err = partial(appdor.Errorf(appdor.EUnavailable, "busy"), res)
	var ae *appdor.Error
	require.True(t, errors.As(err, &ae))
	require.Equal(t, appdor.EUnavailable, ae.Code)
	require.Same(t, res, ae.Details)
	require.Contains(t, ae.Message, "2000 rows")
}
