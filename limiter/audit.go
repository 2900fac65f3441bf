package limiter

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/appdor/appdor/rls"
)

// refusal is the first refusal of an episode, to be written to audit_log.
type refusal struct {
	realm, token, user uuid.UUID
	scope              Scope
	limit              int
	// address is the client's address (or IPv6 /64) of a refusal with no
	// realm (unauthenticated, sign-in), which has no audit row; account the
	// hashed account of a sign-in refusal.
	address, account string
}

// episodeMessage is the log line of a refusal episode, whatever its scope.
const episodeMessage = "rate_limited: a refusal episode begins"

// auditItem is a refusal to write, or (flushed set) a marker that closes
// flushed once every item before it is done.
type auditItem struct {
	r       refusal
	flushed chan struct{}
}

// auditor writes refusal episodes to audit_log from one goroutine, so the
// request that opened the episode answers without waiting for PostgreSQL. The
// queue is bounded: when PostgreSQL cannot keep up a row is dropped and
// counted, never waited for.
type auditor struct {
	db       *rls.DB
	log      *slog.Logger
	queue    chan auditItem
	stop     chan struct{}
	done     chan struct{}
	failures *prometheus.CounterVec
}

func newAuditor(db *rls.DB, log *slog.Logger) *auditor {
	a := &auditor{
		db:    db,
		log:   log,
		queue: make(chan auditItem, 1024),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appdor_limiter_audit_failures_total",
			Help: "Refusal episodes whose audit row was not written, by reason: dropped (queue full) or error.",
		}, []string{"reason"}),
	}
	go a.run()
	return a
}

func (a *auditor) enqueue(r refusal) {
	if a.db == nil {
		return
	}
	select {
	case a.queue <- auditItem{r: r}:
	default:
		a.failures.WithLabelValues("dropped").Inc()
	}
}

func (a *auditor) flush(ctx context.Context) error {
	done := make(chan struct{})
	select {
	case a.queue <- auditItem{flushed: done}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *auditor) close() {
	select {
	case <-a.stop:
	default:
		close(a.stop)
	}
	<-a.done
}

func (a *auditor) run() {
	defer close(a.done)
	for {
		select {
		case it := <-a.queue:
			a.handle(it)
		case <-a.stop:
			for {
				select {
				case it := <-a.queue:
					a.handle(it)
				default:
					return
				}
			}
		}
	}
}

func (a *auditor) handle(it auditItem) {
	if it.flushed != nil {
		close(it.flushed)
		return
	}
	// One line per refusal episode, as one audit row: the first refusal of
	// a key after it was last allowed.
	a.log.Warn(episodeMessage, slog.String("realm", it.r.realm.String()),
		slog.String("token", it.r.token.String()), slog.String("scope", string(it.r.scope)), slog.Int("limit", it.r.limit))
	if err := a.write(it.r); err != nil {
		a.failures.WithLabelValues("error").Inc()
		a.log.Error("limiter: writing the audit row of a refusal episode", slog.String("realm", it.r.realm.String()),
			slog.String("error", err.Error()))
	}
}

// write inserts one rate_limited row as the realm's tenant: audit_log has RLS
// like every realm-owned table.
func (a *auditor) write(r refusal) error {
	actor := "user:" + r.user.String()
	var token *string
	if r.token != uuid.Nil {
		actor = "token:" + r.token.String()
		s := r.token.String()
		token = &s
	}
	detail, err := json.Marshal(struct {
		Token *string `json:"token"`
		Scope Scope   `json:"scope"`
		Limit int     `json:"limit"`
	}{token, r.scope, r.limit})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return a.db.Tx(ctx, r.realm, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx,
			`INSERT INTO audit_log (realm_id, actor, action, detail) VALUES ($1, $2, 'rate_limited', $3)`,
			r.realm, actor, detail)
		return err
	})
}
