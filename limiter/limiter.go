// Package limiter is Appdor's abuse and quota layer: a GCRA rate limiter whose
// state lives in Redis, so that every replica shares one clock and one count.
// It keeps two ceilings per request, the token's own (when it has one) and its
// realm's, under keys that carry the realm, so that one realm's runaway agent
// can never spend another realm's allowance.
//
// Before a request is authenticated it keeps ceilings of its own, keyed by the
// client's address (lookups of unknown credentials, sign-in attempts) and by
// the account a sign-in names: address.go and login.go.
//
// It owns the 429 middleware and the audit of a refusal episode. It must never
// become the reason the API is down: when Redis does not answer within a short
// timeout, the request is allowed (fail open), counted and logged, and the
// fairness controller, which needs no Redis, still isolates the realms.
// A refusal touches Redis only, never PostgreSQL, and a key Redis refused is
// refused again in the process until its retry time, with no round trip
// (denials.go).
package limiter

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	"github.com/appdor/appdor"
	"github.com/appdor/appdor/rls"
)

// Scope names the ceiling a decision was made against.
type Scope string

const (
	ScopeToken Scope = "token" // the token's own ceiling
	ScopeRealm Scope = "realm" // the realm's API ceiling
)

// Defaults for Config.
const (
	DefaultRealmLimit       = 60000 // requests per minute: 1,000 a second; isolation is the fairness controller's job
	DefaultTimeout          = 100 * time.Millisecond
	DefaultPause            = 500 * time.Millisecond
	DefaultErrorLogInterval = 10 * time.Second
)

// Subject is who a request is charged to.
type Subject struct {
	Realm uuid.UUID
	// Token is the API token, or uuid.Nil for a browser session, which is
	// charged to its realm's ceiling only.
	Token uuid.UUID
	// User is who acts; it names the actor of a session's audit row.
	User uuid.UUID
	// TokenLimit is the token's ceiling per minute; 0 for none.
	TokenLimit int
	// RealmLimit is the realm's ceiling per minute; 0 for the server's default.
	RealmLimit int
}

// Decision is the limiter's answer for one request.
type Decision struct {
	Allowed bool
	Scope   Scope
	// Limit, Remaining and Reset describe the tightest ceiling that applied:
	// for an allowance the one with the fewest requests left, for a refusal
	// the one that refused. Limit is 0 when the limiter could not decide.
	Limit     int
	Remaining int
	Reset     time.Duration // until that ceiling is back to a full burst
	// RetryAfter is how long a refused request should wait.
	RetryAfter time.Duration
	// FirstRefusal is true for the refusal that opened the key's episode,
	// which lasts until the key is whole again (its full burst back).
	FirstRefusal bool
	// Err is why the limiter could not ask Redis; the request is then allowed.
	Err error
}

// Config is what New needs. Client is required.
type Config struct {
	Client rueidis.Client
	// DB, when set, receives the audit row of each refusal episode.
	DB               *rls.DB
	Log              *slog.Logger
	Registerer       prometheus.Registerer
	RealmLimit       int           // default realm ceiling per minute; 0 for DefaultRealmLimit
	Timeout          time.Duration // per Redis call; 0 for DefaultTimeout
	Pause            time.Duration // after a Redis failure, fail open without asking for this long
	ErrorLogInterval time.Duration // at most one "redis unreachable" line (one per outage), and one address episode line, per interval
	// UnauthenticatedPerSecond is how many lookups of unknown credentials a
	// client address may cause a second (AllowAddress); 0 turns it off.
	UnauthenticatedPerSecond int
	// UnauthenticatedBurst is how many may come at once; 0 is twice the rate.
	UnauthenticatedBurst int
	// LoginAddressPerMinute and LoginAccountPerMinute are the ceilings on
	// sign-in attempts per client address and per account (AllowLogin); 0
	// turns one off.
	LoginAddressPerMinute, LoginAccountPerMinute int
}

