package tenancy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
)

// AuditEntry is one row of a realm's audit log. Actor is "user:ID" or
// "token:ID" (or "appdor" for what the server does by itself); Detail says
// what changed, as the action's own object.
type AuditEntry struct {
	ID     int64           `json:"id"`
	At     time.Time       `json:"at"`
	Actor  string          `json:"actor"`
	Action string          `json:"action"`
	Detail json.RawMessage `json:"detail"`
}

// AuditActions are the actions the log records, for the filter's check and
// the API document.
var AuditActions = []string{
	"setup", "sign_in", "sign_in_failed", "invite_accepted",
	"member_added", "member_role_changed", "member_removed",
	"token_created", "token_limit_changed", "token_revoked",
	"rate_limited", "concurrency_limited", "webhook_disabled",
}

const (
	defaultAuditPage = 50
	maxAuditPage     = 200
)

// AuditRoutes registers the realm's audit log on g, for owners: newest
// first, filtered by action (?action=a,b), paged by cursor (?before=ID, the
// answer's next).
func (s *Service) AuditRoutes(g *echo.Group) {
	g.GET("/audit", s.listAudit, Require(RoleOwner))
}

func (s *Service) listAudit(c echo.Context) error {
	p := PrincipalOf(c)
	q := c.QueryParams()
	actions := []string{}
	for _, v := range q["action"] {
		for _, a := range strings.Split(v, ",") {
			if a = strings.TrimSpace(a); a == "" {
				continue
			}
			known := false
			for _, k := range AuditActions {
				known = known || k == a
			}
			if !known {
				return appdor.WithDetails(appdor.Errorf(appdor.EValidation, "unknown audit action %q", a),
					map[string]any{"actions": AuditActions})
			}
			actions = append(actions, a)
		}
	}
	limit := defaultAuditPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxAuditPage {
			return appdor.Errorf(appdor.EValidation, "limit must be from 1 to %d", maxAuditPage)
		}
		limit = n
	}
	var before *int64
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return appdor.Errorf(appdor.EValidation, "before must be the next of an earlier page")
		}
		before = &n
	}
	var out []AuditEntry
	err := s.db.Query(c.Request().Context(), p.RealmID, func(rows pgx.Rows) (err error) {
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
			var e AuditEntry
			err := r.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.Detail)
			return e, err
		})
		return err
	},
		`SELECT id, at, actor, action, detail FROM audit_log
		 WHERE realm_id = $1 AND ($2::bigint IS NULL OR id < $2)
		   AND (cardinality($3::text[]) = 0 OR action = ANY ($3))
		 ORDER BY id DESC LIMIT $4`, p.RealmID, before, actions, limit+1)
	if err != nil {
		return err
	}
	res := map[string]any{"entries": out}
	if len(out) > limit {
		res["entries"] = out[:limit]
		res["next"] = strconv.FormatInt(out[limit-1].ID, 10)
	}
	if out == nil {
		res["entries"] = []AuditEntry{}
	}
	return c.JSON(http.StatusOK, res)
}
