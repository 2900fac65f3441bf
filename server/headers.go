package server

import (
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
)

// hstsMaxAge is the Strict-Transport-Security max-age of --hsts: one year, as
// OWASP recommends. Subdomains are left out: they may be other services.
const hstsMaxAge = 365 * 24 * 60 * 60

// secureHeaders sets X-Content-Type-Options: nosniff on every response (a
// JSON error must never be sniffed into a page), and with Config.HSTS
// Strict-Transport-Security on responses sent over HTTPS, as the scheme
// extractor tells it (a forwarded scheme only from a trusted proxy).
func (a *App) secureHeaders() echo.MiddlewareFunc {
	cfg := middleware.SecureConfig{ContentTypeNosniff: "nosniff", HSTSExcludeSubdomains: true}
	if a.cfg.HSTS {
		cfg.HSTSMaxAge = hstsMaxAge
	}
	return middleware.SecureWithConfig(cfg)
}

// schemeExtractor is how a request's scheme is found, which decides the
// Secure flag of the session cookies and HSTS. Without trusted proxies it is
// the connection's own; behind them, X-Forwarded-Proto (and its kin) counts
// only when the direct peer is one of them. Echo's default would trust any
// loopback or private-network peer, so a client on the same network could
// claim https.
func (a *App) schemeExtractor() echo.SchemeExtractor {
	if len(a.cfg.TrustedProxies) == 0 {
		return echo.ExtractSchemeDirect()
	}
	return echo.ExtractSchemeFromHeaders(a.trustOptions()...)
}

// trustOptions trust the configured proxies and nothing else: no loopback,
// link-local or private range by default.
func (a *App) trustOptions() []echo.TrustOption {
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, n := range a.cfg.TrustedProxies {
		opts = append(opts, echo.TrustIPRange(n))
	}
	return opts
}

// maxRequestIDLength bounds a client's X-Request-Id.
const maxRequestIDLength = 64

// requestIDs is Echo's request id middleware, which keeps an X-Request-Id the
// client sent and echoes it in the response and on every log line of the
// request. An id longer than maxRequestIDLength, or with a character other
// than ASCII letters, digits, '-', '_', '.' and ':', is replaced by a fresh
// one: a client must not write into the logs what it likes.
func requestIDs() echo.MiddlewareFunc {
	assign := middleware.RequestID()
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		h := assign(next)
		return func(c echo.Context) error {
			req := c.Request()
			if ids := req.Header.Values(echo.HeaderXRequestID); len(ids) > 1 || len(ids) == 1 && !validRequestID(ids[0]) {
				req.Header.Del(echo.HeaderXRequestID)
			}
			return h(c)
		}
	}
}

func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == ':':
		default:
			return false
		}
	}
	return true
}
