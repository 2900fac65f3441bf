package automations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/grid"
)

// event is a claimed automation event.
type event struct {
	realm     uuid.UUID
	id        int64
	table     uuid.UUID
	kind      string
	rows      []uuid.UUID
	versions  []int64
	fields    []string
	hop       int
	attempts  int
	createdAt time.Time
	// written is what the evaluation's actions wrote, for Service.Live
	// once it has committed.
	written []tableWrite
	// direct is the webhook deliveries the evaluation recorded already
	// claimed, for its worker to attempt once it has committed.
	direct []delivery
	// read is the event's rows, read in the round trip that consumed it
	// when they are few (readAhead), for automations with no condition;
	// readOK while no automation of the evaluation may have written them.
	read   []grid.Row
	readOK bool
	// tail is statements the evaluation has queued and not yet sent: they
	// go with its next batch, or with its COMMIT (rls.DB.TxBatch).
	tail *pgx.Batch
}

// send sends b in tx after e's tail, in one round trip, and reads their
// results.
func (e *event) send(ctx context.Context, tx pgx.Tx, b *pgx.Batch) error {
	if e.tail != nil {
		b.QueuedQueries = append(e.tail.QueuedQueries, b.QueuedQueries...)
		e.tail = nil
	}
	return tx.SendBatch(ctx, b).Close()
}

// hold keeps b's statements for e's next batch or its COMMIT.
func (e *event) hold(b *pgx.Batch) {
	if e.tail == nil {
		e.tail = &pgx.Batch{}
	}
	e.tail.QueuedQueries = append(e.tail.QueuedQueries, b.QueuedQueries...)
}

// flush sends e's tail, if it holds any statement.
func (e *event) flush(ctx context.Context, tx pgx.Tx) error {
	if e.tail == nil {
		return nil
	}
	return e.send(ctx, tx, &pgx.Batch{})
}

// last is e's tail, to send with the COMMIT.
func (e *event) last() *pgx.Batch {
	b := e.tail
	e.tail = nil
	return b
}

// readAhead is the most rows an event may have for its evaluation to read
// them with the event itself: a light realm's one-row write then costs its
// evaluation two round trips fewer than one read for each automation (a
// webhook's then records the run and its deliveries with the COMMIT). A
// bigger batch is read by each automation's condition, which is what it
// pays for.
const readAhead = 64

// tableWrite is one action's write batch of one table.
type tableWrite struct {
	table  uuid.UUID
	change grid.Change
}

// errLost: the event was not the evaluation's to consume, which then
// changes nothing. A claimed event's lease ran out and another claim took
// it; a handed one was claimed from the queue meanwhile, or is not
// committed yet.
var errLost = errors.New("the event was claimed again")

// work is one worker: it evaluates events and delivers webhooks, one at a
// time, fairly across realms, and waits for work when there is none.
func (s *Service) work(ctx context.Context) {
	t := time.NewTimer(s.cfg.PollInterval)
	defer t.Stop()
	for ctx.Err() == nil {
		did := s.evaluateNext(ctx)
		if s.deliverNext(ctx) {
			did = true
		}
		if did {
			continue
		}
		t.Reset(s.cfg.PollInterval)
		select {
		case <-ctx.Done():
		case h := <-s.handed:
			s.evaluateHanded(ctx, h)
		case <-s.wake:
			s.events.poke()
			s.deliveries.poke()
		case <-t.C:
		}
	}
}

// acquire takes a background seat of realm from the gate.
func (s *Service) acquire(ctx context.Context, realm uuid.UUID) (func(), error) {
	if s.gate == nil {
		return func() {}, nil
	}
	return s.gate.Acquire(ctx, realm.String())
}

