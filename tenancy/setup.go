package tenancy

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/rls"
)

// AnyoneCanSignIn says whether any person exists yet: with nobody, the
// server offers its one-time setup link.
func (s *Service) AnyoneCanSignIn(ctx context.Context) (bool, error) {
	var anyone bool
	err := s.lookupRow(ctx, rls.Keys{}, `SELECT appdor_anyone_can_sign_in()`).Scan(&anyone)
	return anyone, rls.Interpret(err)
}

// Setup is the first run: with nobody there yet, it makes the first realm
// and its owner, an operator of the instance, and signs them in. Once anyone
// exists it makes nothing and answers conflict.
func (s *Service) Setup(ctx context.Context, realmName, email, password string) (uuid.UUID, Session, User, error) {
	realmName, err := appdor.CheckName("realm", realmName)
	if err != nil {
		return uuid.Nil, Session{}, User{}, err
	}
	if email, err = checkEmail(email); err != nil {
		return uuid.Nil, Session{}, User{}, err
	}
	if err := checkPassword(password); err != nil {
		return uuid.Nil, Session{}, User{}, err
	}
	hash, err := hashPassword(password)
	if err != nil {
		return uuid.Nil, Session{}, User{}, err
	}
	u := User{Email: email, Operator: true}
	var realm uuid.UUID
	found := false
	err = s.db.Lookup(ctx, rls.Keys{}, scanOne(&found, &realm, &u.ID),
		`SELECT realm_id, user_id FROM appdor_setup($1, $2, $3)`, realmName, email, hash)
	if err != nil {
		return uuid.Nil, Session{}, User{}, rls.Interpret(err)
	}
	if !found {
		return uuid.Nil, Session{}, User{}, appdor.Errorf(appdor.EConflict, "Appdor is set up already; sign in")
	}
	sess, err := s.startSession(ctx, u.ID)
	return realm, sess, u, err
}

// OperatorRealms lists every realm's id and name for an operator; for anyone
// else, none.
func (s *Service) OperatorRealms(ctx context.Context, user uuid.UUID) ([]Realm, error) {
	var out []Realm
	err := s.db.Lookup(ctx, rls.Keys{}, func(rows pgx.Rows) error {
		for rows.Next() {
			var r Realm
			if err := rows.Scan(&r.ID, &r.Name, &r.CreatedAt); err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	}, `SELECT id, name, created_at FROM appdor_operator_realms($1)`, user)
	return out, rls.Interpret(err)
}

// SetupLink is the first run's one-time secret: made at start when nobody
// can sign in, valid until the first realm is made with it or the process
// ends. Without it, setup is not found.
type SetupLink struct {
	mu     sync.Mutex
	secret string
}

// NewSetupLink makes a link with a fresh random secret.
func NewSetupLink() *SetupLink {
	secret, _ := newSecret()
	return &SetupLink{secret: "setup_" + strings.TrimPrefix(secret, tokenPrefix)}
}

// Secret is the link's secret, "" once spent (or on a nil link).
func (l *SetupLink) Secret() string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.secret
}

// Valid says whether s is the unspent secret, in constant time.
func (l *SetupLink) Valid(s string) bool {
	want := l.Secret()
	return want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(s)) == 1
}

func (l *SetupLink) spend() {
	l.mu.Lock()
	l.secret = ""
	l.mu.Unlock()
}

var errNoSetup = appdor.Errorf(appdor.ENotFound, "not found")

// setupRoutes serves the first run on g, the public API group: GET
// /setup?token= says whether the link is good (204, else 404); POST /setup
// makes the first realm and its owner and signs them in.
func (p *People) setupRoutes(g *echo.Group) {
	g.GET("/setup", func(c echo.Context) error {
		if !p.setup.Valid(c.QueryParam("token")) {
			return errNoSetup
		}
		return c.NoContent(http.StatusNoContent)
	})
	g.POST("/setup", p.runSetup)
}

func (p *People) runSetup(c echo.Context) error {
	var in struct {
		Token    string `json:"token"`
		Realm    string `json:"realm"`
		Email    string `json:"email"`
		Password string `json:"password"`
	}
	if err := decodeSignInBody(c, &in, `{"token","realm","email","password"}`); err != nil {
		return err
	}
	if !p.setup.Valid(in.Token) {
		return errNoSetup
	}
	release, err := p.acquire(c)
	if err != nil {
		return err
	}
	_, sess, user, err := p.svc.Setup(c.Request().Context(), in.Realm, in.Email, in.Password)
	release()
	if appdor.ErrorCode(err) == appdor.EConflict {
		p.setup.spend() // someone exists: the link has no more use
	}
	if err != nil {
		return err
	}
	p.setup.spend()
	p.log.Info("setup: the first realm and its owner were made; the setup link is spent", slog.String("email_domain", domainOf(user.Email)))
	return p.signedIn(c, sess, user)
}

// domainOf is the part of an email after @, for logs that must not name people.
func domainOf(email string) string {
	if i := strings.LastIndexByte(email, '@'); i >= 0 {
		return email[i+1:]
	}
	return ""
}
