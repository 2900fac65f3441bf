package tenancy

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
)

// DefaultTokenCacheTTL bounds how long a cached token answer lives even when
// no notification arrives: the backstop behind LISTEN/NOTIFY (a realm's own
// ceiling, or a member's role, changes without one).
const DefaultTokenCacheTTL = 10 * time.Second

// maxCachedTokens bounds the cache; past it the cache starts over.
const maxCachedTokens = 100_000

// tokenCache keeps LookupToken's answers in process, keyed by the secret's
// SHA-256 (never the secret), so that a request the rate limiter refuses costs
// no PostgreSQL work. Every replica LISTENs on TokenChannel and drops a token
// when it is revoked or its limit changes; while that connection is down the
// cache is not used at all, since a notification may have been missed.
type tokenCache struct {
	ttl       time.Duration
	log       *slog.Logger
	listening atomic.Bool
	// gen counts invalidations: an answer read from PostgreSQL before one is
	// not stored after it, so a lookup racing a revoke cannot resurrect it.
	gen atomic.Uint64

	mu     sync.RWMutex
	byHash map[[32]byte]cachedToken
	byID   map[uuid.UUID][32]byte

	// refreshing holds the tokens being looked up ahead of their answer's
	// end, so that the requests meanwhile start nothing more.
	refreshMu  sync.Mutex
	refreshing map[[32]byte]struct{}
}

type cachedToken struct {
	p       Principal
	expires int64 // unix ns
}

func (s *Service) tokenCache() *tokenCache { return s.cache.Load() }

// StartTokenCache turns on the in-process token cache with entries living at
// most ttl (DefaultTokenCacheTTL when 0), and starts listening on
// TokenChannel on a connection of its own. It waits up to five seconds for
// the first LISTEN, then keeps reconnecting in the background; the cache is
// used only while the listener is connected. stop ends it.
func (s *Service) StartTokenCache(ctx context.Context, ttl time.Duration, log *slog.Logger) (stop func()) {
	if ttl <= 0 {
		ttl = DefaultTokenCacheTTL
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &tokenCache{ttl: ttl, log: log, byHash: map[[32]byte]cachedToken{}, byID: map[uuid.UUID][32]byte{},
		refreshing: map[[32]byte]struct{}{}}
	s.cache.Store(c)
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.listenTokens(ctx, c, ready)
	}()
	select {
	case <-ready:
	case <-time.After(5 * time.Second):
		log.Warn("token cache: not listening yet; looking tokens up in PostgreSQL until it is", slog.String("channel", TokenChannel))
	}
	return func() {
		cancel()
		<-done
		s.cache.CompareAndSwap(c, nil)
	}
}

// listenTokens keeps a LISTEN connection open until ctx ends, dropping the
// tokens it is told about. ready is closed once the first LISTEN succeeds.
func (s *Service) listenTokens(ctx context.Context, c *tokenCache, ready chan struct{}) {
	var once sync.Once
	wait := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, c, func() {
			once.Do(func() { close(ready) })
			wait = 100 * time.Millisecond
		})
		if ctx.Err() != nil {
			return
		}
		c.log.Warn("token cache: lost the notification connection; not caching until it is back",
			slog.String("channel", TokenChannel), slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func (s *Service) listenOnce(ctx context.Context, c *tokenCache, listening func()) error {
	cfg := s.pool.Config().ConnConfig.Copy()
	// Waiting for a notification runs no query, so a cancel request cannot
	// end the wait when ctx does (the pool's connections wait for one);
	// closing the connection at once does.
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{TokenChannel}.Sanitize()); err != nil {
		return err
	}
	// Whatever changed while nobody listened is unknown: start empty.
	c.clear()
	c.listening.Store(true)
	defer func() {
		c.listening.Store(false)
		c.clear()
	}()
	listening()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		id, err := uuid.Parse(n.Payload)
		if err != nil {
			c.clear()
			continue
		}
		c.forget(id)
	}
}

