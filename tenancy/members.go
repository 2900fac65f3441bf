package tenancy

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/rls"
)

// InviteTTL is how long an invite link stays usable.
const InviteTTL = 7 * 24 * time.Hour

// invitePrefix marks invite secrets, as tokenPrefix marks tokens.
const invitePrefix = "inv_"

// MemberInfo is a member as the members page lists them.
type MemberInfo struct {
	UserID       uuid.UUID  `json:"user_id"`
	Email        string     `json:"email"`
	Role         Role       `json:"role"`
	CreatedAt    time.Time  `json:"created_at"`
	LastSignInAt *time.Time `json:"last_sign_in_at"`
	// Invited: added without a password, with an invite link not used yet.
	Invited bool `json:"invited"`
}

// MemberRoutes registers the realm's members API on g, the gated API group.
// Only owners see and change members. Each statement runs in the principal's
// realm's transaction; the person's email and last sign-in come through
// appdor_members, which reads only that realm's memberships.
func (s *Service) MemberRoutes(g *echo.Group) {
	owner := Require(RoleOwner)
	g.GET("/members", s.listMembers, owner)
	g.POST("/members", s.addMember, owner)
	g.PATCH("/members/:user", s.changeMember, owner)
	g.DELETE("/members/:user", s.removeMember, owner)
}

// actorOf names who acts, for the audit log: the token, or the person.
func actorOf(p *Principal) string {
	if p.TokenID != uuid.Nil {
		return "token:" + p.TokenID.String()
	}
	return "user:" + p.UserID.String()
}

// audit adds a row to the realm's audit log in tx.
func audit(ctx context.Context, tx pgx.Tx, realm uuid.UUID, actor, action string, detail any) error {
	b, err := json.Marshal(detail)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO audit_log (realm_id, actor, action, detail) VALUES ($1, $2, $3, $4)`,
		realm, actor, action, b)
	return err
}

// members lists the realm's members in tx; with only set, just that one
// (none when they are no member).
func (s *Service) members(ctx context.Context, tx pgx.Tx, only *uuid.UUID) ([]MemberInfo, error) {
	rows, err := tx.Query(ctx, `SELECT user_id, email, role, created_at, last_sign_in_at, invited FROM appdor_members()
		WHERE $1::uuid IS NULL OR user_id = $1`, only)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (MemberInfo, error) {
		var m MemberInfo
		err := r.Scan(&m.UserID, &m.Email, &m.Role, &m.CreatedAt, &m.LastSignInAt, &m.Invited)
		return m, err
	})
}

func (s *Service) listMembers(c echo.Context) error {
	p := PrincipalOf(c)
	ctx := c.Request().Context()
	var out []MemberInfo
	err := s.db.Tx(ctx, p.RealmID, func(tx pgx.Tx) (err error) {
		out, err = s.members(ctx, tx, nil)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"members": out})
}

// AddedMember is the answer to adding a person: with an invite link when
// they were added without a password (shown this once).
type AddedMember struct {
	MemberInfo
	// Existing: the person had an account already (in another realm); they
	// keep their password, and no invite is made.
	Existing bool `json:"existing"`
	// InvitePath is the one-time link's path, to send them.
	InvitePath string `json:"invite_path,omitempty"`
}

func (s *Service) addMember(c echo.Context) error {
	p := PrincipalOf(c)
	var in struct {
		Email    string  `json:"email"`
		Role     string  `json:"role"`
		Password *string `json:"password"`
	}
	if err := appdor.DecodeJSON(c.Request().Body, &in); err != nil {
		return err
	}
	email, err := checkEmail(in.Email)
	if err != nil {
		return err
	}
	role, err := ParseRole(in.Role)
	if err != nil {
		return err
	}
	var hash *string
	if in.Password != nil {
		if err := checkPassword(*in.Password); err != nil {
			return err
		}
		h, err := hashPassword(*in.Password)
		if err != nil {
			return err
		}
		hash = &h
	}
	ctx := c.Request().Context()
	out := AddedMember{MemberInfo: MemberInfo{Role: role, CreatedAt: time.Now().UTC()}}
	err = s.db.Tx(ctx, p.RealmID, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT user_id, email, existing FROM appdor_add_member($1, $2, $3)`, email, hash, role).
			Scan(&out.UserID, &out.Email, &out.Existing)
		if err != nil {
			return err
		}
		if hash == nil && !out.Existing {
			secret, err := newInviteSecret()
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx,
				`INSERT INTO invites (hash, realm_id, user_id, expires_at) VALUES ($1, $2, $3, now() + make_interval(secs => $4))`,
				hashSecret(secret), p.RealmID, out.UserID, InviteTTL.Seconds()); err != nil {
				return err
			}
			out.Invited, out.InvitePath = true, "/invite?token="+secret
		}
		return audit(ctx, tx, p.RealmID, actorOf(p), "member_added", map[string]any{
			"user_id": out.UserID, "email": out.Email, "role": role, "invited": out.Invited, "existing": out.Existing})
	})
	if appdor.ErrorCode(err) == appdor.EConflict {
		return appdor.Errorf(appdor.EConflict, "%s is a member of this realm already", email)
	}
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
	return c.JSON(http.StatusCreated, out)
}

func newInviteSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return invitePrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

func memberParam(c echo.Context) (uuid.UUID, error) {
	id, err := uuid.Parse(c.Param("user"))
	if err != nil {
		return uuid.Nil, appdor.Errorf(appdor.ENotFound, "member %q not found", c.Param("user"))
	}
	return id, nil
}

