package tenancy

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
)

// PeopleRoutes registers sign-in, sign-out and /me on g, the public API
// group: sign-in needs no credential, sign-out ends whatever session the
// cookie names, and /me identifies the person without choosing a realm.
func (s *Service) PeopleRoutes(g *echo.Group) {
	g.POST("/auth/login", s.login)
	g.POST("/auth/logout", s.logout)
	g.GET("/me", s.me, s.Identify())
}

// MeResponse is the answer of sign-in and of GET /me.
type MeResponse struct {
	User   User        `json:"user"`
	Realms []RealmRole `json:"realms"`
}

func (s *Service) login(c echo.Context) error {
	var in struct {
		Email    string `json:"email"`
		Password string `json:"password"`
	}
	dec := json.NewDecoder(c.Request().Body)
	if err := dec.Decode(&in); err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return appdor.Errorf(appdor.ETooLarge, "the request body is too large")
		case errors.Is(err, io.EOF):
			return appdor.Errorf(appdor.EInvalid, "the request body is empty; expected {\"email\",\"password\"}")
		}
		return appdor.Errorf(appdor.EInvalid, "the request body is not valid JSON; expected {\"email\",\"password\"}")
	}
	ctx := c.Request().Context()
	sess, user, err := s.Login(ctx, in.Email, in.Password)
	if err != nil {
		return err
	}
	_, realms, err := s.Me(ctx, user.ID, nil)
	if err != nil {
		return err
	}
	SetSessionCookies(c, sess)
	return c.JSON(http.StatusOK, MeResponse{User: user, Realms: realms})
}

// logout ends the cookie's session and clears both cookies. It answers 204
// whether or not a session was live, but a live session's logout must carry
// its CSRF token, so another site cannot sign a person out.
func (s *Service) logout(c echo.Context) error {
	if ck, err := c.Cookie(SessionCookie); err == nil && ck.Value != "" {
		if err := checkCSRF(c, ck.Value); err != nil {
			if _, err := s.SessionUser(c.Request().Context(), ck.Value); err == nil {
				return errCSRF
			}
		} else if err := s.Logout(c.Request().Context(), ck.Value); err != nil {
			return err
		}
	}
	ClearSessionCookies(c)
	return c.NoContent(http.StatusNoContent)
}

func (s *Service) me(c echo.Context) error {
	p := PersonOf(c)
	if p == nil {
		return errUnauthorized
	}
	var only *uuid.UUID
	if p.Token != nil {
		only = &p.Token.RealmID
	}
	user, realms, err := s.Me(c.Request().Context(), p.UserID, only)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, MeResponse{User: user, Realms: realms})
}

// SetSessionCookies gives the browser its session: the secret HttpOnly, the
// CSRF token readable by the page. Both are SameSite=Lax, Secure over TLS.
func SetSessionCookies(c echo.Context, sess Session) {
	secure := c.Scheme() == "https"
	maxAge := int(time.Until(sess.ExpiresAt).Seconds())
	c.SetCookie(&http.Cookie{
		Name: SessionCookie, Value: sess.Secret, Path: "/", Expires: sess.ExpiresAt, MaxAge: maxAge,
		HttpOnly: true, Secure: secure, SameSite: http.SameSiteLaxMode,
	})
	c.SetCookie(&http.Cookie{
		Name: CSRFCookie, Value: sess.CSRF, Path: "/", Expires: sess.ExpiresAt, MaxAge: maxAge,
		HttpOnly: false, Secure: secure, SameSite: http.SameSiteLaxMode,
	})
}

// ClearSessionCookies tells the browser to drop both session cookies.
func ClearSessionCookies(c echo.Context) {
	secure := c.Scheme() == "https"
	for _, name := range []string{SessionCookie, CSRFCookie} {
		c.SetCookie(&http.Cookie{
			Name: name, Value: "", Path: "/", Expires: time.Unix(0, 0), MaxAge: -1,
			HttpOnly: name == SessionCookie, Secure: secure, SameSite: http.SameSiteLaxMode,
		})
	}
}
