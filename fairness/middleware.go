package fairness

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
)

// maxHolds bounds the requests held at once, for a slot or for the spread of
// their refusal; beyond it a refusal is answered at once (a held request
// costs a goroutine, not CPU, but not nothing).
const maxHolds = 4096

// Middleware admits each request under the realm key returns, before the
// handler reads its body or touches the database, and releases the slot when
// the handler returns — normally, by error, by panic, or because the client
// went away (the handler's context ends, its query is canceled, it returns).
//
// A refused request is answered here with a pre-encoded 429: Retry-After and
// {"error":{"code":"concurrency_limited",...}}; a hot realm's refusal after
// the hold. A request for which key returns "" passes ungated: the server
// puts this after authentication, which guarantees a realm.
func (c *Controller) Middleware(key func(echo.Context) string) echo.MiddlewareFunc {
	// Two answers per reason: Retry-After as configured, and a second later.
	// A hot realm's refusals pick one at random, so clients that honor
	// Retry-After come back spread over two seconds instead of in one wave
	// that lands on everyone else's latency each second.
	type answer struct {
		retryAfter string
		bodies     map[string][]byte
	}
	var answers [2]answer
	for i := range answers {
		wait := c.cfg.RetryAfter + time.Duration(i)*time.Second
		answers[i] = answer{
			retryAfter: strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10),
			bodies: map[string][]byte{
				ReasonRealmLimit: c.refusalBody(ReasonRealmLimit, wait),
				ReasonCapacity:   c.refusalBody(ReasonCapacity, wait),
				ReasonNewRealm:   c.refusalBody(ReasonNewRealm, wait),
			},
		}
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(ec echo.Context) error {
			name := key(ec)
			if name == "" {
				return next(ec)
			}
			release, ref := c.Admit(name, ClassRequest)
			if ref != nil && ref.Hold > 0 {
				// A hot realm's request is held: it waits, briefly, for
				// a moment when no light work is in flight, and is refused
				// only when none comes.
				if c.holds.Add(1) <= maxHolds {
					c.m.held.Inc()
					ctx := ec.Request().Context()
					if rel, ok := c.AdmitWithin(ctx, name, ClassRequest, ref.Hold); ok {
						release, ref = rel, nil
					} else if c.cfg.Spread > 0 {
						// Refused: the answer waits a random while, so
						// the realm's clients do not all come back at once.
						wait(ctx, rand.N(c.cfg.Spread))
					}
				}
				c.holds.Add(-1)
				if ref != nil {
					c.CountRefusal(name, ClassRequest, ref)
				}
			}
			if ref != nil {
				a := answers[0]
				if ref.Hold > 0 {
					a = answers[rand.IntN(2)]
				}
				h := ec.Response().Header()
				h.Set("Retry-After", a.retryAfter)
				h.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
				ec.Response().WriteHeader(http.StatusTooManyRequests)
				if ec.Request().Method == http.MethodHead {
					return nil
				}
				_, err := ec.Response().Write(a.bodies[ref.Reason])
				return err
			}
			defer release()
			h := &held{realm: name}
			defer h.released.Store(true)
			req := ec.Request()
			ec.SetRequest(req.WithContext(withHeld(req.Context(), h)))
			return next(ec)
		}
	}
}

// wait sleeps for d or until ctx ends.
func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// refusalBody is the 429 body for reason, encoded once.
func (c *Controller) refusalBody(reason string, wait time.Duration) []byte {
	ms := wait.Milliseconds()
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"code":           appdor.EConcurrencyLimited,
		"message":        refusalMessage,
		"details":        map[string]string{"reason": reason},
		"retry_after_ms": ms,
	}})
	return append(b, '\n')
}
