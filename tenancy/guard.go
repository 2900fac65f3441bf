package tenancy

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/appdor/appdor"
)

// Gate takes a seat for a credential lookup the server cannot answer from
// memory, and is refused (429 concurrency_limited) when none frees in time;
// release gives the seat back. The server wires it to the fairness
// controller's unauthenticated flow.
type Gate func(ctx context.Context) (release func(), err error)

// Screen decides, before any database work, whether the client at addr may
// have a credential looked up that the server does not know; its error is the
// answer (429 rate_limited). The server wires it to the rate limiter's
// per-address ceiling.
type Screen func(ctx context.Context, addr string) error

// DefaultLookupTimeout bounds a credential lookup: the wait for a seat, for a
// pool connection and for the statement together. A lookup is one indexed
// row; a second is a database in trouble, and the request is better answered
// 503 than left holding a connection.
const DefaultLookupTimeout = time.Second

// Guard is what stands between a credential nobody knows and PostgreSQL:
// every request with such a credential passes Screen (per client address),
// then its lookup runs under a seat of Gate, within Timeout. Requests whose
// credential is known — answered from the token cache, or authenticated
// lately — pass neither Screen nor Gate; credentials found unknown are
// answered 401 from memory for UnknownCredentialTTL.
//
// A known credential whose cache entry expired is looked up again without the
// Gate, but only Relookups at a time. Both bounds refuse with 503 unavailable,
// and each has a flag, a metric and a log line of its name: lookup_timeout
// (the lookup took longer than Timeout) and relookup_concurrency (no slot for
// a known credential's lookup freed within Timeout).
type Guard struct {
	Screen    Screen        // nil: no per-address ceiling
	Gate      Gate          // nil: no seat is taken
	Timeout   time.Duration // 0 for DefaultLookupTimeout
	Relookups int           // 0 for half the cores (at least one)

	// Log and Registerer receive the lookup_timeout and relookup_concurrency
	// refusals; nil for none.
	Log        *slog.Logger
	Registerer prometheus.Registerer
}

// guardBound counts and logs the refusals of one of the guard's bounds, by
// the bound's name: the metric appdor_<name>_refused_total, and a WARN line
// beginning <name>: at most every ten seconds, with the refusals it stands for.
type guardBound struct {
	name    string
	message string
	total   prometheus.Counter
	every   appdor.EveryInterval
	log     *slog.Logger
}

func newGuardBound(log *slog.Logger, name, message, help string) *guardBound {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &guardBound{name: name, message: message, log: log, every: appdor.EveryInterval{Interval: 10 * time.Second},
		total: prometheus.NewCounter(prometheus.CounterOpts{Name: "appdor_" + name + "_refused_total", Help: help})}
}

// refuse counts a refusal; setting is the bound's value, for the log line.
func (b *guardBound) refuse(setting slog.Attr) {
	b.total.Inc()
	if ok, n := b.every.Take(time.Now()); ok {
		b.log.Warn(b.name+": "+b.message, slog.Int64("refused", n), setting)
	}
}

// guardRefusals are the guard's two bounds.
type guardRefusals struct{ timeouts, relookups *guardBound }

func newGuardRefusals(g Guard) *guardRefusals {
	r := &guardRefusals{
		timeouts: newGuardBound(g.Log, "lookup_timeout", "credential lookups took too long and were answered 503",
			"Credential lookups answered 503 because they took longer than lookup_timeout (seat, pool connection and statement together)."),
		relookups: newGuardBound(g.Log, "relookup_concurrency", "lookups of known credentials found no slot in time and were answered 503",
			"Lookups of known credentials whose cache entry expired answered 503 because no relookup_concurrency slot freed within lookup_timeout."),
	}
	if g.Registerer != nil {
		g.Registerer.MustRegister(r.timeouts.total, r.relookups.total)
	}
	return r
}

// defaultRelookups is the relookup slots of a Guard that names none.
func defaultRelookups() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// SetGuard puts g in front of the credential lookups. Call it once, before
// the service serves requests.
func (s *Service) SetGuard(g Guard) {
	if g.Timeout <= 0 {
		g.Timeout = DefaultLookupTimeout
	}
	if g.Relookups <= 0 {
		g.Relookups = defaultRelookups()
	}
	s.guard = g
	s.relookups = make(chan struct{}, g.Relookups)
	s.refusals = newGuardRefusals(g)
}

// clientKey carries a request's client address in its context, from the
// authentication middleware to the lookups.
type clientKey struct{}

// withClient marks ctx as a request from the client at addr: its lookups of
// unknown credentials are screened by that address. A lookup without one
// (commands, tests) has no client to screen.
func withClient(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, clientKey{}, addr)
}

// withClientOf is withClient for an Echo request, whose client address is
// what the server's IP extractor says (the direct peer unless a trusted
// proxy names another).
func withClientOf(c echo.Context) context.Context {
	return withClient(c.Request().Context(), c.RealIP())
}

// guarded runs query, the lookup of the credential with hash, unless the
// credential is known to be unknown, when it answers unknownErr at once. A
// credential not known lately is first screened by the client's address
// (before any database work: a lookup, not a request, is charged, so the
// clients of one new token that share its lookup pay once), then looked up
// under a seat of the Gate. The whole takes at most the guard's timeout.
// What query finds is remembered: nil marks the credential known, unknownErr
// unknown.
func (s *Service) guarded(ctx context.Context, hash [32]byte, unknownErr error, query func(context.Context) error) error {
	if s.unknown.has(hash) {
		return unknownErr
	}
	known := s.known.has(hash)
	if addr, ok := ctx.Value(clientKey{}).(string); ok && !known && s.guard.Screen != nil {
		if err := s.guard.Screen(ctx, addr); err != nil {
			return err
		}
	}
	timeout := s.guard.Timeout
	if timeout <= 0 {
		timeout = DefaultLookupTimeout
	}
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case s.guard.Gate != nil && !known:
		release, err := s.guard.Gate(lctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return gateRefusal(err)
		}
		defer release()
	case known:
		// A known credential whose cache entry expired is looked up again
		// without the Gate (a flood of unknown ones must not refuse it), a
		// few at a time: sixteen storm realms back from idle looked theirs
		// up at once, took the pool's spare connections, and the quiet
		// realm beside them measured 30-37 ms for a 4 ms read.
		select {
		case s.relookups <- struct{}{}:
			defer func() { <-s.relookups }()
		case <-lctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.refusals.relookups.refuse(slog.Int("relookup_concurrency", cap(s.relookups)))
			return errLookupTimeout
		}
	}
	err := query(lctx)
	switch {
	case err == nil:
		s.known.add(hash)
	case errors.Is(err, unknownErr):
		s.known.remove(hash)
		s.unknown.add(hash)
	case lctx.Err() != nil && ctx.Err() == nil:
		s.refusals.timeouts.refuse(slog.Duration("lookup_timeout", timeout))
		return errLookupTimeout
	}
	return err
}

var errLookupTimeout = &appdor.Error{Code: appdor.EUnavailable,
	Message: "looking the credential up took too long; retry shortly", RetryAfter: time.Second}

// gateRefusal is the error of a Gate that found no seat: the gate's own coded
// error (concurrency_limited with its Retry-After), or one made alike.
func gateRefusal(err error) error {
	var ae *appdor.Error
	if errors.As(err, &ae) {
		return ae
	}
	return &appdor.Error{Code: appdor.EConcurrencyLimited,
		Message: "too many unknown credentials are being looked up; retry after Retry-After", RetryAfter: time.Second}
}
