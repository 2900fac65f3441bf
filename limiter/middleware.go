package limiter

import (
	"math"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/appdor/appdor"
)

// Middleware refuses a request over its ceiling with a coded rate_limited
// error (429, Retry-After, retry_after_ms, rendered by the server's error
// handler) and marks an allowed one with RateLimit-Limit, RateLimit-Remaining
// and RateLimit-Reset. subject says who the request is charged to; a request
// without one passes untouched. It runs after authentication and before any
// data access, and reads nothing but the request's principal.
func (l *Limiter) Middleware(subject func(echo.Context) (Subject, bool)) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			s, ok := subject(c)
			if !ok {
				return next(c)
			}
			d := l.Allow(c.Request().Context(), s)
			if d.Limit > 0 {
				h := c.Response().Header()
				h.Set("RateLimit-Limit", strconv.Itoa(d.Limit))
				h.Set("RateLimit-Remaining", strconv.Itoa(d.Remaining))
				reset := d.Reset
				if !d.Allowed {
					reset = d.RetryAfter
				}
				h.Set("RateLimit-Reset", strconv.FormatInt(ceilSeconds(reset), 10))
			}
			if !d.Allowed {
				return &appdor.Error{
					Code:       appdor.ERateLimited,
					Message:    refusalMessage[d.Scope],
					RetryAfter: d.RetryAfter,
				}
			}
			return next(c)
		}
	}
}

var refusalMessage = map[Scope]string{
	ScopeToken:           "this token is over its requests-per-minute ceiling; retry after the Retry-After header's seconds",
	ScopeRealm:           "this realm is over its requests-per-minute ceiling; retry after the Retry-After header's seconds",
	ScopeUnauthenticated: "too many unknown credentials from this address; retry after the Retry-After header's seconds",
	ScopeLoginAddress:    "too many sign-in attempts from this address; retry after the Retry-After header's seconds",
	ScopeLoginAccount:    "too many sign-in attempts for this account; retry after the Retry-After header's seconds",
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	return int64(math.Ceil(d.Seconds()))
}
