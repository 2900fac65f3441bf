package test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/server"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// emptyApp is an Appdor on a database of its own with nobody in it yet: a
// first run. Usage is flushed every 100 ms.
func emptyApp(t *testing.T) *testenv.App {
	t.Helper()
	dbURL, name, err := testenv.CreateDatabase(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = testenv.DropDatabase(context.Background(), name) })
	pool, err := pgxpool.New(t.Context(), dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	serverURL, err := testenv.AsServer(dbURL)
	require.NoError(t, err)
	app := testenv.NewApp(t, func(c *server.Config) {
		c.DatabaseURL = serverURL
		c.UsageFlushInterval = 100 * time.Millisecond
		c.Automations.Workers = -1
	})
	app.Tenancy = tenancy.New(pool)
	return app
}

// setUp runs the first run's setup and returns the operator's browser.
func setUp(t *testing.T, app *testenv.App, realm, email string) *browser {
	t.Helper()
	link := app.SetupLink()
	require.NotNil(t, link, "a first run offers a setup link")
	res := app.Do(t, "POST", "/api/v1/setup", "", map[string]any{
		"token": link.Secret(), "realm": realm, "email": email, "password": "correct horse"})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	b := browserOf(app, res)
	require.NotEmpty(t, b.session)
	return b
}

func TestFirstRunSetup(t *testing.T) {
	t.Parallel()
	app := emptyApp(t)
	secret := app.SetupLink().Secret()
	require.True(t, strings.HasPrefix(secret, "setup_"))

	// Without the secret, nothing is there.
	for _, path := range []string{"/setup", "/setup?token=setup_guess", "/api/v1/setup?token=setup_guess"} {
		res := app.Do(t, "GET", path, "", nil)
		require.Equal(t, http.StatusNotFound, res.Status, path)
	}
	res := app.Do(t, "GET", "/setup?token="+url.QueryEscape(secret), "", nil)
	require.Equal(t, http.StatusOK, res.Status)
	require.Contains(t, res.Header.Get("Content-Type"), "text/html")
	require.Equal(t, http.StatusNoContent, app.Do(t, "GET", "/api/v1/setup?token="+url.QueryEscape(secret), "", nil).Status)

	// Bad input loses nothing: the link still works after it.
	res = app.Do(t, "POST", "/api/v1/setup", "", map[string]any{"token": secret, "realm": "Ops", "email": "nobody", "password": "correct horse"})
	require.Equal(t, http.StatusUnprocessableEntity, res.Status, string(res.Body))

	b := setUp(t, app, "Ops", "first@example.test")
	var me meBody
	res = b.do(t, "GET", "/api/v1/me", nil)
	require.Equal(t, http.StatusOK, res.Status)
	res.JSON(t, &me)
	require.Equal(t, "first@example.test", me.User.Email)
	require.Contains(t, string(res.Body), `"operator":true`)
	require.Len(t, me.Realms, 1)
	require.Equal(t, "owner", string(me.Realms[0].Role))

	// The link is spent: the page and both routes are gone.
	require.Equal(t, http.StatusNotFound, app.Do(t, "GET", "/setup?token="+url.QueryEscape(secret), "", nil).Status)
	res = app.Do(t, "POST", "/api/v1/setup", "", map[string]any{"token": secret, "realm": "Again", "email": "second@example.test", "password": "correct horse"})
	require.Equal(t, http.StatusNotFound, res.Status)

	// The owner has a grid to work in.
	res = b.do(t, "POST", "/api/v1/apps", map[string]any{"name": "First app"})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
	res = b.do(t, "GET", "/api/v1/audit?action=setup", nil)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.Len(t, res.Map(t)["entries"], 1)
}