// Limiter decides requests against the ceilings in Redis.
type Limiter struct {
	client      rueidis.Client
	log         *slog.Logger
	realmLimit  int
	timeout     time.Duration
	pause       time.Duration
	logInterval time.Duration
	audit       *auditor

	decisions *prometheus.CounterVec
	latency   prometheus.Histogram
	// denied remembers refused keys until their retry time; local counts
	// the refusals it answered without Redis.
	denied *denials
	local  prometheus.Counter

	pausedUntil atomic.Int64 // unix ns; Redis is not asked before then
	outage      outage       // Redis unreachable: one WARN when it starts, one INFO when it ends
	// episodeLogs rate-limit the line of a refusal episode of the ceilings
	// that have no realm (and no audit row), per scope.
	episodeLogs map[Scope]*appdor.EveryInterval

	// unauthPerSecond and unauthBurst are the unauthenticated ceiling (0:
	// off); unauthArgs its script arguments.
	unauthPerSecond, unauthBurst int
	unauthArgs                   [2]string

	// loginAddress and loginAccount are the sign-in ceilings per minute (0:
	// off).
	loginAddress, loginAccount int

	// now, when set (tests only), replaces Redis TIME with a fake clock in µs.
	now func() int64
}

// New returns a Limiter and registers its metrics. Call Close when done.
func New(cfg Config) *Limiter {
	l := &Limiter{
		client:      cfg.Client,
		log:         cfg.Log,
		realmLimit:  cfg.RealmLimit,
		timeout:     cfg.Timeout,
		pause:       cfg.Pause,
		logInterval: cfg.ErrorLogInterval,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "appdor_limiter_decisions_total",
			Help: "Rate limiter decisions by realm, by the ceiling that decided (token or realm), and by result: allowed, refused, or error (Redis unreachable; allowed).",
		}, []string{"realm", "scope", "result"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "appdor_limiter_redis_seconds",
			Help:    "Latency of the limiter's Redis call (one script run per decision), failures included.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}),
		denied: newDenials(),
		local: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "appdor_limiter_local_refusals_total",
			Help: "Refusals answered in this process, without Redis, because Redis refused the same key earlier and its retry time has not come (also counted in appdor_limiter_decisions_total).",
		}),
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if l.realmLimit <= 0 {
		l.realmLimit = DefaultRealmLimit
	}
	if l.timeout <= 0 {
		l.timeout = DefaultTimeout
	}
	if l.pause <= 0 {
		l.pause = DefaultPause
	}
	if l.logInterval <= 0 {
		l.logInterval = DefaultErrorLogInterval
	}
	l.outage.interval = int64(l.logInterval)
	l.episodeLogs = map[Scope]*appdor.EveryInterval{}
	for _, s := range []Scope{ScopeUnauthenticated, ScopeLoginAddress, ScopeLoginAccount} {
		l.episodeLogs[s] = &appdor.EveryInterval{Interval: l.logInterval}
	}
	l.loginAddress, l.loginAccount = max(cfg.LoginAddressPerMinute, 0), max(cfg.LoginAccountPerMinute, 0)
	if cfg.UnauthenticatedPerSecond > 0 {
		l.unauthPerSecond = cfg.UnauthenticatedPerSecond
		l.unauthBurst = cfg.UnauthenticatedBurst
		if l.unauthBurst <= 0 {
			l.unauthBurst = 2 * l.unauthPerSecond
		}
		l.unauthArgs = unauthenticatedOf(l.unauthPerSecond, l.unauthBurst)
	}
	l.audit = newAuditor(cfg.DB, l.log)
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(l.decisions, l.latency, l.local, l.audit.failures)
	}
	return l
}

// Close stops the audit writer after the rows already queued.
func (l *Limiter) Close() { l.audit.close() }

// Flush waits until every audit row queued so far is written (or dropped).
func (l *Limiter) Flush(ctx context.Context) error { return l.audit.flush(ctx) }

// RealmLimit is the default realm ceiling per minute.
func (l *Limiter) RealmLimit() int { return l.realmLimit }

// TokenKey and RealmKey name the quota keys. The realm is the hash tag, so a
// request's two keys share a Redis Cluster slot and one script may touch both.
func TokenKey(realm, token uuid.UUID) string {
	return "appdor:quota:{" + realm.String() + "}:" + token.String()
}

// RealmKey names a realm's own quota key.
func RealmKey(realm uuid.UUID) string { return "appdor:quota:{" + realm.String() + "}" }

// keyPrefix is what every quota key starts with.
const keyPrefix = "appdor:quota:{"