// lockOwners locks the realm's owner memberships and counts them, so that
// two owners demoting or removing each other at once cannot leave none: the
// second waits for the first, then sees one owner fewer.
func lockOwners(ctx context.Context, tx pgx.Tx, realm uuid.UUID) (map[uuid.UUID]bool, error) {
	rows, err := tx.Query(ctx, `SELECT user_id FROM memberships WHERE realm_id = $1 AND role = 'owner' FOR UPDATE`, realm)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	owners := map[uuid.UUID]bool{}
	for _, id := range ids {
		owners[id] = true
	}
	return owners, err
}

var errLastOwner = appdor.Errorf(appdor.EConflict, "a realm keeps at least one owner; make another member an owner first")

// forgetMemberTokens drops the cached answers of a member's tokens on every
// replica (at commit), since their role or their membership changes.
func (s *Service) forgetMemberTokens(ctx context.Context, tx pgx.Tx, realm, user uuid.UUID) ([]uuid.UUID, error) {
	rows, err := tx.Query(ctx,
		`SELECT id FROM api_tokens, pg_notify($3, id::text) WHERE realm_id = $1 AND user_id = $2`, realm, user, TokenChannel)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
}

func (s *Service) changeMember(c echo.Context) error {
	p := PrincipalOf(c)
	user, err := memberParam(c)
	if err != nil {
		return err
	}
	var in struct {
		Role string `json:"role"`
	}
	if err := appdor.DecodeJSON(c.Request().Body, &in); err != nil {
		return err
	}
	role, err := ParseRole(in.Role)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	var out MemberInfo
	var tokens []uuid.UUID
	err = s.db.Tx(ctx, p.RealmID, func(tx pgx.Tx) error {
		owners, err := lockOwners(ctx, tx, p.RealmID)
		if err != nil {
			return err
		}
		if owners[user] && role != RoleOwner && len(owners) == 1 {
			return errLastOwner
		}
		var was Role
		err = tx.QueryRow(ctx,
			`UPDATE memberships m SET role = $3 FROM (SELECT role FROM memberships WHERE realm_id = $1 AND user_id = $2 FOR UPDATE) old
			 WHERE m.realm_id = $1 AND m.user_id = $2 RETURNING old.role`, p.RealmID, user, role).Scan(&was)
		if errors.Is(err, pgx.ErrNoRows) {
			return appdor.Errorf(appdor.ENotFound, "member %s not found", user)
		}
		if err != nil {
			return err
		}
		if tokens, err = s.forgetMemberTokens(ctx, tx, p.RealmID, user); err != nil {
			return err
		}
		one, err := s.members(ctx, tx, &user)
		if err != nil || len(one) == 0 {
			return err
		}
		out = one[0]
		if was == role {
			return nil
		}
		return audit(ctx, tx, p.RealmID, actorOf(p), "member_role_changed", map[string]any{
			"user_id": user, "email": out.Email, "from": was, "to": role})
	})
	if err != nil {
		return err
	}
	for _, id := range tokens {
		s.forgetToken(id)
	}
	return c.JSON(http.StatusOK, out)
}

// removeMember ends a person's membership: their tokens of this realm go
// with it (revoked at once on every replica), their session loses the realm
// at its next request, and their sessions end when no realm is left them.
func (s *Service) removeMember(c echo.Context) error {
	p := PrincipalOf(c)
	user, err := memberParam(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	var tokens []uuid.UUID
	err = s.db.Tx(ctx, p.RealmID, func(tx pgx.Tx) error {
		owners, err := lockOwners(ctx, tx, p.RealmID)
		if err != nil {
			return err
		}
		if owners[user] && len(owners) == 1 {
			return errLastOwner
		}
		if tokens, err = s.forgetMemberTokens(ctx, tx, p.RealmID, user); err != nil {
			return err
		}
		one, err := s.members(ctx, tx, &user)
		if err != nil {
			return err
		}
		if len(one) == 0 {
			return appdor.Errorf(appdor.ENotFound, "member %s not found", user)
		}
		tag, err := tx.Exec(ctx, `DELETE FROM memberships WHERE realm_id = $1 AND user_id = $2`, p.RealmID, user)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return appdor.Errorf(appdor.ENotFound, "member %s not found", user)
		}
		if _, err := tx.Exec(ctx, `SELECT appdor_end_sessions_of_removed($1)`, user); err != nil {
			return err
		}
		return audit(ctx, tx, p.RealmID, actorOf(p), "member_removed", map[string]any{"user_id": user, "email": one[0].Email})
	})
	if err != nil {
		return err
	}
	for _, id := range tokens {
		s.forgetToken(id)
	}
	return c.NoContent(http.StatusNoContent)
}

// AcceptInvite sets the password of the person an invite secret names and
// opens a session for them.
func (s *Service) AcceptInvite(ctx context.Context, secret, password string) (Session, User, error) {
	if err := checkPassword(password); err != nil {
		return Session{}, User{}, err
	}
	errGone := appdor.Errorf(appdor.ENotFound, "this invite link is not valid: used already, expired or withdrawn")
	if len(secret) > 100 || len(secret) <= len(invitePrefix) || secret[:len(invitePrefix)] != invitePrefix {
		return Session{}, User{}, errGone
	}
	hash, err := hashPassword(password)
	if err != nil {
		return Session{}, User{}, err
	}
	var u User
	var realm uuid.UUID
	found := false
	err = s.db.Lookup(ctx, rls.Keys{}, scanOne(&found, &u.ID, &u.Email, &realm),
		`SELECT user_id, email, realm_id FROM appdor_accept_invite($1, $2)`, hashSecret(secret), hash)
	if err != nil {
		return Session{}, User{}, err
	}
	if !found {
		return Session{}, User{}, errGone
	}
	sess, err := s.startSession(ctx, u.ID)
	return sess, u, err
}