func TestMembersAddSignInChangeRemove(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	owner := app.NewTenant(t, tenancy.RoleOwner, nil)
	other := app.NewTenant(t, tenancy.RoleOwner, nil)
	email := fmt.Sprintf("colleague-%d@example.test", time.Now().UnixNano())

	// Added with an initial password, the colleague signs in and edits.
	res := app.Do(t, "POST", "/api/v1/members", owner.Token, map[string]any{"email": email, "role": "editor", "password": "initial pw 1"})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
	added := res.Map(t)
	require.Equal(t, false, added["existing"])
	require.Nil(t, added["invite_path"])
	userID := added["user_id"].(string)
	res = app.Do(t, "POST", "/api/v1/members", owner.Token, map[string]any{"email": strings.ToUpper(email), "role": "viewer", "password": "initial pw 1"})
	require.Equal(t, http.StatusConflict, res.Status, "a member already: %s", res.Body)
	res = app.Do(t, "POST", "/api/v1/members", owner.Token, map[string]any{"email": "x@example.test", "role": "boss"})
	require.Equal(t, http.StatusUnprocessableEntity, res.Status)

	b, res := signIn(t, app, email, "initial pw 1")
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.Equal(t, http.StatusCreated, b.do(t, "POST", "/api/v1/apps", map[string]any{"name": "Editor's app"}).Status)
	require.Equal(t, http.StatusForbidden, b.do(t, "GET", "/api/v1/members", nil).Status, "an editor does not see members")

	// The list shows them with their last sign-in.
	res = app.Do(t, "GET", "/api/v1/members", owner.Token, nil)
	require.Equal(t, http.StatusOK, res.Status)
	var members struct {
		Members []tenancy.MemberInfo `json:"members"`
	}
	res.JSON(t, &members)
	require.Len(t, members.Members, 2)
	var colleague tenancy.MemberInfo
	for _, m := range members.Members {
		if m.UserID.String() == userID {
			colleague = m
		}
	}
	require.Equal(t, tenancy.RoleEditor, colleague.Role)
	require.NotNil(t, colleague.LastSignInAt)

	// Another realm's owner cannot see, change or remove them.
	res = app.Do(t, "PATCH", "/api/v1/members/"+userID, other.Token, map[string]any{"role": "owner"})
	require.Equal(t, http.StatusNotFound, res.Status)
	require.Equal(t, http.StatusNotFound, app.Do(t, "DELETE", "/api/v1/members/"+userID, other.Token, nil).Status)
	require.NotContains(t, string(app.Do(t, "GET", "/api/v1/members", other.Token, nil).Body), email)

	// The last owner cannot be demoted or removed.
	res = app.Do(t, "PATCH", "/api/v1/members/"+owner.UserID.String(), owner.Token, map[string]any{"role": "editor"})
	require.Equal(t, http.StatusConflict, res.Status, string(res.Body))
	require.Equal(t, http.StatusConflict, app.Do(t, "DELETE", "/api/v1/members/"+owner.UserID.String(), owner.Token, nil).Status)

	// Demoted to viewer, their session can no longer write, at once.
	res = app.Do(t, "PATCH", "/api/v1/members/"+userID, owner.Token, map[string]any{"role": "viewer"})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.Equal(t, http.StatusForbidden, b.do(t, "POST", "/api/v1/apps", map[string]any{"name": "No"}).Status)

	// Removed, their session ends (they belong to no realm now) and their
	// token of the realm stops at once, on a token cache that knew it.
	_, colleagueToken, err := app.Tenancy.CreateToken(t.Context(), owner.RealmID, email, "colleague's script", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, app.Do(t, "GET", "/api/v1/apps", colleagueToken, nil).Status)
	require.Equal(t, http.StatusNoContent, app.Do(t, "DELETE", "/api/v1/members/"+userID, owner.Token, nil).Status)
	require.Equal(t, http.StatusUnauthorized, b.do(t, "GET", "/api/v1/apps", nil).Status)
	require.Eventually(t, func() bool {
		return app.Do(t, "GET", "/api/v1/apps", colleagueToken, nil).Status == http.StatusUnauthorized
	}, 2*time.Second, 20*time.Millisecond, "the removed member's token is refused within the notification's delivery, not the cache's 10 s")
	require.Equal(t, http.StatusNotFound, app.Do(t, "DELETE", "/api/v1/members/"+userID, owner.Token, nil).Status)

	// The audit log tells the story, newest first.
	res = app.Do(t, "GET", "/api/v1/audit", owner.Token, nil)
	require.Equal(t, http.StatusOK, res.Status)
	var log struct {
		Entries []tenancy.AuditEntry `json:"entries"`
	}
	res.JSON(t, &log)
	var actions []string
	for _, e := range log.Entries {
		actions = append(actions, e.Action)
	}
	require.Equal(t, []string{"member_removed", "member_role_changed", "sign_in", "member_added"}, actions)
	require.Equal(t, "token:"+owner.TokenID.String(), log.Entries[0].Actor)
}