// evaluateNext claims one event and evaluates it; false when none was due.
func (s *Service) evaluateNext(ctx context.Context) bool {
	var e event
	_, ok, err := s.events.claim(ctx, s.cfg.Lease, &e.realm, &e.id, &e.table, &e.kind, &e.rows, &e.versions, &e.fields,
		&e.hop, &e.attempts, &e.createdAt)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Error("automations: claiming an event", slog.String("error", err.Error()))
		}
		return false
	}
	if !ok {
		return false
	}
	defer s.events.done(e.realm)
	release, err := s.acquire(ctx, e.realm)
	if err != nil {
		s.abandon(ctx, s.events, e.realm, e.id, e.attempts) // shutting down
		return true
	}
	defer release()
	err = s.evaluate(ctx, &e, false)
	switch {
	case errors.Is(err, errLost):
	case err != nil && ctx.Err() != nil:
		s.abandon(ctx, s.events, e.realm, e.id, e.attempts) // shutting down: rolled back
	case err != nil:
		s.failEvent(ctx, &e, err)
	default:
		s.metrics.evaluated.WithLabelValues("claimed").Inc()
		s.committed(ctx, &e, release)
	}
	return true
}

// takeEventSQL takes a handed event in its evaluation's transaction: it is
// deleted there, so the transaction's row lock is its claim (a claim of
// the queue skips it, FOR UPDATE SKIP LOCKED) and a rollback leaves it in
// the queue as it was. An event claimed from the queue meanwhile is leased
// (its time is the lease's end) and not taken.
const takeEventSQL = `
DELETE FROM automation_events
WHERE realm_id = $1 AND id = $2 AND state = 'pending' AND run_at <= now()
RETURNING event, row_ids, versions, fields, hop, attempts, created_at`

// deleteClaimedSQL consumes a claimed event, if its claim is still this
// worker's (its attempts name the claim).
const deleteClaimedSQL = `DELETE FROM automation_events WHERE realm_id = $1 AND id = $2 AND attempts = $3`

// consumed is what consume's batch reads.
type consumed struct {
	autos []Automation // the table's enabled automations
	t     *grid.Table  // nil if the table is gone
	ok    bool         // the event was this worker's to consume; if not, what was read is of no use
}

// consume returns the batch that opens an evaluation's transaction (rls's
// TxBatch sends it with BEGIN, in one round trip): it deletes the event,
// the handed event by takeEventSQL (which reads it) or the claimed one by
// deleteClaimedSQL, and reads its table's enabled automations, the table,
// and the event's rows when they are few (e.read), into c.
func (s *Service) consume(e *event, handed bool) (b *pgx.Batch, c *consumed) {
	b, c = &pgx.Batch{}, &consumed{}
	if handed {
		b.Queue(takeEventSQL, e.realm, e.id).QueryRow(func(row pgx.Row) error {
			err := row.Scan(&e.kind, &e.rows, &e.versions, &e.fields, &e.hop, &e.attempts, &e.createdAt)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil // claimed from the queue meanwhile, or not committed yet
			}
			c.ok = err == nil
			return err
		})
	} else {
		b.Queue(deleteClaimedSQL, e.realm, e.id, e.attempts).Exec(func(tag pgconn.CommandTag) error {
			c.ok = tag.RowsAffected() == 1
			return nil
		})
	}
	b.Queue(listAutomationsSQL, e.realm, e.table, true).Query(func(rows pgx.Rows) (err error) {
		c.autos, err = collectAutomations(rows)
		return err
	})
	grid.QueueLoadTable(b, e.realm, e.table, &c.t)
	e.read, e.readOK = nil, len(e.rows) > 0 && len(e.rows) <= readAhead
	if e.readOK {
		grid.QueueRows(b, e.realm, e.table, e.rows, &e.read)
	}
	return b, c
}

