package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/fairness"
	"github.com/appdor/appdor/tenancy"
	"github.com/appdor/appdor/usage"
)

// startUsage makes the usage recorder that the gauges read, before the
// fairness controller that reports seats to it. Without Redis there is
// none: the request path records nothing and the gauges answer 503.
func (a *App) startUsage() {
	if a.redis == nil {
		return
	}
	a.usage = usage.New(a.redis, a.cfg.UsageFlushInterval, a.log)
	a.usage.Episode = a.auditConcurrencyEpisode
	a.usage.Run()
	a.tenancy.TokenActivity = a.tokenActivity
}

func (a *App) stopUsage() {
	if a.usage != nil {
		a.usage.Close()
	}
}

// seatUsage is the fairness controller's report of each unit, for the
// gauges: interactive and background work alike hold their realm's seats.
func (a *App) seatUsage(flow string, _ fairness.Level, waited, held time.Duration) {
	a.usage.Seat(flow, waited, held)
}

// auditConcurrencyEpisode writes the first concurrency_limited refusals of a
// realm after a quiet spell to its audit log, from the recorder's flush (off
// every request's path).
func (a *App) auditConcurrencyEpisode(realm uuid.UUID, reason string, refused int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	detail, _ := json.Marshal(map[string]any{"refused": refused, "window_seconds": a.usageInterval().Seconds()})
	err := a.db.Tx(ctx, realm, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO audit_log (realm_id, actor, action, detail) VALUES ($1, 'appdor', $2, $3)`,
			realm, reason, detail)
		return err
	})
	if err != nil {
		a.log.Warn("usage: writing a concurrency_limited episode to the audit log", slog.String("realm", realm.String()),
			slog.String("error", err.Error()))
	}
}

func (a *App) usageInterval() time.Duration {
	if a.cfg.UsageFlushInterval > 0 {
		return a.cfg.UsageFlushInterval
	}
	return usage.DefaultFlushInterval
}

// recordUsage counts each authenticated request for its realm's gauges: its
// latency, and its refusal's code when a gate refused it (the limiter's
// rate_limited, the controller's concurrency_limited, or unavailable). It
// sits right after authentication, so the gates' refusals pass through it.
// Event streams are left out: they last minutes by design.
func (a *App) recordUsage(next echo.HandlerFunc) echo.HandlerFunc {
	if a.usage == nil {
		return next
	}
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		p := tenancy.PrincipalOf(c)
		if p == nil || strings.HasSuffix(c.Path(), "/events") {
			return err
		}
		refused := ""
		if err != nil {
			switch code := appdor.ErrorCode(err); code {
			case appdor.ERateLimited, appdor.EConcurrencyLimited, appdor.EUnavailable:
				refused = code
			}
		} else if c.Response().Status == http.StatusTooManyRequests {
			refused = appdor.EConcurrencyLimited // the controller answers its own refusals
		}
		a.usage.Request(p.RealmID, p.TokenID, time.Since(start), refused)
		return err
	}
}

// usageRoutes serves the gauges: a realm's own to its owners, and every
// realm's side by side to operators (their names and numbers only).
func (a *App) usageRoutes(api *echo.Group) {
	api.GET("/usage", a.realmUsage, tenancy.Require(tenancy.RoleOwner))
	api.GET("/operator/usage", a.operatorUsage)
}

var errNoUsage = &appdor.Error{Code: appdor.EUnavailable, Message: "usage is kept in Redis, which is not reachable", RetryAfter: 5 * time.Second}

// realmUsageOut is one realm's gauges.
type realmUsageOut struct {
	ID       uuid.UUID      `json:"id"`
	Name     string         `json:"name,omitempty"`
	Requests int64          `json:"requests_last_hour"`
	Refused  int64          `json:"refused_last_hour"`
	Minutes  []usage.Minute `json:"minutes"`
}

func usageOut(rep usage.Report, name string) realmUsageOut {
	req, ref := rep.Totals()
	return realmUsageOut{ID: rep.Realm, Name: name, Requests: req, Refused: ref, Minutes: rep.Minutes}
}

func (a *App) realmUsage(c echo.Context) error {
	if a.usage == nil {
		return errNoUsage
	}
	p := tenancy.PrincipalOf(c)
	rep, err := usage.Read(c.Request().Context(), a.redis, p.RealmID, time.Now())
	if err != nil {
		return errNoUsage
	}
	return c.JSON(http.StatusOK, map[string]any{"realm": usageOut(rep, ""), "bounds_ms": usage.Bounds})
}

// operatorUsage is every realm with usage in the last hour, busiest first,
// and the other realms' names after them with nothing. For anyone but an
// operator it is forbidden.
func (a *App) operatorUsage(c echo.Context) error {
	p := tenancy.PrincipalOf(c)
	ctx := c.Request().Context()
	realms, err := a.tenancy.OperatorRealms(ctx, p.UserID)
	if err != nil {
		return err
	}
	if len(realms) == 0 {
		return appdor.Errorf(appdor.EForbidden, "this needs an operator of this Appdor")
	}
	if a.usage == nil {
		return errNoUsage
	}
	now := time.Now()
	active, err := usage.Active(ctx, a.redis, now)
	if err != nil {
		return errNoUsage
	}
	busy := map[uuid.UUID]bool{}
	for _, id := range active {
		busy[id] = true
	}
	out := make([]realmUsageOut, 0, len(realms))
	for _, r := range realms {
		if !busy[r.ID] {
			out = append(out, realmUsageOut{ID: r.ID, Name: r.Name, Minutes: []usage.Minute{}})
			continue
		}
		rep, err := usage.Read(ctx, a.redis, r.ID, now)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return err
			}
			return errNoUsage
		}
		out = append(out, usageOut(rep, r.Name))
	}
	sortBusiest(out)
	return c.JSON(http.StatusOK, map[string]any{"realms": out, "bounds_ms": usage.Bounds})
}

// sortBusiest orders realms by requests in the hour, most first, then by name.
func sortBusiest(rs []realmUsageOut) {
	sort.SliceStable(rs, func(i, j int) bool {
		if rs[i].Requests != rs[j].Requests {
			return rs[i].Requests > rs[j].Requests
		}
		return strings.ToLower(rs[i].Name) < strings.ToLower(rs[j].Name)
	})
}

// tokenActivity is each token's last hour and last use, for the token list.
func (a *App) tokenActivity(ctx context.Context, realm uuid.UUID) (map[uuid.UUID]tenancy.TokenActivity, error) {
	rep, err := usage.Read(ctx, a.redis, realm, time.Now())
	if err != nil {
		return nil, err
	}
	out := make(map[uuid.UUID]tenancy.TokenActivity, len(rep.Tokens))
	for id, u := range rep.Tokens {
		out[id] = tenancy.TokenActivity{LastUsedAt: u.LastUsed, RequestsLastHour: u.Requests, RefusedLastHour: u.Refused}
	}
	return out, nil
}
