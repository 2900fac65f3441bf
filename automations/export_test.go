package automations

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EventQueue is the events' fair dequeue, for tests.
type EventQueue struct{ q *queue }

// NewEventQueue returns the events' dequeue on pool.
func NewEventQueue(pool *pgxpool.Pool) EventQueue {
	return EventQueue{newQueue(pool, eventRealmsSQL, claimEventSQL, releaseEventSQL, time.Millisecond)}
}

// Claim leases the next event and returns its realm.
func (e EventQueue) Claim(ctx context.Context) (uuid.UUID, bool, error) {
	var ev event
	_, ok, err := e.q.claim(ctx, time.Minute, &ev.realm, &ev.id, &ev.table, &ev.kind, &ev.rows, &ev.versions, &ev.fields,
		&ev.hop, &ev.attempts, &ev.createdAt)
	return ev.realm, ok, err
}

// UUIDAt is uuidAt, for tests.
var UUIDAt = uuidAt

// Backlog is the backlog estimate, for tests.
type Backlog struct{ b *backlog }

// NewBacklog returns an empty estimate.
func NewBacklog() Backlog {
	return Backlog{&backlog{sampled: map[uuid.UUID]int{}, added: map[uuid.UUID][]uint64{}, logged: map[uuid.UUID]time.Time{}}}
}

// Add counts an event added by the transaction xid.
func (b Backlog) Add(realm uuid.UUID, xid uint64) { b.b.add(realm, xid) }

// Reset takes a sample: counts, seen in the snapshot snap (its text form).
func (b Backlog) Reset(counts map[uuid.UUID]int, snap string) error {
	s, err := parseSnapshot(snap)
	if err != nil {
		return err
	}
	b.b.reset(counts, s)
	return nil
}

// Pending is the estimate of realm's pending events.
func (b Backlog) Pending(realm uuid.UUID) int {
	n, _ := b.b.full(realm, 0)
	return n
}

// Carried is how many events the estimate carries past its samples.
func (b Backlog) Carried() int {
	n := 0
	for _, x := range b.b.added {
		n += len(x)
	}
	return n
}

// ParseSnapshot is parseSnapshot; Finished reports snapshot.finished.
func ParseSnapshot(s string) (func(xid uint64) bool, error) {
	snap, err := parseSnapshot(s)
	return snap.finished, err
}

// Hand evaluates realm's event id as a worker it was handed to does.
func (s *Service) Hand(ctx context.Context, realm, table uuid.UUID, id int64) {
	s.slots.take(realm)
	s.evaluateHanded(ctx, handed{realm, table, id, nil})
}
