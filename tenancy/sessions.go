package tenancy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"golang.org/x/crypto/bcrypt"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/rls"
)

// The browser session contract: cookie and header names the UI relies on.
const (
	// SessionCookie holds the session secret. HttpOnly; only its SHA-256
	// hash is stored, in sessions.hash.
	SessionCookie = "appdor_session"
	// CSRFCookie holds the CSRF token, readable by the page's script, which
	// echoes it in CSRFHeader on every unsafe request.
	CSRFCookie = "appdor_csrf"
	CSRFHeader = "X-CSRF-Token"
	// RealmHeader chooses the realm a session-authenticated request acts in.
	RealmHeader = "X-Appdor-Realm"
	// RealmParam is the query parameter a GET may choose the realm with
	// instead (an EventSource cannot set RealmHeader).
	RealmParam = "realm"
	// SessionTTL is how long a session lasts from sign-in.
	SessionTTL = 14 * 24 * time.Hour
)

// Error codes of sessions, mapped to statuses by the server.
const (
	// ERealmRequired: a member of several realms sent no RealmHeader (400).
	ERealmRequired = "realm_required"
	// ECSRFFailed: a cookie-authenticated unsafe request without the right
	// CSRFHeader (403).
	ECSRFFailed = "csrf_failed"
)

// sessionPrefix marks session secrets, as tokenPrefix marks tokens.
const sessionPrefix = "aps_"

var (
	errBadLogin    = appdor.Errorf(appdor.EUnauthorized, "wrong email or password")
	errBadSession  = appdor.Errorf(appdor.EUnauthorized, "the session has ended; sign in again")
	errCSRF        = appdor.Errorf(ECSRFFailed, "this request needs the "+CSRFHeader+" header equal to the "+CSRFCookie+" cookie")
	errRealmChoice = appdor.Errorf(ERealmRequired, "you are a member of several realms; say which one in the "+RealmHeader+" header")
	errNoRealm     = appdor.Errorf(appdor.ENotFound, "realm not found")
)

// RealmRole is a realm a person belongs to and their role there.
type RealmRole struct {
	ID   uuid.UUID `json:"id"`
	Name string    `json:"name"`
	Role Role      `json:"role"`
}

// Session is a signed-in browser. Secret and CSRF go to the browser as
// cookies; neither can be read back from the database.
type Session struct {
	Secret    string
	CSRF      string
	UserID    uuid.UUID
	ExpiresAt time.Time
}