// evaluateHanded evaluates an event handed over at its write's commit (see
// handoff), holding the slot handoff took for its realm. If the evaluation
// fails, the event is left in the queue, due at once, where a claim counts
// its attempts and puts off its retries.
func (s *Service) evaluateHanded(ctx context.Context, h handed) {
	defer s.events.done(h.realm)
	release, err := s.acquire(ctx, h.realm)
	if err != nil {
		return // shutting down; the event waits in the queue
	}
	defer release()
	e := event{realm: h.realm, table: h.table, id: h.id, rows: h.rows}
	err = s.evaluate(ctx, &e, true)
	switch {
	case err != nil && ctx.Err() != nil:
	case err != nil && !errors.Is(err, errLost):
		s.log.Warn("automations: evaluating a handed event failed; it is claimed again from the queue",
			slog.String("realm", e.realm.String()), slog.Int64("event", e.id), slog.String("error", err.Error()))
		fallthrough
	case err != nil:
		// Failed, and left in the queue; or not taken (errLost): claimed
		// from the queue meanwhile, or recorded outside a grid write (an
		// action's own write) and handed before its transaction commits,
		// and the queue has it once it does.
		s.events.poke()
		s.poke()
	default:
		s.metrics.evaluated.WithLabelValues("handed").Inc()
		s.committed(ctx, &e, release)
	}
}

// committed follows an evaluation's commit: the live streams hear of the
// rows its actions wrote, and its webhooks' first attempts are made outside
// the background seat, which release gives back.
func (s *Service) committed(ctx context.Context, e *event, release func()) {
	if s.Live != nil {
		for _, w := range e.written {
			s.Live.TableChanged(e.realm, w.table, w.change)
		}
	}
	release()
	for i := range e.direct {
		s.attempt(ctx, &e.direct[i])
	}
}

// abandon gives a claimed item back to its queue when the worker stops
// before finishing it.
func (s *Service) abandon(ctx context.Context, q *queue, realm uuid.UUID, id any, attempts int) {
	if err := q.release(ctx, realm, id, attempts); err != nil {
		s.log.Warn("automations: giving back an unfinished claim; it is retried when its lease runs out",
			slog.String("realm", realm.String()), slog.Any("id", id), slog.String("error", err.Error()))
	}
}

// failEvent puts an event whose evaluation failed back in the queue, later,
// or keeps it as failed after maxEventAttempts.
func (s *Service) failEvent(ctx context.Context, e *event, cause error) {
	wait := min(time.Duration(1<<min(e.attempts, 12))*time.Second, 5*time.Minute)
	s.log.Error("automations: evaluating an event failed", slog.String("realm", e.realm.String()),
		slog.Int64("event", e.id), slog.Int("attempts", e.attempts), slog.String("error", cause.Error()))
	_, err := s.wpool.Exec(ctx,
		`UPDATE automation_events SET state = CASE WHEN attempts >= $4 THEN 'failed' ELSE 'pending' END,
		        run_at = now() + $5::bigint * interval '1 millisecond', last_error = $6
		 WHERE realm_id = $1 AND id = $2 AND attempts = $3`,
		e.realm, e.id, e.attempts, maxEventAttempts, wait.Milliseconds(), cause.Error())
	if err != nil && ctx.Err() == nil {
		s.log.Error("automations: recording a failed event", slog.String("error", err.Error()))
	}
}

// evaluate consumes e and runs each automation of its table that it fires,
// in one transaction of its realm: consume's batch travels with BEGIN, and
// what the automations held back (e.tail) with COMMIT.
func (s *Service) evaluate(ctx context.Context, e *event, handed bool) error {
	b, c := s.consume(e, handed)
	return s.wdb.TxBatch(ctx, e.realm, b, func(tx pgx.Tx) (*pgx.Batch, error) {
		if !c.ok {
			return nil, errLost
		}
		if err := s.fire(ctx, tx, e, c.autos, c.t); err != nil {
			return nil, err
		}
		return e.last(), nil
	})
}