// keys returns RealmKey(realm), the realm's text (for the metric label) and,
// when token is set, TokenKey(realm, token): one buffer, three slices of it,
// so a decision does not pay an allocation per uuid.
func keys(realm, token uuid.UUID) (realmKey, realmText, tokenKey string) {
	const u = 36
	n := len(keyPrefix) + u + 1
	if token != uuid.Nil {
		n += 1 + u
	}
	b := make([]byte, 0, n)
	b = append(b, keyPrefix...)
	b = appendUUID(b, realm)
	b = append(b, '}')
	if token != uuid.Nil {
		b = append(b, ':')
		b = appendUUID(b, token)
	}
	all := string(b)
	realmKey = all[:len(keyPrefix)+u+1]
	realmText = all[len(keyPrefix) : len(keyPrefix)+u]
	if token != uuid.Nil {
		tokenKey = all
	}
	return realmKey, realmText, tokenKey
}

// appendUUID appends id in its canonical text form, as uuid.UUID.String.
func appendUUID(b []byte, id uuid.UUID) []byte {
	const hex = "0123456789abcdef"
	for i, c := range id {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hex[c>>4], hex[c&0xf])
	}
	return b
}

// rateArgs are the script's arguments for a ceiling, made once per limit.
var rateArgs sync.Map // int → [2]string{emission µs, burst}

func argsOf(limit int) [2]string {
	if v, ok := rateArgs.Load(limit); ok {
		return v.([2]string)
	}
	r := rateOf(limit)
	a := [2]string{strconv.FormatInt(r.emission, 10), strconv.FormatInt(r.burst, 10)}
	rateArgs.Store(limit, a)
	return a
}

// errPaused is the error of a decision taken while Redis is left alone after
// a failure.
var errPaused = errors.New("limiter: redis failed recently; not asked")

// Allow decides one request of s: one Redis round trip, or none while paused
// after a failure. It never fails: when Redis cannot answer, the request is
// allowed and Decision.Err says why.
func (l *Limiter) Allow(ctx context.Context, s Subject) Decision {
	var (
		ks     [2]string
		args   [5]string
		scopes [2]Scope
		limits [2]int
		n      int
	)
	token := uuid.Nil
	if s.TokenLimit > 0 {
		token = s.Token
	}
	realmKey, realm, tokenKey := keys(s.Realm, token)
	if tokenKey != "" {
		ks[n], scopes[n], limits[n] = tokenKey, ScopeToken, s.TokenLimit
		n++
	}
	realmLimit := s.RealmLimit
	if realmLimit <= 0 {
		realmLimit = l.realmLimit
	}
	ks[n], scopes[n], limits[n] = realmKey, ScopeRealm, realmLimit
	n++
	for i := range n {
		a := argsOf(limits[i])
		args[2*i], args[2*i+1] = a[0], a[1]
	}
	if l.now != nil {
		args[2*n] = strconv.FormatInt(l.now(), 10)
	}

	d, ok := l.decide(ctx, realm, ks[:n], args[:2*n+1], scopes[:n], limits[:n])
	if !ok || d.Allowed {
		return d
	}
	if d.FirstRefusal {
		l.audit.enqueue(refusal{realm: s.Realm, token: s.Token, user: s.User, scope: d.Scope, limit: d.Limit})
	}
	return d
}

