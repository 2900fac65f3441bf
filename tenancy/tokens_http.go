package tenancy

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
)

// maxRequestsPerMinute bounds a token's ceiling: beyond it a ceiling means
// nothing, and the limiter's arithmetic stays in whole microseconds.
const maxRequestsPerMinute = 1_000_000

// TokenRoutes registers the realm's token API on g, the gated API group (it
// passes authentication, the rate limiter and the fairness controller). Only
// owners manage tokens. Every query runs in the principal's realm's tenant
// transaction, so row-level security hides every other realm's tokens; the
// realm_id = the principal's realm in each is the habit, not the wall.
func (s *Service) TokenRoutes(g *echo.Group) {
	owner := Require(RoleOwner)
	g.POST("/tokens", s.createTokenHTTP, owner)
	g.GET("/tokens", s.listTokens, owner)
	g.PATCH("/tokens/:id", s.setTokenLimit, owner)
	g.DELETE("/tokens/:id", s.revokeTokenHTTP, owner)
}

// NewToken is a token as created: the one time its secret is shown.
type NewToken struct {
	Token
	Secret string `json:"token"`
}

func (s *Service) createTokenHTTP(c echo.Context) error {
	p := PrincipalOf(c)
	var in struct {
		Name              string `json:"name"`
		RequestsPerMinute *int   `json:"requests_per_minute"`
	}
	if err := appdor.DecodeJSON(c.Request().Body, &in); err != nil {
		return err
	}
	if err := checkRPM(in.RequestsPerMinute); err != nil {
		return err
	}
	// The token acts as the member who creates it, in this realm only.
	ctx := c.Request().Context()
	var (
		t      Token
		secret string
	)
	err := s.db.Tx(ctx, p.RealmID, func(tx pgx.Tx) (err error) {
		t, secret, err = s.createToken(ctx, tx, p.RealmID, p.UserID, in.Name, in.RequestsPerMinute)
		if err != nil {
			return err
		}
		return audit(ctx, tx, p.RealmID, actorOf(p), "token_created", map[string]any{
			"token_id": t.ID, "name": t.Name, "requests_per_minute": t.RequestsPerMinute})
	})
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
	return c.JSON(http.StatusCreated, NewToken{Token: t, Secret: secret})
}

// TokenInfo is a token as the token list shows it: with its owner's email
// and its use (when the server keeps usage).
type TokenInfo struct {
	Token
	OwnerEmail string `json:"owner_email"`
	TokenActivity
}

func (s *Service) listTokens(c echo.Context) error {
	p := PrincipalOf(c)
	ctx := c.Request().Context()
	var tokens []TokenInfo
	err := s.db.Query(ctx, p.RealmID, func(rows pgx.Rows) (err error) {
		tokens, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (TokenInfo, error) {
			var t TokenInfo
			err := r.Scan(&t.ID, &t.RealmID, &t.UserID, &t.Name, &t.RequestsPerMinute, &t.CreatedAt, &t.RevokedAt, &t.OwnerEmail)
			return t, err
		})
		return err
	},
		`SELECT t.id, t.realm_id, t.user_id, t.name, l.requests_per_minute, t.created_at, t.revoked_at,
		        coalesce(m.email, '')
		 FROM api_tokens t
		 LEFT JOIN token_limits l ON l.realm_id = t.realm_id AND l.token_id = t.id
		 LEFT JOIN appdor_members() m ON m.user_id = t.user_id
		 WHERE t.realm_id = $1
		 ORDER BY t.created_at, t.id
		 LIMIT 10000`, p.RealmID)
	if err != nil {
		return err
	}
	if s.TokenActivity != nil && len(tokens) > 0 {
		// Without the gauges (Redis down) the list still answers, without use.
		if act, err := s.TokenActivity(ctx, p.RealmID); err == nil {
			for i := range tokens {
				tokens[i].TokenActivity = act[tokens[i].ID]
			}
		}
	}
	if tokens == nil {
		tokens = []TokenInfo{}
	}
	return c.JSON(http.StatusOK, map[string]any{"tokens": tokens})
}

