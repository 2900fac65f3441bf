package tenancy

import (
	"context"
	"errors"
	"time"

	"github.com/labstack/echo/v4"

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
type Guard struct {
	Screen  Screen        // nil: no per-address ceiling
	Gate    Gate          // nil: no seat is taken
	Timeout time.Duration // 0 for DefaultLookupTimeout
}

// SetGuard puts g in front of the credential lookups. Call it before the
// service serves requests.
func (s *Service) SetGuard(g Guard) {
	if g.Timeout <= 0 {
		g.Timeout = DefaultLookupTimeout
	}
	s.guard = g
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
