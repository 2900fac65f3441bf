package tenancy

import (
	"net/http"
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

const (
	principalKey = "appdor.principal"
	personKey    = "appdor.person"
)

// PrincipalOf returns the request's principal, or nil before authentication.
func PrincipalOf(c echo.Context) *Principal {
	p, _ := c.Get(principalKey).(*Principal)
	return p
}

// WithPrincipal stores p on the request, for authentication middleware and tests.
func WithPrincipal(c echo.Context, p *Principal) { c.Set(principalKey, p) }

// Person is who a request comes from before any realm is chosen: the user of
// a session, or the user of a token together with the token's one realm.
type Person struct {
	UserID uuid.UUID
	// Token is the token's principal, nil for a session.
	Token *Principal
	// SessionSecret is the session's secret, "" for a token.
	SessionSecret string
}

// PersonOf returns the request's person, set by Identify.
func PersonOf(c echo.Context) *Person {
	p, _ := c.Get(personKey).(*Person)
	return p
}

var errUnauthorized = appdor.Errorf(appdor.EUnauthorized, "a valid API token or session is required")

// credentials says how a request authenticates: a bearer token when it sends
// an Authorization header (scripts), else a session cookie (browsers).
func credentials(c echo.Context) (token, session string, ok bool) {
	if h := c.Request().Header.Get(echo.HeaderAuthorization); h != "" {
		secret, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return "", "", false
		}
		return strings.TrimSpace(secret), "", true
	}
	if ck, err := c.Cookie(SessionCookie); err == nil && ck.Value != "" {
		return "", ck.Value, true
	}
	return "", "", false
}

func challenge(c echo.Context, err error) error {
	if appdor.ErrorCode(err) == appdor.EUnauthorized {
		c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="appdor", error="invalid_token"`)
	}
	return err
}

// unsafe reports whether the method may change something, and so needs the
// CSRF check when the request rides on a cookie.
func unsafe(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// checkCSRF refuses a cookie-authenticated unsafe request whose CSRFHeader is
// not the session's CSRF token. It needs no database, so it runs first.
func checkCSRF(c echo.Context, sessionSecret string) error {
	if unsafe(c.Request().Method) && !CheckCSRF(sessionSecret, c.Request().Header.Get(CSRFHeader)) {
		return errCSRF
	}
	return nil
}

// Authenticate is the middleware of the realm API: it turns a bearer token,
// or a session cookie with the realm chosen by RealmHeader, into a Principal.
// A GET may name the realm in RealmParam instead, for a browser's
// EventSource, which sends no headers of its own. A missing or dead
// credential is 401; a session's unsafe request without its CSRF token is
// 403 csrf_failed; a realm the person is not a member of is 404.
func (s *Service) Authenticate() echo.MiddlewareFunc {
	return s.credentialed(WithPrincipal, func(c echo.Context, secret string) error {
		realm := c.Request().Header.Get(RealmHeader)
		if realm == "" && c.Request().Method == http.MethodGet {
			realm = c.QueryParam(RealmParam)
		}
		p, err := s.LookupSession(withClientOf(c), secret, realm)
		if err != nil {
			return err
		}
		WithPrincipal(c, p)
		return nil
	})
}

// Identify is the middleware of the routes about the person rather than a
// realm (/me): a token or a session, no realm choice. A session's unsafe
// request needs its CSRF token here too.
func (s *Service) Identify() echo.MiddlewareFunc {
	return s.credentialed(func(c echo.Context, p *Principal) {
		c.Set(personKey, &Person{UserID: p.UserID, Token: p})
	}, func(c echo.Context, secret string) error {
		user, err := s.SessionUser(withClientOf(c), secret)
		if err != nil {
			return err
		}
		c.Set(personKey, &Person{UserID: user, SessionSecret: secret})
		return nil
	})
}

// credentialed is what Authenticate and Identify share: it finds the
// request's credential, looks a token up and hands its principal to byToken,
// or checks a session's CSRF token and hands its secret to bySession. A
// session that has ended also loses its cookies. A credential the server does
// not know is screened by the client's address first (Guard).
func (s *Service) credentialed(byToken func(echo.Context, *Principal), bySession func(echo.Context, string) error) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			token, session, ok := credentials(c)
			if !ok {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="appdor"`)
				return errUnauthorized
			}
			if token != "" || session == "" {
				p, err := s.LookupToken(withClientOf(c), token)
				if err != nil {
					return challenge(c, err)
				}
				byToken(c, p)
				return next(c)
			}
			if err := checkCSRF(c, session); err != nil {
				return err
			}
			if err := bySession(c, session); err != nil {
				if appdor.ErrorCode(err) == appdor.EUnauthorized {
					ClearSessionCookies(c)
				}
				return err
			}
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
