package automations

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// WorkerConnection readies a connection of the workers' own pool: it
// declares itself the workers' (appdor.queue = 'worker'), which is what lets
// the serving role read and lease rows of the two queue tables across realms
// (the dequeue must see every realm's queue to choose the next realm); the
// API's connections never do, and see no queue row outside a realm's
// transaction.
//
// It also commits asynchronously (synchronous_commit off): a worker's
// COMMIT does not wait for the WAL to reach the disk, which under a write
// storm is most of a quiet realm's evaluation. Nothing is lost by it. An
// event is committed with its write, durably; what a worker commits is
// derived from events and claims, so a PostgreSQL crash loses at most its
// last fraction of a second of evaluations and claims, which are made
// again. Their webhooks then go again with the same webhook-id (deliveryID),
// which a receiver that keeps ids sees once.
//
// And it plans every statement for the tables as they are when it runs
// (plan_cache_mode force_custom_plan). The workers' statements are
// prepared once per connection, and PostgreSQL otherwise settles on one
// generic plan after five executions. A new installation's queue and run
// tables start empty, where a sequential scan is the cheapest plan; kept,
// that plan scans every run and delivery ever recorded for each one it
// finishes, and only an ANALYZE of the table replaces it: in the automation
// storm, bringing a run's status up to date from its deliveries went from
// 0.06 ms a call to 1.7 ms by the storm's end; planned anew it stays at
// 0.05 ms. Planning costs tens of microseconds a statement, the same
// however large the tables grow.
func WorkerConnection(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, `SELECT set_config('appdor.queue', 'worker', false), set_config('synchronous_commit', 'off', false),
	                                 set_config('plan_cache_mode', 'force_custom_plan', false)`)
	return err
}

// The realms with due work, found by a loose index scan of the pending
// index: each step of the recursion is one index probe for the next realm,
// so a realm with 100,000 pending events costs what a realm with one does.
// A realm is due when its earliest pending item's time has come (an item
// whose lease runs is pending with its time at the lease's end).
const eventRealmsSQL = `
WITH RECURSIVE realms AS (
    (SELECT realm_id FROM automation_events WHERE state = 'pending' ORDER BY realm_id LIMIT 1)
    UNION ALL
    SELECT (SELECT e.realm_id FROM automation_events e
            WHERE e.state = 'pending' AND e.realm_id > realms.realm_id ORDER BY e.realm_id LIMIT 1)
    FROM realms WHERE realms.realm_id IS NOT NULL
)
SELECT realm_id FROM realms
WHERE realm_id IS NOT NULL
  AND (SELECT e.run_at FROM automation_events e
       WHERE e.state = 'pending' AND e.realm_id = realms.realm_id ORDER BY e.run_at LIMIT 1) <= now()
LIMIT 10000`

// claimEventSQL leases one realm's oldest due event: its time moves to the
// lease's end, and its attempts count up, which names this claim.
const claimEventSQL = `
UPDATE automation_events SET run_at = now() + $2::bigint * interval '1 millisecond', attempts = attempts + 1
WHERE realm_id = $1 AND id = (
    SELECT id FROM automation_events
    WHERE realm_id = $1 AND state = 'pending' AND run_at <= now()
    ORDER BY run_at, id LIMIT 1
    FOR UPDATE SKIP LOCKED)
RETURNING realm_id, id, table_id, event, row_ids, versions, fields, hop, attempts, created_at`

// releaseEventSQL gives a claimed event back unused: due now, its claim not
// counted, so a stopping worker leaves no event waiting out its lease.
const releaseEventSQL = `
UPDATE automation_events SET run_at = now(), attempts = attempts - 1
WHERE realm_id = $1 AND id = $2 AND attempts = $3 AND state = 'pending'`

const deliveryRealmsSQL = `
WITH RECURSIVE realms AS (
    (SELECT realm_id FROM webhook_deliveries WHERE state = 'pending' ORDER BY realm_id LIMIT 1)
    UNION ALL
    SELECT (SELECT d.realm_id FROM webhook_deliveries d
            WHERE d.state = 'pending' AND d.realm_id > realms.realm_id ORDER BY d.realm_id LIMIT 1)
    FROM realms WHERE realms.realm_id IS NOT NULL
)
SELECT realm_id FROM realms
WHERE realm_id IS NOT NULL
  AND (SELECT d.next_attempt_at FROM webhook_deliveries d
       WHERE d.state = 'pending' AND d.realm_id = realms.realm_id ORDER BY d.next_attempt_at LIMIT 1) <= now()
LIMIT 10000`

const claimDeliverySQL = `
UPDATE webhook_deliveries SET next_attempt_at = now() + $2::bigint * interval '1 millisecond', attempts = attempts + 1
WHERE realm_id = $1 AND id = (
    SELECT id FROM webhook_deliveries
    WHERE realm_id = $1 AND state = 'pending' AND next_attempt_at <= now()
    ORDER BY next_attempt_at, id LIMIT 1
    FOR UPDATE SKIP LOCKED)
RETURNING realm_id, id, attempts`