// fire runs each of autos (the enabled automations of table t, which is
// nil if it is gone) whose trigger the event fires, in tx, which has
// consumed the event.
func (s *Service) fire(ctx context.Context, tx pgx.Tx, e *event, autos []Automation, t *grid.Table) error {
	if t == nil {
		return nil // the table is gone, and its automations with it
	}
	change := grid.Change{Event: e.kind, Fields: e.fields}
	for i := range autos {
		a := &autos[i]
		if !a.Trigger.matches(change) {
			continue
		}
		if err := s.run(ctx, tx, e, t, a); err != nil {
			return err
		}
		if a.writes() {
			e.readOK = false
		}
	}
	return nil
}

// refusal tells an action's refusal (a cell its field refuses, a table gone,
// a condition on a deleted field), which fails the run, from a database
// error, which fails the evaluation and is retried.
func refusal(err error) bool {
	switch appdor.ErrorCode(err) {
	case appdor.EValidation, appdor.EInvalid, appdor.ENotFound:
		return true
	}
	return false
}

// run runs one automation for an event: the condition picks the rows, and
// if any remain, a run is recorded and the actions applied, all or none.
func (s *Service) run(ctx context.Context, tx pgx.Tx, e *event, t *grid.Table, a *Automation) error {
	var rows []grid.Row
	var matchErr error
	if e.kind == grid.EventRowDeleted {
		for i, id := range e.rows {
			rows = append(rows, grid.Row{ID: id, Version: e.versions[i]})
		}
	} else if len(a.Condition) == 0 && e.readOK {
		if len(e.read) == 0 {
			return nil // the rows are gone: no run
		}
		rows = append(rows, e.read...) // act writes the rows it updates into its slice
	} else {
		if err := e.flush(ctx, tx); err != nil {
			return err
		}
		var err error
		matchErr, err = guarded(ctx, tx, len(a.Condition) > 0, func(tx pgx.Tx) (err error) {
			rows, err = grid.MatchRows(ctx, tx, e.realm, t, a.Condition, e.rows)
			return err
		})
		if err != nil {
			return err
		}
		if matchErr == nil && len(rows) == 0 {
			return nil // the condition keeps no row, or the rows are gone: no run
		}
	}
	runID, err := uuid.NewV7()
	if err != nil {
		return err
	}
	ids := make([]uuid.UUID, 0, len(rows))
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	if matchErr != nil {
		ids = e.rows
	}
	b := &pgx.Batch{}
	b.Queue(insertRunSQL, e.realm, runID, a.ID, e.kind, e.id, ids, e.hop, e.createdAt, uuidAt(time.Now().Add(-RunRetention)))
	n, actErr := 0, matchErr
	if actErr == nil && !a.writes() {
		// Webhooks only, which nothing refuses: the run and its deliveries
		// are recorded with no round trip of their own, sent with the
		// COMMIT (or the next automation's statements).
		if n, err = s.act(ctx, tx, b, e, t, a, runID, rows); err != nil {
			return err
		}
	}
	if actErr == nil && !a.writes() && n > 0 {
		e.hold(b) // sent with the evaluation's next statements, or with its COMMIT
	} else if err := e.send(ctx, tx, b); err != nil {
		return err
	}
	if actErr == nil && a.writes() {
		kept, keptDirect := len(e.written), len(e.direct)
		actErr, err = guarded(ctx, tx, true, func(tx pgx.Tx) (err error) {
			b := &pgx.Batch{}
			if n, err = s.act(ctx, tx, b, e, t, a, runID, rows); err != nil {
				return err
			}
			return tx.SendBatch(ctx, b).Close()
		})
		if err != nil {
			return err
		}
		if actErr != nil {
			e.written, e.direct, n = e.written[:kept], e.direct[:keptDirect], 0
		}
	}
	status := "succeeded"
	var lastError *string
	switch {
	case actErr != nil:
		status = "failed"
		msg := actErr.Error()
		var ae *appdor.Error
		if errors.As(actErr, &ae) {
			msg = ae.Message
			if d, err := json.Marshal(ae.Details); err == nil && ae.Details != nil {
				msg += ": " + string(d)
			}
		}
		lastError = &msg
	case n > 0:
		status = "pending"
	}
	if status != "pending" { // recorded pending, with no error and no end
		if _, err := tx.Exec(ctx,
			`UPDATE automation_runs SET status = $3, last_error = $4, finished_at = now() WHERE realm_id = $1 AND id = $2`,
			e.realm, runID, status, lastError); err != nil {
			return err
		}
	}
	s.metrics.runs.WithLabelValues(status).Inc()
	return nil
}

