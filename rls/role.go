package rls

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Standing is what the role a pool logs in as may do that row-level security
// cannot stop. A superuser and a role with BYPASSRLS skip every policy; a
// role that owns a table (or inherits its owner's rights) may ALTER it, DROP
// it, or turn its policies off. A serving role should be none of these.
type Standing struct {
	Role      string
	Superuser bool
	BypassRLS bool
	// Owns lists the tables of the public schema the role owns or may act as
	// the owner of.
	Owns []string
}

// Sound reports whether the role is bound by row-level security.
func (s Standing) Sound() bool { return !s.Superuser && !s.BypassRLS && len(s.Owns) == 0 }

// Problems says, in a few words each, why the role is not sound.
func (s Standing) Problems() []string {
	var p []string
	if s.Superuser {
		p = append(p, "is a superuser")
	}
	if s.BypassRLS {
		p = append(p, "has BYPASSRLS")
	}
	if len(s.Owns) > 0 && !s.Superuser { // a superuser may act as every owner: said already
		p = append(p, "owns the tables ("+strings.Join(s.Owns, ", ")+")")
	}
	return p
}

// ServingRole reads the standing of the role pool logs in as.
func ServingRole(ctx context.Context, pool *pgxpool.Pool) (Standing, error) {
	var s Standing
	err := pool.QueryRow(ctx, `
		SELECT r.rolname::text, r.rolsuper, r.rolbypassrls,
		       coalesce((SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_class c
		                 WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')
		                   AND pg_has_role(r.oid, c.relowner, 'USAGE')), '{}')
		FROM pg_roles r WHERE r.rolname = session_user`).Scan(&s.Role, &s.Superuser, &s.BypassRLS, &s.Owns)
	return s, Interpret(err)
}
