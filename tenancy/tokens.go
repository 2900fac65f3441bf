package tenancy

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/singleflight"

	"github.com/appdor/appdor/rls"
)

// LookupToken finds the live token with this secret: its realm, its member's
// role and its ceilings, in one query, or in the token cache when it was
// started (StartTokenCache) and holds the answer. A revoked or unknown token
// is unauthorized, and answered so from memory for a while (Guard).
func (s *Service) LookupToken(ctx context.Context, secret string) (*Principal, error) {
	if !validTokenSecret(secret) {
		return nil, errUnauthorized
	}
	hash := sha256.Sum256([]byte(secret))
	c := s.tokenCache()
	if c != nil {
		if p, stale, ok := c.get(hash); ok {
			if stale && c.claimRefresh(hash) {
				// Refresh ahead: a token in use is looked up again in the
				// background after half its ttl, so no request of it waits
				// for the lookup when its answer expires. Waiting, a
				// realm's request queues for the relookup slots with every
				// other token expiring then: beside sixteen storm realms
				// whose answers expired together, the quiet realm's two
				// slowest reads (28 and 31 ms, median 2.5) came at that
				// moment.
				s.lookupTokenShared(ctx, c, hash)
			}
			return p, nil
		}
	}
	if s.unknown.has(hash) {
		return nil, errUnauthorized
	}
	ch := s.lookupTokenShared(ctx, c, hash)
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		p := *res.Val.(*Principal) // a copy: the caller's principal is its own
		return &p, nil
	case <-ctx.Done():
		return nil, rls.Interpret(ctx.Err())
	}
}

// lookupTokenShared starts the lookup of the token with hash, or joins the
// one under way, and caches what it finds. Concurrent requests with the same
// token share one query: sixty clients of one token arriving together after
// its cached answer expired would otherwise send sixty lookups to
// PostgreSQL, ahead of the fairness controller, and take the pool from
// everyone else.
func (s *Service) lookupTokenShared(ctx context.Context, c *tokenCache, hash [32]byte) <-chan singleflight.Result {
	return s.lookups.DoChan(string(hash[:]), func() (any, error) {
		var gen uint64
		if c != nil {
			gen = c.gen.Load()
		}
		// The query is shared: it must not end because the request that
		// happened to start it went away; the guard's timeout bounds it.
		var p *Principal
		err := s.guarded(context.WithoutCancel(ctx), hash, errUnauthorized, func(ctx context.Context) (err error) {
			p, err = s.lookupToken(ctx, hash[:])
			return err
		})
		if c != nil {
			defer c.endRefresh(hash)
		}
		switch {
		case err == nil && c != nil:
			c.put(hash, p, gen)
		case errors.Is(err, errUnauthorized) && c != nil:
			c.drop(hash) // revoked while cached, its notification not yet here
		}
		return p, err
	})
}

func validTokenSecret(secret string) bool {
	return strings.HasPrefix(secret, tokenPrefix) && len(secret) <= 100
}

func (s *Service) lookupToken(ctx context.Context, hash []byte) (*Principal, error) {
	p := &Principal{}
	var tokenRPM, realmRPM *int
	err := s.lookupRow(ctx, rls.Keys{TokenHash: hash},
		`SELECT t.id, t.realm_id, t.user_id, m.role, l.requests_per_minute, r.requests_per_minute
		 FROM api_tokens t
		 JOIN memberships m ON m.realm_id = t.realm_id AND m.user_id = t.user_id
		 JOIN realms r ON r.id = t.realm_id
		 LEFT JOIN token_limits l ON l.realm_id = t.realm_id AND l.token_id = t.id
		 WHERE t.hash = $1 AND t.revoked_at IS NULL`, hash).
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

// forgetToken drops a token from this process's cache at once; other
// replicas learn of it through TokenChannel.
func (s *Service) forgetToken(id uuid.UUID) {
	if c := s.tokenCache(); c != nil {
		c.forget(id)
	}
}
