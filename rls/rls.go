// Package rls is the only door to tenant data. It runs work inside a
// PostgreSQL transaction scoped to one realm: the role switches to
// appdor_tenant (NOBYPASSRLS, owns nothing), the realm is set for that
// transaction only, and statement_timeout bounds every statement. Row-level
// security policies then hide every other realm's rows, whatever the SQL says.
//
// The setup never costs a round trip of its own: a single-statement read sends
// it in one pgx batch with the query (a batch is one implicit transaction), and
// an explicit transaction sends it with BEGIN, and BEGIN with the
// transaction's first batch when its caller has one (TxBatch).
//
// The serving login role is not the schema's owner and cannot bypass RLS
// (README, "PostgreSQL roles"); outside a tenant transaction it reads only
// what authentication needs, named by the keys of Lookup.
//
// rls must never hand out a connection that is not scoped to a realm, and never
// let a setting outlive its transaction.
package rls

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/appdor/appdor"
)

// TenantRole is the role every tenant transaction runs as.
const TenantRole = "appdor_tenant"

// Defaults for DB's time bounds.
const (
	DefaultStatementTimeout = 5 * time.Second
	DefaultAcquireTimeout   = 500 * time.Millisecond
)

// DB runs realm-scoped work on a pool.
type DB struct {
	pool           *pgxpool.Pool
	acquireTimeout time.Duration
	setup          string // the setup statement's SQL, with the role and statement_timeout baked in
	lookupSetup    string // Lookup's setup: the keys and statement_timeout, no role
}

// New returns a DB over pool. Zero durations take the defaults.
func New(pool *pgxpool.Pool, statementTimeout, acquireTimeout time.Duration) *DB {
	if statementTimeout <= 0 {
		statementTimeout = DefaultStatementTimeout
	}
	if acquireTimeout <= 0 {
		acquireTimeout = DefaultAcquireTimeout
	}
	ms := strconv.FormatInt(statementTimeout.Milliseconds(), 10)
	return &DB{
		pool:           pool,
		acquireTimeout: acquireTimeout,
		// set_config('role', …, true) is SET LOCAL ROLE (the same setting,
		// with the same membership check), but as a function it rides in
		// the one setup statement, and it does not draw the warning "SET
		// LOCAL can only be used in transaction blocks" that PostgreSQL sends
		// (and logs) for a SET LOCAL opening an implicit transaction: that
		// was one server log line and one notice to decode every read.
		setup: "SELECT set_config('role', '" + TenantRole + "', true), set_config('appdor.realm_id', $1, true), " +
			"set_config('statement_timeout', '" + ms + "', true)",
		lookupSetup: "SELECT set_config('appdor.token_hash', $1, true), set_config('appdor.session_hash', $2, true), " +
			"set_config('appdor.user_id', $3, true), set_config('appdor.email', $4, true), " +
			"set_config('statement_timeout', '" + ms + "', true)",
	}
}

// Pool returns the underlying pool, for health checks and metrics.
func (db *DB) Pool() *pgxpool.Pool { return db.pool }

// acquire takes a connection with a short deadline. A pool that cannot give one
// in time answers unavailable: refusing in a moment beats a request hanging.
func (db *DB) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	actx, cancel := context.WithTimeout(ctx, db.acquireTimeout)
	defer cancel()
	conn, err := db.pool.Acquire(actx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &appdor.Error{
			Code:       appdor.EUnavailable,
			Message:    "the database is busy; retry shortly",
			RetryAfter: time.Second,
		}
	}
	return conn, nil
}

// Query runs one statement as realm, in one round trip with the setup, and
// hands its rows to scan. Use it for reads that need a single statement.
func (db *DB) Query(ctx context.Context, realm uuid.UUID, scan func(pgx.Rows) error, sql string, args ...any) error {
	if realm == uuid.Nil {
		return errors.New("rls: no realm")
	}
	return db.batch(ctx, db.setup, []any{realm.String()}, scan, sql, args)
}

// Keys name the rows the serving role may touch outside a tenant transaction:
// what authentication needs before it knows the realm (the appdor_server_*
// policies of migration 0003). With no key set, those policies match nothing.
type Keys struct {
	TokenHash   []byte    // a token, its membership, realm and ceiling, by the SHA-256 of its secret
	SessionHash []byte    // a session, its person's memberships and their realms, by the SHA-256 of its secret
	User        uuid.UUID // a person, their memberships and realms, and their sessions while signing in, by id
	Email       string    // a person, by email (any case)
}

// Lookup runs one statement as the serving role itself (not as a realm), with
// keys set for that statement only, in one round trip, and hands its rows to
// scan. It is for authentication: its reads, and starting and ending a
// session; anything that acts within a realm goes through Query or Tx.
func (db *DB) Lookup(ctx context.Context, keys Keys, scan func(pgx.Rows) error, sql string, args ...any) error {
	user := ""
	if keys.User != uuid.Nil {
		user = keys.User.String()
	}
	return db.batch(ctx, db.lookupSetup,
		[]any{hex.EncodeToString(keys.TokenHash), hex.EncodeToString(keys.SessionHash), user, keys.Email}, scan, sql, args)
}

