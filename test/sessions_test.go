package test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/test/testenv"
)

// browser is a signed-in browser: it sends the session cookie on every
// request and, unless told otherwise, the CSRF header and a realm choice.
type browser struct {
	app     *testenv.App
	session string
	csrf    string
	realm   string // X-Appdor-Realm, "" for none
}

// signIn signs in through the API and returns the browser and the answer.
func signIn(t *testing.T, app *testenv.App, email, password string) (*browser, testenv.Response) {
	t.Helper()
	res := app.Do(t, "POST", "/api/v1/auth/login", "", map[string]any{"email": email, "password": password})
	return browserOf(app, res), res
}

// browserOf is a browser holding the session cookies res set, if any.
func browserOf(app *testenv.App, res testenv.Response) *browser {
	b := &browser{app: app}
	for _, ck := range cookiesOf(res) {
		switch ck.Name {
		case tenancy.SessionCookie:
			b.session = ck.Value
		case tenancy.CSRFCookie:
			b.csrf = ck.Value
		}
	}
	return b
}

func cookiesOf(res testenv.Response) []*http.Cookie {
	return (&http.Response{Header: res.Header}).Cookies()
}

func cookieNamed(res testenv.Response, name string) *http.Cookie {
	for _, ck := range cookiesOf(res) {
		if ck.Name == name {
			return ck
		}
	}
	return nil
}

// do sends a request as the browser; extra headers override the defaults
// (an empty value removes one).
func (b *browser) do(t *testing.T, method, path string, body any, extra ...string) testenv.Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, b.app.URL+path, rd)
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if b.session != "" {
		req.AddCookie(&http.Cookie{Name: tenancy.SessionCookie, Value: b.session})
		req.AddCookie(&http.Cookie{Name: tenancy.CSRFCookie, Value: b.csrf})
	}
	if b.csrf != "" {
		req.Header.Set(tenancy.CSRFHeader, b.csrf)
	}
	if b.realm != "" {
		req.Header.Set(tenancy.RealmHeader, b.realm)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		if extra[i+1] == "" {
			req.Header.Del(extra[i])
		} else {
			req.Header.Set(extra[i], extra[i+1])
		}
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return testenv.Response{Status: res.StatusCode, Header: res.Header, Body: data}
}

type meBody struct {
	User struct {
		ID    uuid.UUID `json:"id"`
		Email string    `json:"email"`
	} `json:"user"`
	Realms []struct {
		ID   uuid.UUID `json:"id"`
		Name string    `json:"name"`
		Role string    `json:"role"`
	} `json:"realms"`
}

func TestLoginSetsCookiesAndStoresOnlyAHash(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleEditor, nil)

	b, res := signIn(t, app, a.Email, a.Password)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	var me meBody
	res.JSON(t, &me)
	require.Equal(t, a.UserID, me.User.ID)
	require.Equal(t, a.Email, me.User.Email)
	require.Len(t, me.Realms, 1)
	require.Equal(t, a.RealmID, me.Realms[0].ID)
	require.Equal(t, "editor", me.Realms[0].Role)
	require.NotEmpty(t, me.Realms[0].Name)

	sc := cookieNamed(res, tenancy.SessionCookie)
	require.NotNil(t, sc)
	require.True(t, sc.HttpOnly)
	require.Equal(t, http.SameSiteLaxMode, sc.SameSite)
	require.Equal(t, "/", sc.Path)
	require.False(t, sc.Secure, "plain HTTP: no Secure flag")
	require.Greater(t, sc.MaxAge, 13*24*3600)
	require.GreaterOrEqual(t, len(sc.Value), 40)

	cc := cookieNamed(res, tenancy.CSRFCookie)
	require.NotNil(t, cc)
	require.False(t, cc.HttpOnly, "the page must read the CSRF cookie")
	require.Equal(t, http.SameSiteLaxMode, cc.SameSite)
	require.Equal(t, "/", cc.Path)
	require.NotEqual(t, sc.Value, cc.Value)

	// The table holds the SHA-256 of the secret, never the secret.
	sum := sha256.Sum256([]byte(b.session))
	pool := testenv.Pool(t)
	var n int
	require.NoError(t, pool.QueryRow(t.Context(),
		`SELECT count(*) FROM sessions WHERE user_id = $1 AND hash = $2 AND expires_at > now() + interval '13 days'`,
		a.UserID, sum[:]).Scan(&n))
	require.Equal(t, 1, n)
	require.NoError(t, pool.QueryRow(t.Context(),
		`SELECT count(*) FROM sessions WHERE hash = $1 OR position($1 in hash) > 0 OR position($2 in hash) > 0`,
		[]byte(b.session), []byte(b.csrf)).Scan(&n))
	require.Zero(t, n)

	// The session works, and its principal is the member's.
	res = b.do(t, "GET", "/api/v1/apps", nil)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))

	// Signing in again from the same browser replaces its session.
	res = b.do(t, "POST", "/api/v1/auth/login", map[string]any{"email": a.Email, "password": a.Password})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.NotEqual(t, b.session, cookieNamed(res, tenancy.SessionCookie).Value)
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM sessions WHERE hash = $1`, sum[:]).Scan(&n))
	require.Zero(t, n, "the replaced session is gone")
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM sessions WHERE user_id = $1`, a.UserID).Scan(&n))
	require.Equal(t, 1, n)
}