// guarded runs fn, in a savepoint of tx when fn can be refused (a condition
// on a field deleted since, a cell its field refuses, a table gone): a
// refusal then undoes only fn's work and comes back as refused, to fail the
// run and not the evaluation. What cannot be refused runs in tx itself,
// sparing the savepoint's two round trips; any error of it is err, and
// fails the evaluation, as a database error does.
func guarded(ctx context.Context, tx pgx.Tx, refusable bool, fn func(pgx.Tx) error) (refused, err error) {
	if !refusable {
		return nil, fn(tx)
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if err := fn(sp); err != nil {
		_ = sp.Rollback(ctx)
		if refusal(err) {
			return err, nil
		}
		return nil, err
	}
	return nil, sp.Commit(ctx)
}

// RunRetention is how long the run log keeps a finished run (and its
// deliveries).
const RunRetention = 30 * 24 * time.Hour

// insertRunSQL records a run, pending, and deletes up to ten of its
// automation's finished runs older than RunRetention ($9, an id made from
// the cut-off time: run ids are UUIDv7, so it bounds them in the index), so
// that each run recorded clears more than it adds once the log is that old,
// with no sweeper and no unbounded statement.
const insertRunSQL = `
WITH pruned AS (
    DELETE FROM automation_runs WHERE realm_id = $1 AND id = ANY (ARRAY (
        SELECT id FROM automation_runs
        WHERE realm_id = $1 AND automation_id = $3 AND id < $9 AND status <> 'pending'
        ORDER BY id LIMIT 10)))
INSERT INTO automation_runs (realm_id, id, automation_id, event, event_id, row_ids, hop, status, queued_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8)`

// uuidAt is the least UUIDv7 of the millisecond t.
func uuidAt(t time.Time) uuid.UUID {
	var u uuid.UUID
	ms := uint64(t.UnixMilli())
	for i := 0; i < 6; i++ {
		u[i] = byte(ms >> (40 - 8*i))
	}
	u[6] = 0x70
	u[8] = 0x80
	return u
}

// act applies an automation's actions to rows in order: a later action sees
// what an earlier one wrote. Its webhooks' deliveries, with the rows as
// their action saw them, are queued on b for the caller to send; it returns
// how many.
func (s *Service) act(ctx context.Context, tx pgx.Tx, b *pgx.Batch, e *event, t *grid.Table, a *Automation, runID uuid.UUID, rows []grid.Row) (int, error) {
	n := 0
	for i, ac := range a.Actions {
		switch ac.Type {
		case ActionUpdateRow:
			patches := make([]grid.CellPatch, len(rows))
			for j, r := range rows {
				cells, err := resolveCells(ac.Cells, r.Cells)
				if err != nil {
					return 0, err
				}
				patches[j] = grid.CellPatch{ID: r.ID, Cells: cells}
			}
			written, err := grid.PatchRows(ctx, tx, e.realm, t, patches)
			if err != nil {
				return 0, actionError(i, err)
			}
			byID := make(map[uuid.UUID]grid.Row, len(written))
			for _, w := range written {
				byID[w.ID] = w
			}
			for j, r := range rows {
				if w, ok := byID[r.ID]; ok {
					rows[j] = w
				}
			}
			fields := make([]string, 0, len(ac.Cells))
			for id := range ac.Cells {
				fields = append(fields, id)
			}
			if err := s.chain(ctx, tx, e, a, t.ID, grid.EventRowUpdated, written, fields); err != nil {
				return 0, err
			}
		case ActionCreateRow:
			target, err := grid.LoadTable(ctx, tx, e.realm, *ac.Table)
			if err != nil {
				return 0, actionError(i, err)
			}
			cells := make([]map[string]json.RawMessage, len(rows))
			for j, r := range rows {
				if cells[j], err = resolveCells(ac.Cells, r.Cells); err != nil {
					return 0, actionError(i, err)
				}
			}
			written, err := grid.InsertRows(ctx, tx, e.realm, target, cells)
			if err != nil {
				return 0, actionError(i, err)
			}
			if err := s.chain(ctx, tx, e, a, target.ID, grid.EventRowCreated, written, nil); err != nil {
				return 0, err
			}
		case ActionWebhook:
			if ac.Disabled {
				continue
			}
			body, err := webhookBody(e, a, runID, rows)
			if err != nil {
				return 0, err
			}
			// Recorded as claimed by this worker (its first attempt), which
			// sends it as soon as the evaluation commits: no second claim.
			d := delivery{realm: e.realm, id: deliveryID(e.id, a.ID, ac.ID), attempts: 1, url: ac.URL, payload: body,
				queuedAt: e.createdAt, automation: a.ID, action: ac.ID, run: runID}
			k := len(e.direct)
			e.direct = append(e.direct, d)
			b.Queue(`INSERT INTO webhook_deliveries (realm_id, id, automation_id, action_id, run_id, url, payload, queued_at,
				                                 attempts, next_attempt_at)
				 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 1, now() + $9::bigint * interval '1 millisecond')
				 RETURNING (SELECT coalesce(a.secrets ->> $4, '') FROM automations a WHERE a.realm_id = $1 AND a.id = $3)`,
				d.realm, d.id, d.automation, d.action, d.run, d.url, d.payload, d.queuedAt,
				s.deliveryLease().Milliseconds()).QueryRow(func(row pgx.Row) error {
				return row.Scan(&e.direct[k].secret) // e.direct is complete when b is sent
			})
			n++
		}
	}
	return n, nil
}

// actionError names the action an error came from.
func actionError(i int, err error) error {
	var ae *appdor.Error
	if errors.As(err, &ae) {
		return &appdor.Error{Code: ae.Code, Message: fmt.Sprintf("action %d: %s", i, ae.Message), Details: ae.Details}
	}
	return err
}

// chain records the event an action's write causes, one hop further, when
// its table has an automation it fires; past MaxHops the chain stops.
func (s *Service) chain(ctx context.Context, tx pgx.Tx, e *event, a *Automation, table uuid.UUID, kind string, written []grid.Row, fields []string) error {
	if len(written) == 0 {
		return nil
	}
	refs := make([]grid.RowRef, len(written))
	for i, w := range written {
		refs[i] = grid.RowRef{ID: w.ID, Version: w.Version}
	}
	change := grid.Change{Event: kind, Rows: refs, Fields: fields}
	e.written = append(e.written, tableWrite{table, change})
	match, err := s.triggers.matches(ctx, tx, e.realm, table, change)
	if err != nil || !match {
		return err
	}
	if e.hop+1 > s.cfg.MaxHops {
		s.metrics.hopLimit.Inc()
		s.log.Warn("automation_hop_limit: a chain of automations stopped", slog.String("realm", e.realm.String()),
			slog.String("automation", a.ID.String()), slog.Int("hop", e.hop), slog.Int("automation_max_hops", s.cfg.MaxHops))
		return nil
	}
	return s.enqueue(ctx, tx, e.realm, table, change, e.hop+1)
}

// template is a cell value that copies a field of the triggering row.
var template = regexp.MustCompile(`^\{\{\s*([0-9a-fA-F-]{36})\s*\}\}$`)

// templateField returns the field id a cell value copies, or "".
func templateField(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	if m := template.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return ""
}

// resolveCells fills an action's cells from the triggering row's cells: a
// value "{{FIELD_ID}}" copies that field's cell (null when it is empty);
// any other value is taken as is.
func resolveCells(cells map[string]json.RawMessage, src json.RawMessage) (map[string]json.RawMessage, error) {
	var from map[string]json.RawMessage
	if len(src) > 0 {
		if err := json.Unmarshal(src, &from); err != nil {
			return nil, err
		}
	}
	out := make(map[string]json.RawMessage, len(cells))
	for id, v := range cells {
		if f := templateField(v); f != "" {
			if c, ok := from[f]; ok {
				out[id] = c
			} else {
				out[id] = json.RawMessage("null")
			}
			continue
		}
		out[id] = v
	}
	return out, nil
}

// webhookRow is one row of a webhook's payload.
type webhookRow struct {
	ID      uuid.UUID       `json:"id"`
	Version int64           `json:"version"`
	Cells   json.RawMessage `json:"cells,omitempty"`
}

// WebhookPayload is the body of a webhook: the Standard Webhooks envelope
// (type, timestamp, data). Its rows are those the write batch changed and
// the condition kept, with their cells as of the evaluation (a deleted row
// has none).
type WebhookPayload struct {
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      struct {
		AutomationID uuid.UUID    `json:"automation_id"`
		TableID      uuid.UUID    `json:"table_id"`
		RunID        uuid.UUID    `json:"run_id"`
		Hop          int          `json:"hop"`
		Rows         []webhookRow `json:"rows"`
	} `json:"data"`
}

func webhookBody(e *event, a *Automation, runID uuid.UUID, rows []grid.Row) ([]byte, error) {
	p := WebhookPayload{Type: e.kind, Timestamp: e.createdAt.UTC()}
	p.Data.AutomationID, p.Data.TableID, p.Data.RunID, p.Data.Hop = a.ID, e.table, runID, e.hop
	p.Data.Rows = make([]webhookRow, len(rows))
	for i, r := range rows {
		p.Data.Rows[i] = webhookRow{ID: r.ID, Version: r.Version, Cells: r.Cells}
	}
	return json.Marshal(p)
}

// sample reads the queue's depth and oldest pending event per realm into the
// gauges and the backlog estimate, every SampleInterval.
func (s *Service) sample(ctx context.Context) {
	t := time.NewTicker(s.cfg.SampleInterval)
	defer t.Stop()
	for {
		if err := s.sampleOnce(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("automations: sampling the queue", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Service) sampleOnce(ctx context.Context) error {
	// One statement, so the counts and the snapshot are the same snapshot's.
	var snap string
	var realms []uuid.UUID
	var ns []int32
	var ages []float64
	if err := s.wpool.QueryRow(ctx,
		`SELECT pg_current_snapshot()::text, coalesce(array_agg(realm_id), '{}'),
		        coalesce(array_agg(n), '{}'), coalesce(array_agg(age), '{}')
		 FROM (SELECT realm_id, count(*)::int AS n, extract(epoch FROM now() - min(created_at))::float8 AS age
		       FROM automation_events WHERE state = 'pending' GROUP BY realm_id) t`).Scan(&snap, &realms, &ns, &ages); err != nil {
		return err
	}
	parsed, err := parseSnapshot(snap)
	if err != nil {
		return err
	}
	counts := make(map[uuid.UUID]int, len(realms))
	byRealm := make(map[uuid.UUID]float64, len(realms))
	for i, r := range realms {
		counts[r], byRealm[r] = int(ns[i]), ages[i]
	}
	s.backlog.reset(counts, parsed)
	s.metrics.setQueue(counts, byRealm)
	return nil
}

// writes says whether an action of a writes rows: only those can be
// refused (a cell its field refuses, a table gone).
func (a *Automation) writes() bool {
	for _, ac := range a.Actions {
		if ac.Type == ActionUpdateRow || ac.Type == ActionCreateRow {
			return true
		}
	}
	return false
}
