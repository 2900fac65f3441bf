package tenancy

import (
	"context"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/appdor/appdor"
)

// DefaultLoginWait is how long a sign-in waits for a free password check
// before it is refused.
const DefaultLoginWait = 500 * time.Millisecond

// PeopleConfig bounds sign-in. A password check is bcrypt: tens of
// milliseconds of CPU that anyone may ask for without a credential. Two
// things stand before it: LoginScreen, the rate limiter's ceilings on
// attempts per client address and per account, which refuses a guesser
// (429 rate_limited, Retry-After) before any work; then the checks run a few
// at a time, and a sign-in that finds no free check within LoginWait is
// refused (429 concurrency_limited, Retry-After) rather than taking the
// cores every realm's requests need.
type PeopleConfig struct {
	// LoginConcurrency is how many password checks may run at once; 0 is
	// half the cores, at least 1.
	LoginConcurrency int
	// LoginWait is how long a sign-in waits for a check; 0 is DefaultLoginWait.
	LoginWait time.Duration
	// Screen, when set, decides each attempt before its password is
	// checked; nil screens nothing.
	Screen LoginScreen
	// Log and Registerer receive the login_concurrency refusals and the
	// sign-in counters; nil discards them.
	Log        *slog.Logger
	Registerer prometheus.Registerer
	// Setup, when set, is the first run's one-time link: POST /setup
	// with its secret makes the first realm and owner.
	Setup *SetupLink
}

// LoginScreen decides, before any work, whether the client at addr may try
// to sign in to account (NormalizeEmail of the email sent); its error is the
// answer (429 rate_limited). The server wires it to the rate limiter's
// sign-in ceilings.
type LoginScreen func(ctx context.Context, addr, account string) error

// People serves sign-in, sign-out and /me.
type People struct {
	svc    *Service
	slots  chan struct{}
	wait   time.Duration
	screen LoginScreen
	log    *slog.Logger
	setup  *SetupLink

	logins  *prometheus.CounterVec // by result: ok, wrong, refused, rate_limited
	refused prometheus.Counter

	refusedLog appdor.EveryInterval // the login_concurrency line
}

// loginLogInterval is how often the login_concurrency line may be written.
const loginLogInterval = 10 * time.Second

// NewPeople returns the sign-in handlers of s, bounded by cfg.
func NewPeople(s *Service, cfg PeopleConfig) *People {
	n := cfg.LoginConcurrency
	if n <= 0 {
		n = max(1, runtime.GOMAXPROCS(0)/2)
	}
	if cfg.LoginWait <= 0 {
		cfg.LoginWait = DefaultLoginWait
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	p := &People{
		svc: s, slots: make(chan struct{}, n), wait: cfg.LoginWait, screen: cfg.Screen, log: cfg.Log, setup: cfg.Setup,
		refusedLog: appdor.EveryInterval{Interval: loginLogInterval},
		logins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appdor_logins_total",
			Help: "Sign-ins by result: ok, wrong (email or password), refused (login_concurrency), rate_limited (the sign-in ceilings per address and per account, before any password check).",
		}, []string{"result"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "appdor_login_concurrency_refused_total",
			Help: "Sign-ins refused because every password check was busy for the whole wait (login_concurrency).",
		}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(p.logins, p.refused)
	}
	return p
}

// Routes registers sign-in, sign-out and /me on g, the public API group:
// sign-in needs no credential, sign-out ends whatever session the cookie
// names, and /me identifies the person without choosing a realm.
func (p *People) Routes(g *echo.Group) {
	g.POST("/auth/login", p.login)
	g.POST("/auth/logout", p.svc.logout)
	g.GET("/me", p.svc.me, p.svc.Identify())
	g.POST("/auth/invite", p.acceptInvite)
	p.setupRoutes(g)
}