// setTokenLimit sets or (null) removes a token's ceiling. The change and its
// notification commit together, in one statement of the realm's transaction.
func (s *Service) setTokenLimit(c echo.Context) error {
	p := PrincipalOf(c)
	id, err := tokenIDParam(c)
	if err != nil {
		return err
	}
	var in map[string]json.RawMessage
	if err := appdor.DecodeJSON(c.Request().Body, &in); err != nil {
		return err
	}
	raw, ok := in["requests_per_minute"]
	if !ok || len(in) != 1 {
		return appdor.Errorf(appdor.EInvalid, `expected {"requests_per_minute": N or null}`)
	}
	var rpm *int
	if !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		var n int
		if err := json.Unmarshal(raw, &n); err != nil {
			return appdor.Errorf(appdor.EValidation, "requests_per_minute must be a whole number or null")
		}
		rpm = &n
	}
	if err := checkRPM(rpm); err != nil {
		return err
	}
	t := Token{RequestsPerMinute: rpm}
	found := false
	err = s.db.Query(c.Request().Context(), p.RealmID, scanOne(&found, &t.ID, &t.RealmID, &t.UserID, &t.Name, &t.CreatedAt, &t.RevokedAt, nil),
		`WITH t AS (
		   SELECT realm_id, id, user_id, name, created_at, revoked_at FROM api_tokens WHERE realm_id = $1 AND id = $2
		 ), up AS (
		   INSERT INTO token_limits (realm_id, token_id, requests_per_minute)
		   SELECT realm_id, id, $3 FROM t WHERE $3::int IS NOT NULL
		   ON CONFLICT (realm_id, token_id) DO UPDATE SET requests_per_minute = excluded.requests_per_minute
		 ), del AS (
		   DELETE FROM token_limits l USING t
		   WHERE $3::int IS NULL AND l.realm_id = t.realm_id AND l.token_id = t.id
		 ), a AS (
		   INSERT INTO audit_log (realm_id, actor, action, detail)
		   SELECT realm_id, $5, 'token_limit_changed', jsonb_build_object('token_id', id, 'name', name, 'requests_per_minute', $3::int)
		   FROM t
		 )
		 SELECT id, realm_id, user_id, name, created_at, revoked_at, pg_notify($4, id::text) FROM t`,
		p.RealmID, id, rpm, TokenChannel, actorOf(p))
	if err != nil {
		return err
	}
	if !found {
		return appdor.Errorf(appdor.ENotFound, "token %s not found", id)
	}
	s.forgetToken(id)
	return c.JSON(http.StatusOK, t)
}

// revokeTokenHTTP revokes a token of this realm; revoking it again is a no-op.
func (s *Service) revokeTokenHTTP(c echo.Context) error {
	p := PrincipalOf(c)
	id, err := tokenIDParam(c)
	if err != nil {
		return err
	}
	found := false
	err = s.db.Query(c.Request().Context(), p.RealmID, scanOne(&found, nil),
		`WITH old AS (
		   SELECT id, revoked_at FROM api_tokens WHERE realm_id = $1 AND id = $2 FOR UPDATE
		 ), t AS (
		   UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now())
		   WHERE realm_id = $1 AND id = $2 RETURNING id, name
		 ), a AS (
		   INSERT INTO audit_log (realm_id, actor, action, detail)
		   SELECT $1, $4, 'token_revoked', jsonb_build_object('token_id', t.id, 'name', t.name)
		   FROM t JOIN old USING (id) WHERE old.revoked_at IS NULL
		 )
		 SELECT pg_notify($3, id::text) FROM t`, p.RealmID, id, TokenChannel, actorOf(p))
	if err != nil {
		return err
	}
	if !found {
		return appdor.Errorf(appdor.ENotFound, "token %s not found", id)
	}
	s.forgetToken(id)
	return c.NoContent(http.StatusNoContent)
}

func checkRPM(rpm *int) error {
	if rpm != nil && (*rpm < 1 || *rpm > maxRequestsPerMinute) {
		return appdor.Errorf(appdor.EValidation, "requests_per_minute must be from 1 to %d, or null for none", maxRequestsPerMinute)
	}
	return nil
}

// tokenIDParam parses the :id of a token route; a malformed id names no
// token of this realm.
func tokenIDParam(c echo.Context) (uuid.UUID, error) {
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return uuid.Nil, appdor.Errorf(appdor.ENotFound, "token %q not found", c.Param("id"))
	}
	return id, nil
}