// CSRFToken is the CSRF token that belongs to a session secret: a one-way
// derivation, so the server checks it without storing it, and a page from
// another site cannot produce it without the HttpOnly session secret.
func CSRFToken(sessionSecret string) string {
	h := sha256.Sum256([]byte("appdor csrf\x00" + sessionSecret))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

// CheckCSRF reports whether token is the CSRF token of sessionSecret, in
// constant time.
func CheckCSRF(sessionSecret, token string) bool {
	want := CSRFToken(sessionSecret)
	return subtle.ConstantTimeCompare([]byte(want), []byte(token)) == 1
}

var (
	dummyOnce sync.Once
	dummyHash []byte
)

// dummyPasswordHash is compared against when the email is unknown, so a wrong
// email costs the same bcrypt time as a wrong password and answers look alike.
func dummyPasswordHash() []byte {
	dummyOnce.Do(func() {
		b := make([]byte, 18)
		_, _ = rand.Read(b)
		h, err := bcrypt.GenerateFromPassword([]byte(base64.RawStdEncoding.EncodeToString(b)), bcrypt.DefaultCost)
		if err != nil {
			panic(err)
		}
		dummyHash = h
	})
	return dummyHash
}

// NormalizeEmail is an email as sign-in compares it: without surrounding
// space, in lower case. It names the account the sign-in ceilings count.
func NormalizeEmail(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

// Login checks email and password and opens a session. A wrong email and a
// wrong password give the same error after the same work.
// A known person's sign-in, and a failed one, go in the audit log of each of
// their realms, with addr, the client's address.
func (s *Service) Login(ctx context.Context, email, password, addr string) (Session, User, error) {
	email = strings.TrimSpace(email)
	if err := appdor.Email.Check("email", email); err != nil {
		return Session{}, User{}, err // before any query: PostgreSQL refuses NUL (22P05)
	}
	var (
		u    User
		hash string
	)
	err := s.lookupRow(ctx, rls.Keys{Email: email}, `SELECT id, email, password_hash, operator FROM users WHERE lower(email) = lower($1)`, email).
		Scan(&u.ID, &u.Email, &hash, &u.Operator)
	known := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return Session{}, User{}, rls.Interpret(err)
	}
	if !known || email == "" {
		hash = string(dummyPasswordHash())
	}
	// bcrypt looks at 72 bytes only; a longer password was never set.
	ok := bcrypt.CompareHashAndPassword([]byte(hash), []byte(password)) == nil && len(password) <= 72
	if known {
		if err := s.lookupExec(ctx, rls.Keys{}, `SELECT appdor_audit_sign_in($1, $2, $3)`, u.ID, ok, addr); err != nil {
			return Session{}, User{}, rls.Interpret(err)
		}
	}
	if !known || !ok {
		return Session{}, User{}, errBadLogin
	}
	sess, err := s.startSession(ctx, u.ID)
	return sess, u, err
}

// startSession opens a session for a person who has proved who they are.
func (s *Service) startSession(ctx context.Context, user uuid.UUID) (Session, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return Session{}, err
	}
	sess := Session{Secret: sessionPrefix + base64.RawURLEncoding.EncodeToString(b), UserID: user}
	sess.CSRF = CSRFToken(sess.Secret)
	// Expired sessions of this person are swept on the way in.
	err := s.lookupRow(ctx, rls.Keys{User: user},
		`WITH sweep AS (DELETE FROM sessions WHERE user_id = $2 AND expires_at <= now())
		 INSERT INTO sessions (hash, user_id, expires_at) VALUES ($1, $2, now() + make_interval(secs => $3))
		 RETURNING expires_at`, hashSecret(sess.Secret), user, SessionTTL.Seconds()).Scan(&sess.ExpiresAt)
	if err != nil {
		return Session{}, rls.Interpret(err)
	}
	// The browser's first requests come at once; they need no screening.
	s.known.add(sha256.Sum256([]byte(sess.Secret)))
	return sess, nil
}

// Logout ends the session with this secret. Ending one that is already gone
// is not an error, and one known to be gone costs no database work.
func (s *Service) Logout(ctx context.Context, secret string) error {
	if !validSessionSecret(secret) {
		return nil
	}
	hash := sha256.Sum256([]byte(secret))
	err := s.guarded(ctx, hash, errBadSession, func(ctx context.Context) error {
		if err := s.lookupExec(ctx, rls.Keys{SessionHash: hash[:]}, `DELETE FROM sessions WHERE hash = $1`, hash[:]); err != nil {
			return rls.Interpret(err)
		}
		return errBadSession // whether it was live or not, it is gone now: remembered as unknown
	})
	if errors.Is(err, errBadSession) {
		return nil
	}
	return err
}

func validSessionSecret(secret string) bool {
	return strings.HasPrefix(secret, sessionPrefix) && len(secret) <= 100
}

// SessionUser returns the person of a live session, or unauthorized.
func (s *Service) SessionUser(ctx context.Context, secret string) (uuid.UUID, error) {
	if !validSessionSecret(secret) {
		return uuid.Nil, errBadSession
	}
	var id uuid.UUID
	hash := sha256.Sum256([]byte(secret))
	err := s.guarded(ctx, hash, errBadSession, func(ctx context.Context) error {
		err := s.lookupRow(ctx, rls.Keys{SessionHash: hash[:]}, `SELECT user_id FROM sessions WHERE hash = $1 AND expires_at > now()`,
			hash[:]).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return errBadSession
		}
		return rls.Interpret(err)
	})
	return id, err
}