// batch sends setup and the statement in one pgx batch: one implicit
// transaction, so the setup's settings hold for the statement and end with it.
func (db *DB) batch(ctx context.Context, setup string, setupArgs []any, scan func(pgx.Rows) error, sql string, args []any) error {
	conn, err := db.acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()

	b := &pgx.Batch{}
	b.Queue(setup, setupArgs...)
	b.Queue(sql, args...)
	br := conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return Interpret(err)
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return Interpret(err)
	}
	serr := scan(rows)
	rows.Close()
	if serr == nil {
		serr = rows.Err()
	}
	cerr := br.Close()
	if serr != nil {
		return Interpret(serr)
	}
	return Interpret(cerr)
}

// Tx runs fn in a transaction as realm. BEGIN and the setup travel in one
// round trip; fn's first statement is the next. The transaction commits when
// fn returns nil and rolls back otherwise (and on panic).
func (db *DB) Tx(ctx context.Context, realm uuid.UUID, fn func(pgx.Tx) error) error {
	return db.TxBatch(ctx, realm, nil, func(tx pgx.Tx) (*pgx.Batch, error) { return nil, fn(tx) })
}

// TxBatch is Tx in fewer round trips: first, if not nil, travels with BEGIN
// and the setup, and the batch fn returns, if not nil, with COMMIT, so a
// transaction of two batches costs two round trips, not four; with fn nil,
// COMMIT travels with first, and the transaction is one round trip.
// first's callbacks have run when fn is called. The last batch's callbacks
// run after the server has been sent COMMIT: they read results, and an
// error one returns is returned although the transaction may have
// committed.
func (db *DB) TxBatch(ctx context.Context, realm uuid.UUID, first *pgx.Batch, fn func(pgx.Tx) (*pgx.Batch, error)) (err error) {
	if realm == uuid.Nil {
		return errors.New("rls: no realm")
	}
	conn, err := db.acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()

	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(db.setup, realm.String())
	if first != nil {
		b.QueuedQueries = append(b.QueuedQueries, first.QueuedQueries...)
	}
	var tag pgconn.CommandTag
	commit := func(b *pgx.Batch) {
		b.Queue("COMMIT").Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
	}
	if fn == nil {
		commit(b)
	}
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			panic(p)
		}
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx)) // ErrTxClosed if BEGIN never ran
		}
	}()
	if err = br.Close(); err != nil {
		return Interpret(err)
	}
	if fn == nil {
		return committed(tag)
	}
	last, err := fn(tx)
	if err != nil {
		return Interpret(err)
	}
	if last == nil || last.Len() == 0 {
		return Interpret(tx.Commit(ctx))
	}
	commit(last)
	if err = tx.SendBatch(ctx, last).Close(); err != nil {
		return Interpret(err)
	}
	return committed(tag)
}

// committed is nil if tag is a COMMIT's, and pgx.ErrTxCommitRollback if the
// transaction rolled back instead.
func committed(tag pgconn.CommandTag) error {
	if tag.String() != "COMMIT" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// Interpret turns driver errors into Appdor's coded errors, so no caller needs
// to import pgx to understand one. Coded errors pass through unchanged; nil
// stays nil.
func Interpret(err error) error {
	if err == nil {
		return nil
	}
	var ae *appdor.Error
	if errors.As(err, &ae) {
		return err
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return appdor.Errorf(appdor.ENotFound, "not found")
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505": // unique_violation
			return &appdor.Error{Code: appdor.EConflict, Message: "already exists", Details: map[string]string{"constraint": pgErr.ConstraintName}}
		case "23503": // foreign_key_violation: a reference to something this realm cannot see
			return appdor.Errorf(appdor.ENotFound, "a referenced object was not found")
		case "23514", "22P02", "22003", "22007", "22008": // check, text representation, range, datetime
			return appdor.Errorf(appdor.EValidation, "invalid value")
		case "22P05", "22021", "22001", "22026": // untranslatable character (NUL), not UTF-8, too long
			// appdor.Text keeps such text out before it reaches SQL; this
			// is the backstop, so a miss is a 422 and not a 500.
			return appdor.Errorf(appdor.EValidation, "the text holds characters the database cannot store (such as NUL or invalid UTF-8), or is too long")
		case "57014": // query_canceled: statement_timeout
			return &appdor.Error{Code: appdor.EUnavailable, Message: "the query took too long", RetryAfter: time.Second}
		case "40001", "40P01": // serialization failure, deadlock
			return &appdor.Error{Code: appdor.EConflict, Message: "concurrent change; retry", RetryAfter: time.Second}
		}
	}
	return fmt.Errorf("database: %w", err)
}