// acceptInvite sets the password of a person added by invite and signs them
// in. It hashes a password, so it takes a password-check slot as sign-in does.
func (p *People) acceptInvite(c echo.Context) error {
	var in struct {
		Token    string `json:"token"`
		Password string `json:"password"`
	}
	if err := decodeSignInBody(c, &in, `{"token","password"}`); err != nil {
		return err
	}
	release, err := p.acquire(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	sess, user, err := p.svc.AcceptInvite(ctx, in.Token, in.Password)
	release()
	if err != nil {
		return err
	}
	return p.signedIn(c, sess, user)
}

// signedIn answers a sign-in: the session's cookies, replacing the
// browser's previous session, and who they are.
func (p *People) signedIn(c echo.Context, sess Session, user User) error {
	ctx := c.Request().Context()
	if ck, err := c.Cookie(SessionCookie); err == nil && ck.Value != "" {
		if err := p.svc.Logout(ctx, ck.Value); err != nil {
			return err
		}
	}
	_, realms, err := p.svc.Me(ctx, user.ID, nil)
	if err != nil {
		return err
	}
	SetSessionCookies(c, sess)
	return c.JSON(http.StatusOK, MeResponse{User: user, Realms: realms})
}

var errLoginBusy = &appdor.Error{
	Code:       appdor.EConcurrencyLimited,
	Message:    "too many sign-ins at once; retry shortly",
	RetryAfter: time.Second,
}

// acquire takes a password-check slot, waiting at most p.wait.
func (p *People) acquire(c echo.Context) (release func(), err error) {
	select {
	case p.slots <- struct{}{}:
		return func() { <-p.slots }, nil
	default:
	}
	t := time.NewTimer(p.wait)
	defer t.Stop()
	select {
	case p.slots <- struct{}{}:
		return func() { <-p.slots }, nil
	case <-c.Request().Context().Done():
		return nil, c.Request().Context().Err()
	case <-t.C:
	}
	p.refused.Inc()
	p.logins.WithLabelValues("refused").Inc()
	p.logRefusal(c)
	return nil, errLoginBusy
}

// logRefusal writes the login_concurrency line at most every ten seconds,
// with the number of refusals it stands for, so a flood cannot flood the log
// too.
func (p *People) logRefusal(c echo.Context) {
	ok, n := p.refusedLog.Take(time.Now())
	if !ok {
		return
	}
	p.log.Warn("login_concurrency: sign-in refused, every password check busy",
		slog.String("request_id", c.Response().Header().Get(echo.HeaderXRequestID)),
		slog.Int64("refused", n), slog.Int("login_concurrency", cap(p.slots)))
}

// decodeSignInBody decodes the JSON body of a route that signs a browser in
// (sign-in, an invite, the first run), shaped as shape says. Only JSON: an
// HTML form on another site can post text/plain without asking, and must not
// sign a browser in to someone else's account.
func decodeSignInBody(c echo.Context, v any, shape string) error {
	if ct := c.Request().Header.Get(echo.HeaderContentType); !strings.HasPrefix(strings.ToLower(ct), echo.MIMEApplicationJSON) {
		return appdor.Errorf(appdor.EInvalid, "send %s with Content-Type: application/json", shape)
	}
	return appdor.DecodeJSON(c.Request().Body, v)
}

// MeResponse is the answer of sign-in and of GET /me.
type MeResponse struct {
	User   User        `json:"user"`
	Realms []RealmRole `json:"realms"`
}

func (p *People) login(c echo.Context) error {
	var in struct {
		Email    string `json:"email"`
		Password string `json:"password"`
	}
	if err := decodeSignInBody(c, &in, `{"email","password"}`); err != nil {
		return err
	}
	ctx := c.Request().Context()
	// The ceilings per address and per account come before the password
	// check and before its concurrency slot: an attempt over either costs a
	// Redis round trip, no bcrypt and no slot. That is why a flood of bogus
	// sign-ins does not lock real people out through the slots. A flood
	// from one address, or a few, whatever accounts it names, is refused at
	// its address's ceiling and never reaches them; guessing one account
	// from many addresses gets that account's ceiling, no more. The person
	// signing in meanwhile spends the allowances of their own address and
	// account, which the flood does not touch unless it guesses at that very
	// account (then the account's ceiling is the point). What could fill the
	// slots is a flood from many addresses, each within its own allowance:
	// to keep one slot busy with 50 ms checks takes 1,200 attempts a
	// minute, some 40 addresses at the default 30 each, per slot; and even
	// then a person waits at most LoginWait for a slot before being told to
	// retry.
	if p.screen != nil {
		if err := p.screen(ctx, c.RealIP(), NormalizeEmail(in.Email)); err != nil {
			if appdor.ErrorCode(err) == appdor.ERateLimited {
				p.logins.WithLabelValues("rate_limited").Inc()
			}
			return err
		}
	}
	release, err := p.acquire(c)
	if err != nil {
		return err
	}
	sess, user, err := p.svc.Login(ctx, in.Email, in.Password, c.RealIP())
	release()
	if err != nil {
		if appdor.ErrorCode(err) == appdor.EUnauthorized {
			p.logins.WithLabelValues("wrong").Inc()
		}
		return err
	}
	p.logins.WithLabelValues("ok").Inc()
	// Signing in again replaces the browser's previous session rather than
	// leaving it alive behind a cookie that is about to be overwritten.
	return p.signedIn(c, sess, user)
}

// logout ends the cookie's session and clears both cookies. It answers 204
// whether or not a session was live, but a live session's logout must carry
// its CSRF token, so another site cannot sign a person out.
func (s *Service) logout(c echo.Context) error {
	if ck, err := c.Cookie(SessionCookie); err == nil && validSessionSecret(ck.Value) {
		ctx := withClientOf(c)
		if err := checkCSRF(c, ck.Value); err != nil {
			if _, err := s.SessionUser(ctx, ck.Value); err == nil {
				return errCSRF
			} else if appdor.ErrorCode(err) != appdor.EUnauthorized {
				return err // refused or failed: whether it is live is not known
			}
		} else if err := s.Logout(ctx, ck.Value); err != nil {
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