func TestLoginRefusesWithOneMessage(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleOwner, nil)

	var messages []string
	for name, in := range map[string]map[string]any{
		"wrong password":   {"email": a.Email, "password": "wrong horse"},
		"unknown email":    {"email": "nobody-" + uuid.NewString() + "@example.test", "password": a.Password},
		"empty":            {"email": "", "password": ""},
		"too long":         {"email": a.Email, "password": a.Password + string(bytes.Repeat([]byte("x"), 100))},
		"no password sent": {"email": a.Email},
	} {
		res := app.Do(t, "POST", "/api/v1/auth/login", "", in)
		require.Equal(t, http.StatusUnauthorized, res.Status, name)
		require.Equal(t, "unauthorized", res.ErrorCode(t), name)
		require.Nil(t, cookieNamed(res, tenancy.SessionCookie), name)
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		res.JSON(t, &e)
		messages = append(messages, e.Error.Message)
	}
	for _, m := range messages {
		require.Equal(t, messages[0], m, "every refusal says the same")
	}

	res := app.Do(t, "POST", "/api/v1/auth/login", "", "{not json")
	require.Equal(t, http.StatusBadRequest, res.Status)
	require.Equal(t, "invalid_request", res.ErrorCode(t))

	// What an HTML form on another site can send without asking: text/plain
	// shaped like JSON. It signs nobody in.
	req, err := http.NewRequest("POST", app.URL+"/api/v1/auth/login",
		strings.NewReader(`{"email":"`+a.Email+`","password":"`+a.Password+`","x":"="}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "text/plain")
	plain, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	plain.Body.Close()
	require.Equal(t, http.StatusBadRequest, plain.StatusCode)
	require.Empty(t, plain.Cookies())

	// The email is matched without regard to case.
	_, res = signIn(t, app, bytes.NewBuffer(bytes.ToUpper([]byte(a.Email))).String(), a.Password)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
}

func TestLogoutEndsTheSession(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleViewer, nil)
	b, res := signIn(t, app, a.Email, a.Password)
	require.Equal(t, http.StatusOK, res.Status)

	// Another site cannot sign the person out: logout needs the CSRF token.
	res = b.do(t, "POST", "/api/v1/auth/logout", nil, tenancy.CSRFHeader, "")
	require.Equal(t, http.StatusForbidden, res.Status)
	require.Equal(t, "csrf_failed", res.ErrorCode(t))
	require.Equal(t, http.StatusOK, b.do(t, "GET", "/api/v1/me", nil).Status)

	res = b.do(t, "POST", "/api/v1/auth/logout", nil)
	require.Equal(t, http.StatusNoContent, res.Status, string(res.Body))
	for _, name := range []string{tenancy.SessionCookie, tenancy.CSRFCookie} {
		ck := cookieNamed(res, name)
		require.NotNil(t, ck, name)
		require.Empty(t, ck.Value)
		require.Less(t, ck.MaxAge, 0)
	}
	sum := sha256.Sum256([]byte(b.session))
	var n int
	require.NoError(t, testenv.Pool(t).QueryRow(t.Context(), `SELECT count(*) FROM sessions WHERE hash = $1`, sum[:]).Scan(&n))
	require.Zero(t, n)

	// The old cookie authenticates nothing now.
	for _, path := range []string{"/api/v1/me", "/api/v1/apps"} {
		res = b.do(t, "GET", path, nil)
		require.Equal(t, http.StatusUnauthorized, res.Status, path)
		require.Equal(t, "unauthorized", res.ErrorCode(t))
	}
	// Logging out again is harmless.
	require.Equal(t, http.StatusNoContent, b.do(t, "POST", "/api/v1/auth/logout", nil).Status)
}

func TestExpiredSessionIsUnauthorized(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleOwner, nil)
	b, _ := signIn(t, app, a.Email, a.Password)
	sum := sha256.Sum256([]byte(b.session))
	_, err := testenv.Pool(t).Exec(t.Context(), `UPDATE sessions SET expires_at = now() - interval '1 second' WHERE hash = $1`, sum[:])
	require.NoError(t, err)
	res := b.do(t, "GET", "/api/v1/apps", nil)
	require.Equal(t, http.StatusUnauthorized, res.Status)
	require.Equal(t, http.StatusUnauthorized, b.do(t, "GET", "/api/v1/me", nil).Status)
	ck := cookieNamed(res, tenancy.SessionCookie)
	require.NotNil(t, ck, "a dead session's cookie is cleared")
	require.Less(t, ck.MaxAge, 0)
}

func TestMeListsRealmsAndRoles(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleOwner, nil)
	other, err := app.Tenancy.CreateRealm(t.Context(), "other "+uuid.NewString()[:8])
	require.NoError(t, err)
	_, err = app.Tenancy.CreateUser(t.Context(), other.ID, a.Email, a.Password, tenancy.RoleViewer)
	require.NoError(t, err)

	b, res := signIn(t, app, a.Email, a.Password)
	require.Equal(t, http.StatusOK, res.Status)
	for _, r := range []testenv.Response{res, b.do(t, "GET", "/api/v1/me", nil)} {
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var me meBody
		r.JSON(t, &me)
		require.Equal(t, a.UserID, me.User.ID)
		roles := map[uuid.UUID]string{}
		for _, x := range me.Realms {
			roles[x.ID] = x.Role
		}
		require.Equal(t, map[uuid.UUID]string{a.RealmID: "owner", other.ID: "viewer"}, roles)
	}

	// A token is its user in its one realm.
	res = app.Do(t, "GET", "/api/v1/me", a.Token, nil)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	var me meBody
	res.JSON(t, &me)
	require.Equal(t, a.UserID, me.User.ID)
	require.Len(t, me.Realms, 1)
	require.Equal(t, a.RealmID, me.Realms[0].ID)
	require.Equal(t, "owner", me.Realms[0].Role)

	res = app.Do(t, "GET", "/api/v1/me", "", nil)
	require.Equal(t, http.StatusUnauthorized, res.Status)
}

func TestSessionRealmChoice(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleOwner, nil)
	other, err := app.Tenancy.CreateRealm(t.Context(), "other "+uuid.NewString()[:8])
	require.NoError(t, err)
	_, err = app.Tenancy.CreateUser(t.Context(), other.ID, a.Email, a.Password, tenancy.RoleViewer)
	require.NoError(t, err)
	stranger := app.NewTenant(t, tenancy.RoleOwner, nil)

	// One app in each realm, named apart.
	res := app.Do(t, "POST", "/api/v1/apps", a.Token, map[string]any{"name": "in A"})
	require.Equal(t, http.StatusCreated, res.Status)
	ownerB := app.AddMember(t, other.ID, tenancy.RoleOwner, nil)
	res = app.Do(t, "POST", "/api/v1/apps", ownerB.Token, map[string]any{"name": "in B"})
	require.Equal(t, http.StatusCreated, res.Status)

	b, _ := signIn(t, app, a.Email, a.Password)
	appNames := func(r testenv.Response) []string {
		var body struct {
			Apps []struct{ Name string } `json:"apps"`
		}
		r.JSON(t, &body)
		var names []string
		for _, x := range body.Apps {
			names = append(names, x.Name)
		}
		return names
	}

	res = b.do(t, "GET", "/api/v1/apps", nil)
	require.Equal(t, http.StatusBadRequest, res.Status, string(res.Body))
	require.Equal(t, "realm_required", res.ErrorCode(t))

	b.realm = a.RealmID.String()
	res = b.do(t, "GET", "/api/v1/apps", nil)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.Equal(t, []string{"in A"}, appNames(res))

	b.realm = other.ID.String()
	res = b.do(t, "GET", "/api/v1/apps", nil)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.Equal(t, []string{"in B"}, appNames(res))
	// The role is the one held in the chosen realm: a viewer there.
	res = b.do(t, "POST", "/api/v1/apps", map[string]any{"name": "nope"})
	require.Equal(t, http.StatusForbidden, res.Status, string(res.Body))
	require.Equal(t, "forbidden", res.ErrorCode(t))

	for _, realm := range []string{stranger.RealmID.String(), uuid.NewString(), "not-a-uuid"} {
		b.realm = realm
		res = b.do(t, "GET", "/api/v1/apps", nil)
		require.Equal(t, http.StatusNotFound, res.Status, realm)
		require.Equal(t, "not_found", res.ErrorCode(t))
	}

	// A GET may name the realm in ?realm= instead (an EventSource sends no
	// headers); the header wins when both are sent, and a write may not.
	b.realm = ""
	res = b.do(t, "GET", "/api/v1/apps?realm="+other.ID.String(), nil)
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))
	require.Equal(t, []string{"in B"}, appNames(res))
	b.realm = a.RealmID.String()
	require.Equal(t, []string{"in A"}, appNames(b.do(t, "GET", "/api/v1/apps?realm="+other.ID.String(), nil)))
	b.realm = ""
	res = b.do(t, "GET", "/api/v1/apps?realm="+stranger.RealmID.String(), nil)
	require.Equal(t, http.StatusNotFound, res.Status, "a realm the person is not a member of")
	res = b.do(t, "POST", "/api/v1/apps?realm="+a.RealmID.String(), map[string]any{"name": "x"})
	require.Equal(t, http.StatusBadRequest, res.Status, string(res.Body))
	require.Equal(t, "realm_required", res.ErrorCode(t))

	// /me needs no realm, whatever the header says.
	require.Equal(t, http.StatusOK, b.do(t, "GET", "/api/v1/me", nil).Status)

	// A member of one realm may leave the header out.
	single, _ := signIn(t, app, stranger.Email, stranger.Password)
	require.Equal(t, http.StatusOK, single.do(t, "GET", "/api/v1/apps", nil).Status)
}

func TestSessionCSRF(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleEditor, nil)
	b, _ := signIn(t, app, a.Email, a.Password)

	body := map[string]any{"name": "csrf"}
	for name, value := range map[string]string{"missing": "", "wrong": wrongToken(b.csrf), "another session's": func() string {
		c, _ := signIn(t, app, a.Email, a.Password)
		return c.csrf
	}()} {
		res := b.do(t, "POST", "/api/v1/apps", body, tenancy.CSRFHeader, value)
		require.Equal(t, http.StatusForbidden, res.Status, name)
		require.Equal(t, "csrf_failed", res.ErrorCode(t), name)
	}
	// Reads need no CSRF token.
	res := b.do(t, "GET", "/api/v1/apps", nil, tenancy.CSRFHeader, "")
	require.Equal(t, http.StatusOK, res.Status)
	require.Empty(t, res.Map(t)["apps"], "nothing was written by the refused requests")

	res = b.do(t, "POST", "/api/v1/apps", body)
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))

	// A bearer token is exempt: no cookie rides along, so no other site can send it.
	res = app.Do(t, "POST", "/api/v1/apps", a.Token, body)
	require.Equal(t, http.StatusCreated, res.Status, string(res.Body))
}

func TestSessionCannotReadAnotherRealm(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleOwner, nil)
	victim := app.NewTenant(t, tenancy.RoleOwner, nil)
	sv := seed(t, app, victim.Token, 2)

	b, _ := signIn(t, app, a.Email, a.Password)
	for _, realm := range []string{"", a.RealmID.String(), victim.RealmID.String()} {
		b.realm = realm
		for _, path := range []string{
			"/api/v1/tables/" + sv.TableID,
			"/api/v1/tables/" + sv.TableID + "/rows",
			"/api/v1/tables/" + sv.TableID + "/rows/" + sv.RowID,
			"/api/v1/apps/" + sv.AppID + "/tables",
		} {
			res := b.do(t, "GET", path, nil)
			require.Equal(t, http.StatusNotFound, res.Status, "realm %q %s: %s", realm, path, res.Body)
			require.Equal(t, "not_found", res.ErrorCode(t))
		}
		res := b.do(t, "POST", "/api/v1/tables/"+sv.TableID+"/rows", map[string]any{"rows": []map[string]any{{"cells": map[string]any{sv.FieldID: "x"}}}})
		require.Equal(t, http.StatusNotFound, res.Status, string(res.Body))
	}
	res := app.Do(t, "GET", "/api/v1/tables/"+sv.TableID+"/rows", victim.Token, nil)
	require.Len(t, res.Map(t)["rows"], 2)
}

// TestLoginCounted: sign-ins are counted on /metrics by result, next to the
// login_concurrency refusals.
func TestLoginCounted(t *testing.T) {
	t.Parallel()
	app := testenv.SharedApp(t)
	a := app.NewTenant(t, tenancy.RoleViewer, nil)
	_, res := signIn(t, app, a.Email, a.Password)
	require.Equal(t, http.StatusOK, res.Status)
	_, res = signIn(t, app, a.Email, "wrong horse")
	require.Equal(t, http.StatusUnauthorized, res.Status)
	res = app.Do(t, "GET", "/metrics", "", nil)
	require.Equal(t, http.StatusOK, res.Status)
	require.Contains(t, string(res.Body), `appdor_logins_total{result="ok"}`)
	require.Contains(t, string(res.Body), `appdor_logins_total{result="wrong"}`)
	require.Contains(t, string(res.Body), `appdor_login_concurrency_refused_total`)
}

// wrongToken is token with its first character changed.
func wrongToken(token string) string {
	if token[0] == 'x' {
		return "y" + token[1:]
	}
	return "x" + token[1:]
}