func TestInviteSetsAPasswordOnce(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	owner := app.NewTenant(t, tenancy.RoleOwner, nil)
	email := fmt.Sprintf("invited-%d@example.test", time.Now().UnixNano())
	res := app.Do(t, "POST", "/api/v1/members", owner.Token, map[string]any{"email": email, "role": "viewer"})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
	path := res.Map(t)["invite_path"].(string)
	require.True(t, strings.HasPrefix(path, "/invite?token=inv_"), path)
	secret := strings.TrimPrefix(path, "/invite?token=")

	// Not signed in yet: no password works.
	_, res = signIn(t, app, email, "!")
	require.Equal(t, http.StatusUnauthorized, res.Status)
	res = app.Do(t, "POST", "/api/v1/auth/invite", "", map[string]any{"token": secret, "password": "short"})
	require.Equal(t, http.StatusUnprocessableEntity, res.Status, "a bad password spends nothing")
	res = app.Do(t, "POST", "/api/v1/auth/invite", "", map[string]any{"token": secret, "password": "my own secret"})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.NotNil(t, cookieNamed(res, tenancy.SessionCookie))
	res = app.Do(t, "POST", "/api/v1/auth/invite", "", map[string]any{"token": secret, "password": "another one"})
	require.Equal(t, http.StatusNotFound, res.Status, "an invite works once")

	b, res := signIn(t, app, email, "my own secret")
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.Equal(t, http.StatusOK, b.do(t, "GET", "/api/v1/apps", nil).Status)
	res = app.Do(t, "GET", "/api/v1/audit?action=invite_accepted,member_added", owner.Token, nil)
	require.Len(t, res.Map(t)["entries"], 2)
}

func TestAuditFilterAndCursor(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	owner := app.NewTenant(t, tenancy.RoleOwner, nil)
	for i := range 5 {
		res := app.Do(t, "POST", "/api/v1/tokens", owner.Token, map[string]any{"name": fmt.Sprintf("script %d", i)})
		require.Equal(t, http.StatusCreated, res.Status)
	}
	_, res := signIn(t, app, owner.Email, "wrong password")
	require.Equal(t, http.StatusUnauthorized, res.Status)

	var names []string
	path := "/api/v1/audit?action=token_created&limit=2"
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		res := app.Do(t, "GET", path, owner.Token, nil)
		require.Equal(t, http.StatusOK, res.Status, string(res.Body))
		m := res.Map(t)
		for _, e := range m["entries"].([]any) {
			names = append(names, e.(map[string]any)["detail"].(map[string]any)["name"].(string))
		}
		next, ok := m["next"].(string)
		if !ok {
			break
		}
		path = "/api/v1/audit?action=token_created&limit=2&before=" + next
	}
	require.Equal(t, []string{"script 4", "script 3", "script 2", "script 1", "script 0"}, names)
	res = app.Do(t, "GET", "/api/v1/audit?action=sign_in_failed", owner.Token, nil)
	require.Len(t, res.Map(t)["entries"], 1)
	require.Equal(t, http.StatusUnprocessableEntity, app.Do(t, "GET", "/api/v1/audit?action=nope", owner.Token, nil).Status)
	require.Equal(t, http.StatusUnprocessableEntity, app.Do(t, "GET", "/api/v1/audit?limit=0", owner.Token, nil).Status)
	require.Equal(t, http.StatusUnprocessableEntity, app.Do(t, "GET", "/api/v1/audit?before=x", owner.Token, nil).Status)
}