// get returns the cached answer for hash, if one lives; stale says it has
// lived half its ttl, and a fresh one should be looked up ahead of its end.
func (c *tokenCache) get(hash [32]byte) (p *Principal, stale, ok bool) {
	if !c.listening.Load() {
		return nil, false, false
	}
	c.mu.RLock()
	e, ok := c.byHash[hash]
	c.mu.RUnlock()
	now := time.Now().UnixNano()
	if !ok || now >= e.expires {
		return nil, false, false
	}
	cp := e.p // a copy: the caller's principal is its own
	return &cp, now >= e.expires-int64(c.ttl/2), true
}

// put stores p unless an invalidation happened since gen was read.
func (c *tokenCache) put(hash [32]byte, p *Principal, gen uint64) {
	if !c.listening.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen.Load() != gen {
		return
	}
	if len(c.byHash) >= maxCachedTokens {
		clear(c.byHash)
		clear(c.byID)
	}
	c.byHash[hash] = cachedToken{p: *p, expires: time.Now().Add(c.ttl).UnixNano()}
	c.byID[p.TokenID] = hash
}

// claimRefresh says whether the caller is to look hash up ahead of its
// answer's end: false while another lookup ahead of it runs.
func (c *tokenCache) claimRefresh(hash [32]byte) bool {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	if _, ok := c.refreshing[hash]; ok {
		return false
	}
	c.refreshing[hash] = struct{}{}
	return true
}

// endRefresh ends hash's lookup ahead, if one ran.
func (c *tokenCache) endRefresh(hash [32]byte) {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	delete(c.refreshing, hash)
}

// drop removes hash's answer: a fresh lookup found the token gone.
func (c *tokenCache) drop(hash [32]byte) {
	c.mu.RLock()
	e, ok := c.byHash[hash]
	c.mu.RUnlock()
	if ok {
		c.forget(e.p.TokenID)
	}
}

func (c *tokenCache) forget(id uuid.UUID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen.Add(1)
	if h, ok := c.byID[id]; ok {
		delete(c.byHash, h)
		delete(c.byID, id)
	}
}

func (c *tokenCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen.Add(1)
	clear(c.byHash)
	clear(c.byID)
}

// Credentials the server has seen lately, by the SHA-256 of their secret:
// whether they turned out unknown or known decides, before any database work,
// what a request with one of them may cost.
const (
	// UnknownCredentialTTL is how long a credential found unknown (no such
	// token or session, or a revoked token, an ended session) is answered 401
	// without PostgreSQL. It cannot hide a credential made later: a new token
	// or session has a fresh secret of 256 random bits, which nobody could
	// have sent before it existed; and one that was revoked or ended stays so.
	UnknownCredentialTTL = 30 * time.Second
	// KnownCredentialTTL is how long a credential that authenticated is
	// spared the per-address screen and the unauthenticated gate when it
	// must be looked up again (its cached answer expired, or sessions, which
	// are not cached). It is no answer: the lookup still decides.
	KnownCredentialTTL = 15 * time.Minute

	// maxUnknownCredentials and maxKnownCredentials bound the two sets; a
	// full set drops what expired, and starts over when that frees little.
	maxUnknownCredentials = 50_000
	maxKnownCredentials   = 100_000
)

// hashSet is a bounded set of credential hashes, each kept for ttl.
type hashSet struct {
	ttl time.Duration
	max int

	mu sync.RWMutex
	m  map[[32]byte]int64 // hash → unix ns it expires at
}

func newHashSet(ttl time.Duration, max int) *hashSet {
	return &hashSet{ttl: ttl, max: max, m: map[[32]byte]int64{}}
}

func (h *hashSet) has(hash [32]byte) bool {
	h.mu.RLock()
	exp, ok := h.m[hash]
	h.mu.RUnlock()
	return ok && time.Now().UnixNano() < exp
}

func (h *hashSet) add(hash [32]byte) {
	now := time.Now().UnixNano()
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.m[hash]; !ok && len(h.m) >= h.max {
		for k, exp := range h.m {
			if exp <= now {
				delete(h.m, k)
			}
		}
		// Little expired: start over rather than sweep again at the next add.
		if len(h.m) >= h.max*3/4 {
			clear(h.m)
		}
	}
	h.m[hash] = now + int64(h.ttl)
}

func (h *hashSet) remove(hash [32]byte) {
	h.mu.Lock()
	delete(h.m, hash)
	h.mu.Unlock()
}
