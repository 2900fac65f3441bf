// Package tenancy owns who is asking and on behalf of which realm: realms,
// users, memberships and roles, API tokens (stored as SHA-256 hashes) and their
// limits, and the Principal that authentication puts on every request.
//
// Authentication reads as the serving role, outside appdor_tenant, and only
// what it names: a user by email, a session by the hash of its secret, a token
// by the hash of its secret and the memberships and realms behind them
// (rls.Lookup; the database's policies show the serving role nothing else).
// What acts within a realm — listing, creating, limiting and revoking its
// tokens — runs in that realm's tenant transaction (rls.Tx), where row-level
// security, not a WHERE clause, keeps realms apart. The admin commands
// (CreateRealm, CreateUser, CreateToken, RevokeToken) run as the schema's
// owner. tenancy never reads grid data, and it never stores a secret in a form
// that can be read back.
package tenancy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/crypto/bcrypt"
	"golang.org/x/sync/singleflight"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/rls"
)

// Role is what a member may do in a realm.
type Role string

const (
	RoleViewer Role = "viewer" // reads
	RoleEditor Role = "editor" // reads and writes apps, tables, fields, rows
	RoleOwner  Role = "owner"  // everything, members and tokens too
)

func (r Role) rank() int {
	switch r {
	case RoleOwner:
		return 3
	case RoleEditor:
		return 2
	case RoleViewer:
		return 1
	}
	return 0
}

// AtLeast reports whether r includes everything min may do.
func (r Role) AtLeast(min Role) bool { return r.rank() >= min.rank() && r.rank() > 0 }

// ParseRole validates a role name.
func ParseRole(s string) (Role, error) {
	r := Role(s)
	if r.rank() == 0 {
		return "", appdor.Errorf(appdor.EValidation, "role must be owner, editor or viewer, not %q", s)
	}
	return r, nil
}

