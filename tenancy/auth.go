package tenancy

import (
	"context"
	"errors"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/rls"
)

// Principal is who a request acts as: a member of one realm, through a token
// or a session.
type Principal struct {
	RealmID uuid.UUID
	UserID  uuid.UUID
	Role    Role
	// TokenID is the API token used, or uuid.Nil for a browser session.
	TokenID uuid.UUID
	// TokenRPM is the token's requests-per-minute ceiling, 0 when it has none.
	TokenRPM int
	// RealmRPM is the realm's own API ceiling, 0 for the server's default.
	RealmRPM int
}

const principalKey = "appdor.principal"

// PrincipalOf returns the request's principal, or nil before authentication.
func PrincipalOf(c echo.Context) *Principal {
	p, _ := c.Get(principalKey).(*Principal)
	return p
}

// WithPrincipal stores p on the request, for authentication middleware and tests.
func WithPrincipal(c echo.Context, p *Principal) { c.Set(principalKey, p) }

var errUnauthorized = appdor.Errorf(appdor.EUnauthorized, "a valid API token or session is required")

// LookupToken finds the live token with this secret: its realm, its member's
// role and its ceilings, in one query. A revoked or unknown token is
// unauthorized.
func (s *Service) LookupToken(ctx context.Context, secret string) (*Principal, error) {
	if !strings.HasPrefix(secret, tokenPrefix) || len(secret) > 100 {
		return nil, errUnauthorized
	}
	p := &Principal{}
	var tokenRPM, realmRPM *int
	err := s.pool.QueryRow(ctx,
		`SELECT t.id, t.realm_id, t.user_id, m.role, l.requests_per_minute, r.requests_per_minute
		 FROM api_tokens t
		 JOIN memberships m ON m.realm_id = t.realm_id AND m.user_id = t.user_id
		 JOIN realms r ON r.id = t.realm_id
		 LEFT JOIN token_limits l ON l.realm_id = t.realm_id AND l.token_id = t.id
		 WHERE t.hash = $1 AND t.revoked_at IS NULL`, hashSecret(secret)).
		Scan(&p.TokenID, &p.RealmID, &p.UserID, &p.Role, &tokenRPM, &realmRPM)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errUnauthorized
	}
	if err != nil {
		return nil, rls.Interpret(err)
	}
	if tokenRPM != nil {
		p.TokenRPM = *tokenRPM
	}
	if realmRPM != nil {
		p.RealmRPM = *realmRPM
	}
	return p, nil
}

// Authenticate is the middleware that turns a bearer token into a Principal,
// or answers 401.
func (s *Service) Authenticate() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			h := c.Request().Header.Get(echo.HeaderAuthorization)
			secret, ok := strings.CutPrefix(h, "Bearer ")
			if !ok {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="appdor"`)
				return errUnauthorized
			}
			p, err := s.LookupToken(c.Request().Context(), strings.TrimSpace(secret))
			if err != nil {
				if appdor.ErrorCode(err) == appdor.EUnauthorized {
					c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="appdor", error="invalid_token"`)
				}
				return err
			}
			WithPrincipal(c, p)
			return next(c)
		}
	}
}

// Require refuses a request whose principal's role is below min.
func Require(min Role) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			p := PrincipalOf(c)
			if p == nil {
				return errUnauthorized
			}
			if !p.Role.AtLeast(min) {
				return appdor.Errorf(appdor.EForbidden, "this needs the %s role; you are %s", min, p.Role)
			}
			return next(c)
		}
	}
}
