package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/appdor/appdor"
)

// /metrics names realms and shows their traffic, so it is not for everyone.
// Who may read it:
//   - with --metrics-token, whoever sends it as a bearer token, on whichever
//     listener serves /metrics;
//   - with --metrics-listen, /metrics is served on that address only (the
//     main listener answers 404 there), to whoever reaches it: bind it to
//     loopback or a private interface;
//   - with neither, on the main listener, loopback clients only (a request
//     with a forwarding header is not one: a proxy on the same host may be
//     passing on anyone's request).

// metricsHandler serves the App's registry, once the request may read it.
// Each scrape first forgets the series of realms gone quiet.
func (a *App) metricsHandler() http.Handler {
	gather := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		if a.realms != nil {
			a.realms.forgetIdle(time.Now())
		}
		return a.metrics.Gather()
	})
	serve := promhttp.HandlerFor(gather, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := a.metricsAccess(r); err != nil {
			writeMetricsRefusal(w, err)
			return
		}
		serve.ServeHTTP(w, r)
	})
}

var (
	errMetricsToken = &appdor.Error{Code: appdor.EUnauthorized,
		Message: "/metrics needs the metrics token (--metrics-token) as a bearer token"}
	errMetricsLoopback = &appdor.Error{Code: appdor.EForbidden,
		Message: "/metrics answers loopback clients only; set --metrics-token or --metrics-listen to read it from elsewhere"}
)

// metricsAccess says whether r may read /metrics: nil, or why not.
func (a *App) metricsAccess(r *http.Request) error {
	if a.cfg.MetricsToken != "" {
		token, ok := strings.CutPrefix(r.Header.Get(echo.HeaderAuthorization), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(token)), []byte(a.cfg.MetricsToken)) != 1 {
			return errMetricsToken
		}
		return nil
	}
	if a.cfg.MetricsListen != "" {
		return nil // its own listener: whoever reaches it
	}
	if !loopbackClient(r) {
		return errMetricsLoopback
	}
	return nil
}

// loopbackClient reports whether r comes from this host itself and not
// through a proxy.
func loopbackClient(r *http.Request) bool {
	for _, h := range []string{echo.HeaderXForwardedFor, echo.HeaderXRealIP, "Forwarded"} {
		if r.Header.Get(h) != "" {
			return false
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// writeMetricsRefusal answers a refused scrape in the API's error shape.
func writeMetricsRefusal(w http.ResponseWriter, err error) {
	var ae *appdor.Error
	if !errors.As(err, &ae) {
		ae = appdor.Errorf(appdor.EInternal, "internal error")
	}
	status := StatusOf(ae.Code)
	if ae.Code == appdor.EUnauthorized {
		w.Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="appdor metrics"`)
	}
	w.Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSONCharsetUTF8)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errorBody{Error: errorPayload{Code: ae.Code, Message: ae.Message}})
}

// mountMetrics puts /metrics on the main router, or, when it has a listener
// of its own, a 404 that says where it went (rather than the UI's fallback).
func (a *App) mountMetrics(e *echo.Echo) {
	switch {
	case a.cfg.MetricsListen != "":
		a.log.Info("metrics: /metrics on its own listener", slog.String("metrics_listen", a.cfg.MetricsListen),
			slog.Bool("metrics_token", a.cfg.MetricsToken != ""))
	case a.cfg.MetricsToken != "":
		a.log.Info("metrics: /metrics on the main listener, for the bearer of --metrics-token")
	default:
		a.log.Info("metrics: /metrics on the main listener, for loopback clients only (--metrics-listen, --metrics-token)")
	}
	if a.cfg.MetricsListen != "" {
		e.GET("/metrics", func(echo.Context) error {
			return appdor.Errorf(appdor.ENotFound, "/metrics is served on --metrics-listen")
		})
		return
	}
	e.GET("/metrics", echo.WrapHandler(a.metricsHandler()))
}

// profilesHandler serves net/http/pprof's index and profiles to whoever may
// read /metrics (metricsAccess): they show the server's code and what it is
// doing, never a realm's data. Not its command line, which may hold a
// secret given as a flag.
func (a *App) profilesHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // and the runtime's named profiles: heap, goroutine, ...
	mux.Handle("/debug/pprof/cmdline", http.NotFoundHandler())
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := a.metricsAccess(r); err != nil {
			writeMetricsRefusal(w, err)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// serveMetrics serves /metrics on Config.MetricsListen until the returned
// stop is called; with none set it does nothing.
func (a *App) serveMetrics() (stop func(), err error) {
	if a.cfg.MetricsListen == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", a.cfg.MetricsListen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (--metrics-listen): %w", a.cfg.MetricsListen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.metricsHandler())
	write := 30 * time.Second
	if a.cfg.Pprof {
		mux.Handle("GET /debug/pprof/", a.profilesHandler())
		write = 2 * time.Minute // a CPU profile or a trace runs for ?seconds= before it writes
		a.log.Info("pprof=on: Go's profiles under /debug/pprof/ on --metrics-listen",
			slog.String("flag", "pprof"), slog.String("metrics_listen", ln.Addr().String()))
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: write, IdleTimeout: time.Minute,
		ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)}
	a.log.Info("serving /metrics", slog.String("metrics_listen", ln.Addr().String()))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("serving /metrics", slog.String("error", err.Error()))
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
