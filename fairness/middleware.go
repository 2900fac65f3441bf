package fairness

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
)

// Middleware runs each request under an interactive seat of the flow key
// returns, taken before the handler reads its body or touches the database
// and given back when the handler returns — normally, by error, by panic, or
// because the client went away. A request for which key returns "" passes
// ungated: the server puts this after authentication, which guarantees a
// realm.
//
// A refused request is answered here with a pre-encoded 429: Retry-After and
// {"error":{"code":"concurrency_limited",...}}, with no allocation for the
// body.
func (c *Controller) Middleware(key func(echo.Context) string) echo.MiddlewareFunc {
	return c.MiddlewareWithBody(key, c.refusalBody)
}

// MiddlewareWithBody is Middleware whose refusals answer body(reason), for
// an API whose clients expect another error shape (the Airtable-compatible
// API); each reason's body is made once.
func (c *Controller) MiddlewareWithBody(key func(echo.Context) string, body func(reason string) []byte) echo.MiddlewareFunc {
	retryAfter := appdor.RetryAfterSeconds(c.cfg.RetryAfter)
	bodies := map[string][]byte{}
	for _, reason := range []string{ReasonQueueFull, ReasonWaitExpired, ReasonCanceled} {
		bodies[reason] = body(reason)
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(ec echo.Context) error {
			name := key(ec)
			if name == "" || c.cfg.Off {
				return next(ec)
			}
			req := ec.Request()
			s, reason := c.acquire(req.Context(), name, Interactive)
			if s == nil {
				h := ec.Response().Header()
				h.Set("Retry-After", retryAfter)
				h.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
				ec.Response().WriteHeader(http.StatusTooManyRequests)
				if req.Method == http.MethodHead {
					return nil
				}
				_, err := ec.Response().Write(bodies[reason])
				return err
			}
			defer s.release()
			ec.SetRequest(req.WithContext(context.WithValue(req.Context(), seatKey{}, s)))
			return next(ec)
		}
	}
}

// seatKey marks a request's context with the seat it runs under.
type seatKey struct{}

// Yield gives back the interactive seat the request of ctx runs under, for a
// handler that goes on as background work (a CSV import runs each batch under
// a background seat of its own instead). It does nothing outside a request
// the middleware admitted, and the middleware's own release then does nothing.
func Yield(ctx context.Context) {
	if s, ok := ctx.Value(seatKey{}).(*seat); ok {
		s.release()
	}
}

// refusalBody is the 429 body for reason, encoded once.
func (c *Controller) refusalBody(reason string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"code":           appdor.EConcurrencyLimited,
		"message":        refusalMessage,
		"details":        map[string]string{"reason": reason},
		"retry_after_ms": c.cfg.RetryAfter.Milliseconds(),
	}})
	return append(b, '\n')
}