// TestUsageGaugesAndOperators: a token's burst over its ceiling shows in its
// row and in its realm's gauges; the operator sees both realms side by side,
// an owner who is not one is refused, and the operator still cannot read
// the other realm's table.
func TestUsageGaugesAndOperators(t *testing.T) {
	t.Parallel()
	app := emptyApp(t)
	op := setUp(t, app, "Alpha", "operator@example.test")
	rpm := 30
	res := op.do(t, "POST", "/api/v1/tokens", map[string]any{"name": "script", "requests_per_minute": rpm})
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
	token := res.Map(t)["token"].(string)
	tokenID := res.Map(t)["id"].(string)

	r, err := app.Tenancy.CreateRealm(t.Context(), "Beta")
	require.NoError(t, err)
	beta := app.AddMember(t, r.ID, tenancy.RoleOwner, nil)
	bt := seed(t, app, beta.Token, 1)

	refused := 0
	for range 60 {
		if app.Do(t, "GET", "/api/v1/apps", token, nil).Status == http.StatusTooManyRequests {
			refused++
		}
	}
	require.Positive(t, refused, "a burst of 60 over a ceiling of 30 a minute is refused in part")
	for range 3 {
		require.Equal(t, http.StatusOK, app.Do(t, "GET", "/api/v1/apps", beta.Token, nil).Status)
	}

	var usage struct {
		Realm struct {
			Requests int64 `json:"requests_last_hour"`
			Refused  int64 `json:"refused_last_hour"`
			Minutes  []struct {
				Requests int64            `json:"requests"`
				Refused  map[string]int64 `json:"refused"`
				P95      *float64         `json:"p95_ms"`
			} `json:"minutes"`
		} `json:"realm"`
	}
	require.Eventually(t, func() bool {
		res := op.do(t, "GET", "/api/v1/usage", nil)
		require.Equal(t, http.StatusOK, res.Status, string(res.Body))
		res.JSON(t, &usage)
		return usage.Realm.Refused >= int64(refused)
	}, 10*time.Second, 100*time.Millisecond, "the refusals reach the gauges")
	require.Len(t, usage.Realm.Minutes, 60)
	require.GreaterOrEqual(t, usage.Realm.Requests, int64(60))
	var rateLimited int64
	for _, m := range usage.Realm.Minutes {
		rateLimited += m.Refused["rate_limited"]
	}
	require.EqualValues(t, refused, rateLimited)

	res = op.do(t, "GET", "/api/v1/tokens", nil)
	var tokens struct {
		Tokens []tenancy.TokenInfo `json:"tokens"`
	}
	res.JSON(t, &tokens)
	require.Len(t, tokens.Tokens, 1)
	require.Equal(t, tokenID, tokens.Tokens[0].ID.String())
	require.EqualValues(t, refused, tokens.Tokens[0].RefusedLastHour)
	require.NotNil(t, tokens.Tokens[0].LastUsedAt)
	require.Equal(t, "operator@example.test", tokens.Tokens[0].OwnerEmail)

	// The operator sees both realms, busiest first; an owner who is not an
	// operator is refused.
	require.Eventually(t, func() bool {
		res := op.do(t, "GET", "/api/v1/operator/usage", nil)
		require.Equal(t, http.StatusOK, res.Status, string(res.Body))
		realms := res.Map(t)["realms"].([]any)
		return len(realms) == 2 && realms[0].(map[string]any)["name"] == "Alpha" &&
			realms[1].(map[string]any)["requests_last_hour"].(float64) >= 3
	}, 10*time.Second, 100*time.Millisecond)
	require.Equal(t, http.StatusForbidden, app.Do(t, "GET", "/api/v1/operator/usage", beta.Token, nil).Status)

	// Never the other realm's rows: RLS applies to operators.
	require.Equal(t, http.StatusNotFound, op.do(t, "GET", "/api/v1/tables/"+bt.TableID+"/rows", nil).Status)
	op.realm = beta.RealmID.String()
	require.Equal(t, http.StatusNotFound, op.do(t, "GET", "/api/v1/tables/"+bt.TableID+"/rows", nil).Status,
		"choosing a realm one is not a member of finds nothing")
}

// TestTwoOwnersDemotingEachOtherKeepOne: two owners demote each other at
// the same moment, many times over; every time one of them stays an owner.
func TestTwoOwnersDemotingEachOtherKeepOne(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	for range 10 {
		a := app.NewTenant(t, tenancy.RoleOwner, nil)
		b := app.AddMember(t, a.RealmID, tenancy.RoleOwner, nil)
		statuses := make(chan int, 2)
		start := make(chan struct{})
		for _, x := range []struct {
			by     testenv.Tenant
			target string
		}{{a, b.UserID.String()}, {b, a.UserID.String()}} {
			go func() {
				<-start
				statuses <- app.Do(t, "PATCH", "/api/v1/members/"+x.target, x.by.Token, map[string]any{"role": "editor"}).Status
			}()
		}
		close(start)
		got := []int{<-statuses, <-statuses}
		var owners int
		require.NoError(t, testenv.Pool(t).QueryRow(t.Context(),
			`SELECT count(*) FROM memberships WHERE realm_id = $1 AND role = 'owner'`, a.RealmID).Scan(&owners))
		require.Equal(t, 1, owners, "statuses %v", got)
		// The loser is refused: 409 when it was still an owner as it
		// arrived and found itself the last, 403 when it was demoted first.
		ok, refused := 0, 0
		for _, s := range got {
			switch s {
			case http.StatusOK:
				ok++
			case http.StatusConflict, http.StatusForbidden:
				refused++
			}
		}
		require.Equal(t, []int{1, 1}, []int{ok, refused}, "statuses %v", got)
	}
}