const releaseDeliverySQL = `
UPDATE webhook_deliveries SET next_attempt_at = now(), attempts = attempts - 1
WHERE realm_id = $1 AND id = $2 AND attempts = $3 AND state = 'pending'`

// queue is the fair dequeue of one queue table. Claims go round the realms
// with due work: a round is read at once (realmsSQL), then each realm of it
// gets one claim (claimSQL) before the next round is read. Every realm with
// due work is served once a round, whatever its backlog, so a quiet realm's
// event waits at most one round of claims, not behind a storm's queue.
type queue struct {
	pool      *pgxpool.Pool
	realmsSQL string
	claimSQL  string
	// releaseSQL gives back a claim ($1 realm, $2 id, $3 attempts) that
	// its worker abandons unfinished.
	releaseSQL string
	idle       time.Duration // least time between two reads of an empty round
	// slots, when set, bounds the items one realm's claims hold at once: a
	// realm at its bound is passed over in a round.
	slots *slots

	mu      sync.Mutex
	round   []uuid.UUID
	emptyAt time.Time // when a read last found no realm with due work
}

func newQueue(pool *pgxpool.Pool, realmsSQL, claimSQL, releaseSQL string, idle time.Duration) *queue {
	return &queue{pool: pool, realmsSQL: realmsSQL, claimSQL: claimSQL, releaseSQL: releaseSQL, idle: idle}
}

// poke lets the next claim read a round at once, even just after one came
// back empty.
func (q *queue) poke() {
	q.mu.Lock()
	q.emptyAt = time.Time{}
	q.mu.Unlock()
}

// next is the realm to claim from next, reading a new round when the last is
// done (fresh); false when no realm has due work.
func (q *queue) next(ctx context.Context) (realm uuid.UUID, fresh, ok bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.round) == 0 {
		if time.Since(q.emptyAt) < q.idle {
			return uuid.Nil, false, false, nil
		}
		rows, err := q.pool.Query(ctx, q.realmsSQL)
		if err != nil {
			return uuid.Nil, false, false, err
		}
		realms, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return uuid.Nil, false, false, err
		}
		if len(realms) == 0 {
			q.emptyAt = time.Now()
			return uuid.Nil, false, false, nil
		}
		q.round, fresh = realms, true
	}
	r := q.round[0]
	q.round = q.round[1:]
	return r, fresh, true, nil
}

// claim leases the next realm's oldest due item for lease and scans the
// claim's RETURNING columns into dest; false when nothing is due. The caller
// gives the realm's slot back with done when it is finished with the item.
func (q *queue) claim(ctx context.Context, lease time.Duration, dest ...any) (realm uuid.UUID, ok bool, err error) {
	rounds := 0
	for {
		realm, fresh, ok, err := q.next(ctx)
		if err != nil || !ok {
			return uuid.Nil, false, err
		}
		if fresh {
			if rounds++; rounds > 1 {
				// A whole round passed over: every realm with due work is
				// at its bound. The realm just read goes back for the next claim.
				q.mu.Lock()
				q.round = append([]uuid.UUID{realm}, q.round...)
				q.mu.Unlock()
				return uuid.Nil, false, nil
			}
		}
		if q.slots != nil && !q.slots.take(realm) {
			continue
		}
		err = q.pool.QueryRow(ctx, q.claimSQL, realm, lease.Milliseconds()).Scan(dest...)
		if err == nil {
			return realm, true, nil
		}
		q.done(realm)
		if !errors.Is(err, pgx.ErrNoRows) {
			return uuid.Nil, false, err
		}
		// taken by another worker meanwhile, or leased: the next realm
	}
}

// release gives back a claim its worker abandons because it is stopping:
// the item is due again at once, for a worker of another replica or of the
// next start, instead of after its lease. The claim is not counted among
// the item's attempts. It runs on a context of its own, since the worker's
// is cancelled by then; if it fails, the lease still runs out.
func (q *queue) release(ctx context.Context, realm uuid.UUID, id any, attempts int) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_, err := q.pool.Exec(ctx, q.releaseSQL, realm, id, attempts)
	return err
}

// done gives back the slot a claim of realm took.
func (q *queue) done(realm uuid.UUID) {
	if q.slots != nil {
		q.slots.give(realm)
	}
}

// slots counts the items each realm holds, up to max each.
type slots struct {
	mu  sync.Mutex
	n   map[uuid.UUID]int
	max int
}

func newSlots(max int) *slots { return &slots{n: map[uuid.UUID]int{}, max: max} }

func (s *slots) take(realm uuid.UUID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[realm] >= s.max {
		return false
	}
	s.n[realm]++
	return true
}

// takeIdle takes a slot of realm only if it holds none.
func (s *slots) takeIdle(realm uuid.UUID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[realm] > 0 || s.max < 1 {
		return false
	}
	s.n[realm]++
	return true
}

func (s *slots) give(realm uuid.UUID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[realm]--; s.n[realm] <= 0 {
		delete(s.n, realm)
	}
}