// LookupSession turns a session secret and the request's realm choice into a
// Principal, in one query. realm is the RealmHeader as sent: empty chooses
// the person's only realm; a realm they are not a member of is not found,
// exactly like one that does not exist.
func (s *Service) LookupSession(ctx context.Context, secret, realm string) (*Principal, error) {
	if !validSessionSecret(secret) {
		return nil, errBadSession
	}
	var want *uuid.UUID
	if realm = strings.TrimSpace(realm); realm != "" {
		id, err := uuid.Parse(realm)
		if err != nil {
			return nil, errNoRealm
		}
		want = &id
	}
	var p *Principal
	hash := sha256.Sum256([]byte(secret))
	err := s.guarded(ctx, hash, errBadSession, func(ctx context.Context) (err error) {
		p, err = s.lookupSession(ctx, hash[:], want)
		return err
	})
	return p, err
}

func (s *Service) lookupSession(ctx context.Context, hash []byte, want *uuid.UUID) (*Principal, error) {
	var (
		p        Principal
		n        int
		realmID  *uuid.UUID
		role     *string
		realmRPM *int
	)
	err := s.db.Lookup(ctx, rls.Keys{SessionHash: hash}, func(rows pgx.Rows) error {
		for rows.Next() {
			n++
			if err := rows.Scan(&p.UserID, &realmID, &role, &realmRPM); err != nil {
				return err
			}
		}
		return rows.Err()
	},
		`SELECT s.user_id, m.realm_id, m.role, r.requests_per_minute
		 FROM sessions s
		 LEFT JOIN memberships m ON m.user_id = s.user_id AND ($2::uuid IS NULL OR m.realm_id = $2)
		 LEFT JOIN realms r ON r.id = m.realm_id
		 WHERE s.hash = $1 AND s.expires_at > now()
		 LIMIT 2`, hash, want)
	if err != nil {
		return nil, err
	}
	switch {
	case n == 0:
		return nil, errBadSession
	case n > 1:
		return nil, errRealmChoice
	case realmID == nil && want == nil:
		return nil, appdor.Errorf(appdor.EForbidden, "you are not a member of any realm")
	case realmID == nil:
		return nil, errNoRealm
	}
	p.RealmID, p.Role = *realmID, Role(*role)
	if realmRPM != nil {
		p.RealmRPM = *realmRPM
	}
	return &p, nil
}

// Me returns a person and the realms they belong to, by name; with only set,
// just that realm (a token acts in one realm).
func (s *Service) Me(ctx context.Context, user uuid.UUID, only *uuid.UUID) (User, []RealmRole, error) {
	var (
		u      User
		found  bool
		realms = []RealmRole{}
	)
	err := s.db.Lookup(ctx, rls.Keys{User: user}, func(rows pgx.Rows) error {
		for rows.Next() {
			var (
				id   *uuid.UUID
				name *string
				role *string
			)
			if err := rows.Scan(&u.ID, &u.Email, &u.Operator, &id, &name, &role); err != nil {
				return err
			}
			found = true
			if id != nil {
				realms = append(realms, RealmRole{ID: *id, Name: *name, Role: Role(*role)})
			}
		}
		return rows.Err()
	},
		`SELECT u.id, u.email, u.operator, r.id, r.name, m.role
		 FROM users u
		 LEFT JOIN memberships m ON m.user_id = u.id AND ($2::uuid IS NULL OR m.realm_id = $2)
		 LEFT JOIN realms r ON r.id = m.realm_id
		 WHERE u.id = $1
		 ORDER BY r.name, r.id`, user, only)
	if err != nil {
		return User{}, nil, err
	}
	if !found {
		return User{}, nil, errBadSession
	}
	return u, realms, nil
}
