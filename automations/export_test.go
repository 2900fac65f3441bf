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
	return EventQueue{newQueue(pool, eventRealmsSQL, claimEventSQL, time.Millisecond)}
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