// decide runs the script on keys, whose scopes and ceilings follow them, and
// counts the decision under realm (the label; "" for an address). ok is false
// when Redis could not decide and the request is allowed anyway.
func (l *Limiter) decide(ctx context.Context, realm string, keys, args []string, scopes []Scope, limits []int) (d Decision, ok bool) {
	now := l.clock()
	if d, ok := l.denied.check(keys, args, scopes, limits, now); ok {
		l.local.Inc()
		l.decisions.WithLabelValues(realm, string(d.Scope), "refused").Inc()
		return d, true
	}
	if until := l.pausedUntil.Load(); until != 0 && time.Now().UnixNano() < until {
		return l.failOpen(realm, scopes[0], errPaused, false), false
	}
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	start := time.Now()
	vals, err := gcraScript.Exec(cctx, l.client, keys, args).AsIntSlice()
	l.latency.Observe(time.Since(start).Seconds())
	cancel()
	if err == nil && (len(vals) != 6 || vals[1] < 1 || vals[1] > int64(len(keys))) {
		err = errors.New("limiter: unexpected script reply")
	}
	if err != nil && ctx.Err() != nil {
		// The request's client went away: that says nothing about Redis, so
		// it is no outage (no WARN that Redis is unreachable, no error
		// counted), and the request has nobody left to answer.
		return Decision{Allowed: true, Scope: scopes[0], Err: ctx.Err()}, false
	}
	if err != nil {
		// Only a failed connection pauses the asking. A timeout may be this
		// process's own CPU under a storm: pausing then would switch the
		// limiter off exactly when it is needed. A timeout costs its request
		// the timeout, no more.
		paused := !errors.Is(err, context.DeadlineExceeded)
		return l.failOpen(realm, scopes[0], err, paused), false
	}
	l.reachable()

	i := vals[1] - 1
	d = Decision{
		Allowed:      vals[0] == 1,
		Scope:        scopes[i],
		Limit:        limits[i],
		Remaining:    int(vals[3]),
		RetryAfter:   time.Duration(vals[2]) * time.Microsecond,
		Reset:        time.Duration(vals[4]) * time.Microsecond,
		FirstRefusal: vals[5] == 1,
	}
	result := "refused"
	if d.Allowed {
		result = "allowed"
	} else {
		// From the time of the answer: Redis's clock read the key between
		// now and then, so a retry counted from then is never short.
		then := l.clock()
		l.denied.add(keys[i], args[2*i], args[2*i+1], then+vals[2], then+vals[4], then)
	}
	l.decisions.WithLabelValues(realm, string(d.Scope), result).Inc()
	return d, true
}

// clock is the time in µs on which remembered refusals are kept: the
// tests' fake clock when set (the one the script is given), the process's
// otherwise. Only durations from Redis are added to it, so Redis's clock
// need not agree with it.
func (l *Limiter) clock() int64 {
	if l.now != nil {
		return l.now()
	}
	return time.Now().UnixMicro()
}

// failOpen allows a request the limiter could not decide, counts it, and
// (pause: the connection to Redis failed) leaves Redis alone for a moment, so
// that a Redis that is gone costs requests nothing while rueidis reconnects on
// the next call. The outage is logged once, not once per request.
func (l *Limiter) failOpen(realm string, scope Scope, err error, pause bool) Decision {
	l.decisions.WithLabelValues(realm, string(scope), "error").Inc()
	l.outage.failed.Add(1)
	if pause {
		l.pausedUntil.Store(time.Now().UnixNano() + int64(l.pause))
	}
	l.unreachable(err)
	return Decision{Allowed: true, Scope: scope, Err: err}
}

// Ping asks Redis whether it answers within ctx, and logs an outage's start
// or end as the limiter's own calls do. The server calls it at start and from
// its readiness check, so an outage is logged even when no request comes.
func (l *Limiter) Ping(ctx context.Context) error {
	err := l.client.Do(ctx, l.client.B().Ping().Build()).Error()
	if err != nil {
		l.unreachable(err)
		return err
	}
	l.reachable()
	return nil
}

// outage tracks one period of Redis not answering: its start is logged once
// (WARN), its end once (INFO, with the decisions it failed open), and a
// Redis that flaps logs a new start at most once per interval.
type outage struct {
	interval int64        // ns between two logged starts
	down     atomic.Bool  // the last call failed
	warned   atomic.Bool  // this outage's start was logged; its end will be
	lastWarn atomic.Int64 // unix ns of the last start logged
	failed   atomic.Int64 // decisions failed open during this outage
}

// unreachable notes a failed call; the first of an outage logs it.
func (l *Limiter) unreachable(err error) {
	if errors.Is(err, errPaused) || !l.outage.down.CompareAndSwap(false, true) {
		return
	}
	now := time.Now().UnixNano()
	last := l.outage.lastWarn.Load()
	if now-last < l.outage.interval || !l.outage.lastWarn.CompareAndSwap(last, now) {
		return
	}
	l.outage.warned.Store(true)
	l.log.Warn("limiter: redis unreachable; allowing requests unlimited",
		slog.String("error", err.Error()))
}

// reachable ends an outage, logging its end when its start was logged.
func (l *Limiter) reachable() {
	if !l.outage.down.CompareAndSwap(true, false) {
		return
	}
	n := l.outage.failed.Swap(0)
	if l.outage.warned.Swap(false) {
		l.log.Info("limiter: redis answers again; deciding requests", slog.Int64("failed_decisions", n))
	}
}