// Realm is a tenant.
type Realm struct {
	ID        uuid.UUID `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// User is a person who signs in; a user may be a member of several realms.
type User struct {
	ID    uuid.UUID `json:"id"`
	Email string    `json:"email"`
	// Operator: an administrator of the instance, who sees every realm's
	// usage (never its rows).
	Operator bool `json:"operator"`
}

// Member is a user's membership of a realm.
type Member struct {
	User
	RealmID uuid.UUID `json:"realm_id"`
	Role    Role      `json:"role"`
}

// Token is an API token's public description; its secret is never stored.
type Token struct {
	ID                uuid.UUID  `json:"id"`
	RealmID           uuid.UUID  `json:"realm_id"`
	UserID            uuid.UUID  `json:"user_id"`
	Name              string     `json:"name"`
	RequestsPerMinute *int       `json:"requests_per_minute"`
	CreatedAt         time.Time  `json:"created_at"`
	RevokedAt         *time.Time `json:"revoked_at,omitempty"`
}

// Service is tenancy's store: it talks to PostgreSQL as the serving role, or,
// for the admin commands, as the owner.
type Service struct {
	pool *pgxpool.Pool
	// db runs authentication's lookups and the realm's token routes.
	db *rls.DB
	// cache holds token lookups while StartTokenCache runs; nil otherwise.
	cache atomic.Pointer[tokenCache]
	// lookups joins concurrent lookups of the same token.
	lookups singleflight.Group
	// guard screens and gates lookups of credentials nobody knows (SetGuard).
	guard Guard
	// known and unknown are credentials that authenticated lately, and
	// credentials found unknown lately: see Guard.
	known, unknown *hashSet
	// relookups holds the seats of lookups of credentials known lately
	// (see Guard.guarded).
	relookups chan struct{}
	// refusals counts and logs what the guard's own bounds refuse.
	refusals *guardRefusals
	// TokenActivity, when set, gives the token list each token's last use
	// and last hour (the server reads them from the usage gauges).
	TokenActivity func(ctx context.Context, realm uuid.UUID) (map[uuid.UUID]TokenActivity, error)
}

// TokenActivity is what the token list shows of a token's use.
type TokenActivity struct {
	LastUsedAt       *time.Time `json:"last_used_at"`
	RequestsLastHour int64      `json:"requests_last_hour"`
	RefusedLastHour  int64      `json:"refused_last_hour"`
}

// New returns a Service on pool; its lookups and tenant transactions have
// rls's default time bounds until UseDB gives it the server's.
func New(pool *pgxpool.Pool) *Service {
	return &Service{
		pool:      pool,
		db:        rls.New(pool, 0, 0),
		guard:     Guard{Timeout: DefaultLookupTimeout},
		known:     newHashSet(KnownCredentialTTL, maxKnownCredentials),
		unknown:   newHashSet(UnknownCredentialTTL, maxUnknownCredentials),
		relookups: make(chan struct{}, defaultRelookups()),
		refusals:  newGuardRefusals(Guard{}),
	}
}

// UseDB runs the lookups and the token routes on db, a DB over the same pool
// with the server's time bounds. Call it before the service serves requests.
func (s *Service) UseDB(db *rls.DB) { s.db = db }

// lookupRow is a one-row rls.Lookup, scanned like pgx.Row: pgx.ErrNoRows when
// there is no row.
func (s *Service) lookupRow(ctx context.Context, keys rls.Keys, sql string, args ...any) pgx.Row {
	return lookupRow{s: s, ctx: ctx, keys: keys, sql: sql, args: args}
}

type lookupRow struct {
	s    *Service
	ctx  context.Context
	keys rls.Keys
	sql  string
	args []any
}

func (r lookupRow) Scan(dest ...any) error {
	found := false
	err := r.s.db.Lookup(r.ctx, r.keys, scanOne(&found, dest...), r.sql, r.args...)
	if err == nil && !found {
		return pgx.ErrNoRows
	}
	return err
}

// scanOne is a scan for rls.Query and rls.Lookup: the first row into dest
// (nil skips a column), and whether there was one into found.
func scanOne(found *bool, dest ...any) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		if !rows.Next() {
			return rows.Err()
		}
		*found = true
		return rows.Scan(dest...)
	}
}

// lookupExec runs one statement that returns no rows as an rls.Lookup.
func (s *Service) lookupExec(ctx context.Context, keys rls.Keys, sql string, args ...any) error {
	return s.db.Lookup(ctx, keys, func(rows pgx.Rows) error { return rows.Err() }, sql, args...)
}

// CreateRealm makes a realm.
func (s *Service) CreateRealm(ctx context.Context, name string) (Realm, error) {
	name, err := appdor.CheckName("name", name)
	if err != nil {
		return Realm{}, err
	}
	r := Realm{Name: name}
	err = s.pool.QueryRow(ctx,
		`INSERT INTO realms (name) VALUES ($1) RETURNING id, created_at`, name).Scan(&r.ID, &r.CreatedAt)
	return r, rls.Interpret(err)
}

// CreateUser makes a member of realm with role. The person is created the
// first time the email is seen; a later call for another realm adds a
// membership and must give the same password.
func (s *Service) CreateUser(ctx context.Context, realm uuid.UUID, email, password string, role Role) (Member, error) {
	email, err := checkEmail(email)
	if err != nil {
		return Member{}, err
	}
	if err := checkPassword(password); err != nil {
		return Member{}, err
	}
	if _, err := ParseRole(string(role)); err != nil {
		return Member{}, err
	}
	m := Member{RealmID: realm, Role: role}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var hash string
		err := tx.QueryRow(ctx, `SELECT id, email, password_hash FROM users WHERE lower(email) = lower($1)`, email).
			Scan(&m.ID, &m.Email, &hash)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
			if err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, `INSERT INTO users (email, password_hash) VALUES ($1, $2) RETURNING id, email`,
				email, string(h)).Scan(&m.ID, &m.Email); err != nil {
				return err
			}
		case err != nil:
			return err
		default:
			if bcrypt.CompareHashAndPassword([]byte(hash), []byte(password)) != nil {
				return appdor.Errorf(appdor.EConflict, "%s already exists with another password", email)
			}
		}
		_, err = tx.Exec(ctx, `INSERT INTO memberships (realm_id, user_id, role) VALUES ($1, $2, $3)`, realm, m.ID, role)
		return err
	})
	return m, rls.Interpret(err)
}

// checkEmail trims an email address and refuses one that is not.
func checkEmail(email string) (string, error) {
	email = strings.TrimSpace(email)
	if err := appdor.Email.Check("email", email); err != nil {
		return "", err
	}
	if !strings.Contains(email, "@") || len(email) < 3 {
		return "", appdor.Errorf(appdor.EValidation, "%q is not an email address", email)
	}
	return email, nil
}

// checkPassword refuses a password bcrypt cannot keep whole, or a short one.
func checkPassword(password string) error {
	if len(password) < 8 || len(password) > 72 {
		return appdor.Errorf(appdor.EValidation, "a password has 8 to 72 characters")
	}
	return nil
}

// hashPassword is bcrypt at its default cost.
func hashPassword(password string) (string, error) {
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	return string(h), err
}

// tokenPrefix marks Appdor tokens, so a leaked one is recognisable in a scan.
const tokenPrefix = "apd_"

func newSecret() (secret string, hash []byte) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	secret = tokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	return secret, hashSecret(secret)
}

func hashSecret(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// CreateToken makes an API token for the member with email in realm. The
// secret is returned this once; only its hash is stored. It is an admin
// command: it finds the member by email, across the realm's people.
func (s *Service) CreateToken(ctx context.Context, realm uuid.UUID, email, name string, rpm *int) (Token, string, error) {
	var userID uuid.UUID
	err := s.pool.QueryRow(ctx,
		`SELECT m.user_id FROM memberships m JOIN users u ON u.id = m.user_id
		 WHERE m.realm_id = $1 AND lower(u.email) = lower($2)`, realm, email).Scan(&userID)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return Token{}, "", appdor.Errorf(appdor.ENotFound, "%s is not a member of realm %s", email, realm)
		}
		return Token{}, "", rls.Interpret(err)
	}
	return s.createToken(ctx, s.pool, realm, userID, name, rpm)
}

// DBTX is what token creation needs: the owner's pool (an admin command) or a
// tenant transaction (the token API).
type DBTX interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func (s *Service) createToken(ctx context.Context, db DBTX, realm, user uuid.UUID, name string, rpm *int) (Token, string, error) {
	name, err := appdor.CheckName("name", name)
	if err != nil {
		return Token{}, "", err
	}
	if rpm != nil && *rpm <= 0 {
		return Token{}, "", appdor.Errorf(appdor.EValidation, "requests_per_minute must be a positive number")
	}
	secret, hash := newSecret()
	t := Token{RealmID: realm, UserID: user, Name: name, RequestsPerMinute: rpm}
	err = db.QueryRow(ctx,
		`WITH t AS (
		   INSERT INTO api_tokens (realm_id, user_id, name, hash) VALUES ($1, $2, $3, $4)
		   RETURNING id, created_at
		 ), l AS (
		   INSERT INTO token_limits (realm_id, token_id, requests_per_minute)
		   SELECT $1, t.id, $5 FROM t WHERE $5::int IS NOT NULL
		 )
		 SELECT id, created_at FROM t`, realm, user, name, hash, rpm).Scan(&t.ID, &t.CreatedAt)
	if err != nil {
		return Token{}, "", rls.Interpret(err)
	}
	// Its first requests may come from many clients at once; they need no
	// screening (another replica screens the first lookup, once).
	s.known.add([32]byte(hash))
	return t, secret, nil
}

// RevokeToken ends a token, found by id in any realm (an admin command); it
// authenticates nothing from then on.
func (s *Service) RevokeToken(ctx context.Context, id uuid.UUID) (Token, error) {
	t := Token{ID: id}
	err := s.pool.QueryRow(ctx,
		`UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1
		 RETURNING realm_id, user_id, name, created_at, revoked_at`, id).
		Scan(&t.RealmID, &t.UserID, &t.Name, &t.CreatedAt, &t.RevokedAt)
	if err != nil {
		return Token{}, rls.Interpret(err)
	}
	return t, s.notifyTokenChanged(ctx, id)
}

// notifyTokenChanged is the seam through which cached token answers are
// dropped; see the token cache.
func (s *Service) notifyTokenChanged(ctx context.Context, id uuid.UUID) error {
	_, err := s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, TokenChannel, id.String())
	return err
}

// TokenChannel is the PostgreSQL NOTIFY channel on which a token's id is sent
// when the token is revoked or its limit changes.
const TokenChannel = "appdor_token_changed"
