package tenancy

import (
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
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
