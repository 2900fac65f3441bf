package limiter

import (
	"context"
	"log/slog"
	"net/netip"
	"strconv"
	"time"

	"github.com/appdor/appdor"
)

// ScopeUnauthenticated is the ceiling on lookups of credentials the server
// does not know yet, per client address: the work a request can cause before
// it is authenticated. A request whose credential is known (cached after its
// first lookup) is never charged to it.
const ScopeUnauthenticated Scope = "unauthenticated"

// Defaults of the unauthenticated ceiling. A legitimate client costs one
// lookup for a credential new to the server, then none while it keeps using
// it (credentials that authenticated lately are not charged, and sessions
// and tokens made here are known from the start): five scripts with new
// tokens starting at once behind one address fit in the burst, then two new
// credentials a second (the others are told to retry within a second). A client sending made-up credentials gains nothing at
// any rate (a secret has 256 random bits); the ceiling exists so that one
// address can make PostgreSQL look up at most this many unknown credentials.
// Measured with 500 bogus requests a second for 6 s (the storm harness's
// unauth arm, ≤ 1 per 100): 5.3 lookups per 100 at 20 a second with a burst
// of 40, 1.1–1.2 at 2 and 20, 0.77–0.86 at 2 and 10.
const (
	DefaultUnauthenticatedPerSecond = 2
	DefaultUnauthenticatedBurst     = 5
)

// UnauthenticatedFlag names the setting of the unauthenticated ceiling in
// the log line of its refusals, as the command line spells it.
const UnauthenticatedFlag = "unauthenticated-requests-per-second"

// addrPrefix starts every per-address quota key; the address is the hash tag.
const addrPrefix = "appdor:quota:addr:{"

// AddressKey names the unauthenticated quota key of a client address. An
// IPv6 client is keyed by its /64, the block one subscriber is given: keyed
// by the whole address, one client would have 2^64 allowances. An address
// that does not parse is keyed as given.
func AddressKey(addr string) string { return addrPrefix + addressOf(addr) + "}" }

func addressOf(addr string) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, err := ip.Prefix(64)
		if err == nil {
			return p.String()
		}
	}
	return ip.String()
}

// unauthenticatedOf is the script's arguments for a ceiling of perSecond
// lookups a second with burst: GCRA with an emission interval of a second
// divided by perSecond.
func unauthenticatedOf(perSecond, burst int) [2]string {
	e := max(time.Second.Microseconds()/int64(perSecond), 1)
	return [2]string{strconv.FormatInt(e, 10), strconv.Itoa(burst)}
}

// UnauthenticatedLimit is the unauthenticated ceiling per second and its
// burst; 0, 0 when it is off.
func (l *Limiter) UnauthenticatedLimit() (perSecond, burst int) {
	return l.unauthPerSecond, l.unauthBurst
}

// AllowAddress decides one lookup of an unknown credential for the client at
// addr against the unauthenticated ceiling: one Redis round trip, the same
// script and the same fail-open rule as Allow. With the ceiling off it allows
// without asking. The first refusal of an episode is logged with the address
// (never the credential); the metric has no address label.
func (l *Limiter) AllowAddress(ctx context.Context, addr string) Decision {
	if l.unauthPerSecond <= 0 {
		return Decision{Allowed: true, Scope: ScopeUnauthenticated}
	}
	key := AddressKey(addr)
	d, ok := l.decideOne(ctx, key, ScopeUnauthenticated, l.unauthPerSecond, l.unauthArgs)
	if !ok || d.Allowed {
		return d
	}
	if d.FirstRefusal {
		l.logEpisode(refusal{scope: ScopeUnauthenticated, limit: l.unauthPerSecond,
			address: key[len(addrPrefix) : len(key)-1]})
	}
	return d
}

// ScreenAddress is AllowAddress as an error: nil when allowed, else the
// rate_limited error the server's error handler answers with (429,
// Retry-After).
func (l *Limiter) ScreenAddress(ctx context.Context, addr string) error {
	d := l.AllowAddress(ctx, addr)
	if d.Allowed {
		return nil
	}
	return refusalError(d)
}

// refusalError is the coded error of a refused decision.
func refusalError(d Decision) *appdor.Error {
	return &appdor.Error{Code: appdor.ERateLimited, Message: refusalMessage[d.Scope], RetryAfter: d.RetryAfter}
}

// decideOne decides one request against one key with no realm (the label
// is "") under scope: the script's arguments rate for a ceiling of limit,
// and the fake clock of tests.
func (l *Limiter) decideOne(ctx context.Context, key string, scope Scope, limit int, rate [2]string) (Decision, bool) {
	args := [3]string{rate[0], rate[1]}
	if l.now != nil {
		args[2] = strconv.FormatInt(l.now(), 10)
	}
	return l.decide(ctx, "", []string{key}, args[:], []Scope{scope}, []int{limit})
}

// flagOf names the setting of a ceiling with no realm, as the command line
// spells it, for the log line of its refusal episodes.
var flagOf = map[Scope]string{
	ScopeUnauthenticated: UnauthenticatedFlag,
	ScopeLoginAddress:    LoginAddressFlag,
	ScopeLoginAccount:    LoginAccountFlag,
}

// logEpisode writes the line of a refusal episode of a ceiling with no realm
// (an address's, an account's), at most once per interval and scope with the
// number of episodes it stands for: an address hammering with made-up
// credentials opens an episode each time its key is whole again, and many
// addresses would otherwise choose how much the server logs. The address and
// the account's key are logged, never a credential.
func (l *Limiter) logEpisode(r refusal) {
	ok, n := l.episodeLogs[r.scope].Take(time.Now())
	if !ok {
		return
	}
	attrs := []any{slog.String("scope", string(r.scope)), slog.String("address", r.address)}
	if r.account != "" {
		attrs = append(attrs, slog.String("account_key", r.account))
	}
	attrs = append(attrs, slog.Int("limit", r.limit), slog.Int64("episodes", n), slog.String("flag", flagOf[r.scope]),
		slog.Duration("log_interval", l.logInterval))
	l.log.Warn(episodeMessage, attrs...)
}
