package test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// TestHostileTextInTenancy: NUL and other control characters in the sign-in
// email and in a token's name are refused with 422 validation_failed naming
// the field, before PostgreSQL sees them (22P05 was a 500), and nothing is
// written: no session, no token.
func TestHostileTextInTenancy(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleOwner, nil)
	pool := testenv.Pool(t)
	count := func(sql string, args ...any) int {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
		return n
	}
	sessions := count(`SELECT count(*) FROM sessions WHERE user_id = $1`, a.UserID)
	tokens := count(`SELECT count(*) FROM api_tokens WHERE realm_id = $1`, a.RealmID)

	for _, email := range []string{"a\x00b@example.test", a.Email + "\x00", "a\x1b@example.test", "a\nb@example.test"} {
		res := app.Do(t, "POST", "/api/v1/auth/login", "", map[string]any{"email": email, "password": a.Password})
		require.Equal(t, http.StatusUnprocessableEntity, res.Status, "%q: %s", email, res.Body)
		require.Equal(t, "validation_failed", res.ErrorCode(t))
		require.Equal(t, []string{"email"}, res.DetailFields(t))
		require.Nil(t, cookieNamed(res, tenancy.SessionCookie))
	}
	require.Equal(t, sessions, count(`SELECT count(*) FROM sessions WHERE user_id = $1`, a.UserID))

	for _, name := range []string{"ci\x00bot", "ci\x07", "two\nlines"} {
		res := app.Do(t, "POST", "/api/v1/tokens", a.Token, map[string]any{"name": name})
		require.Equal(t, http.StatusUnprocessableEntity, res.Status, "%q: %s", name, res.Body)
		require.Equal(t, "validation_failed", res.ErrorCode(t))
		require.Equal(t, []string{"name"}, res.DetailFields(t))
	}
	require.Equal(t, tokens, count(`SELECT count(*) FROM api_tokens WHERE realm_id = $1`, a.RealmID))

	// The same checks stand behind the command line's realm, user and
	// token creation.
	ctx := context.Background()
	_, err := app.Tenancy.CreateRealm(ctx, "r\x00")
	require.Equal(t, appdor.EValidation, appdor.ErrorCode(err))
	_, err = app.Tenancy.CreateUser(ctx, a.RealmID, "x\x00@example.test", "correct horse", tenancy.RoleViewer)
	require.Equal(t, appdor.EValidation, appdor.ErrorCode(err))
	_, _, err = app.Tenancy.CreateToken(ctx, a.RealmID, a.Email, "t\x00", nil)
	require.Equal(t, appdor.EValidation, appdor.ErrorCode(err))
	require.Equal(t, tokens, count(`SELECT count(*) FROM api_tokens WHERE realm_id = $1`, a.RealmID))

	// A name is counted in characters, not bytes: 200 of "ë" is 400 bytes.
	res := app.Do(t, "POST", "/api/v1/tokens", a.Token, map[string]any{"name": strings.Repeat("ë", 200)})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
}
