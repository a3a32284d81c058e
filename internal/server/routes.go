package server

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/xid"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/problem"
	"github.com/lockd/lockd/internal/tracing"
)

// Dashboard adds the web pages to the router.
type Dashboard interface {
	Routes(r chi.Router)
	// KindOf is the kind of resource that a page's {key} names, for the
	// access log and the request's span.
	KindOf(r *http.Request) lock.Kind
}

// Handler is lockd's whole HTTP surface: middleware, operations endpoints,
// the dashboard (may be nil) and the generated API.
func (s *Server) Handler(gatherer prometheus.Gatherer, dashboard Dashboard) http.Handler {
	r := chi.NewRouter()
	r.Use(
		s.observe,
		recoverer,
		s.checkHost,
		crossOrigin(),
		s.identify,
		checkQuery,
		// HEAD is served wherever GET is (the probes, /metrics, the
		// dashboard's pages): load balancers and uptime checkers use it.
		middleware.GetHead,
	)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, api.Problem{Type: "/problems/not_found", Title: "Not found", Status: http.StatusNotFound,
			Code: "not_found", Detail: ptr("no such endpoint: " + r.Method + " " + r.URL.Path)}, nil)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		// RFC 9110 requires Allow on a 405: the methods the path has.
		allow := allowed(r, req.URL.Path)
		writeProblem(w, api.Problem{Type: "/problems/method_not_allowed", Title: "Method not allowed",
			Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
			Detail: ptr(methodLabel(req.Method) + " is not allowed on " + req.URL.Path + "; use " + allow)},
			http.Header{"Allow": {allow}})
	})

	var metricsHandler http.Handler = promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{})
	if s.cfg.MetricsAuth {
		metricsHandler = s.requireMetricsReader(metricsHandler)
	}
	r.Method(http.MethodGet, "/metrics", metricsHandler)
	r.Get("/openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(api.OpenAPI)
	})
	if dashboard != nil {
		dashboard.Routes(r)
		s.pageKind = dashboard.KindOf
	}

	strict := api.NewStrictHandlerWithOptions(s, nil, api.StrictHTTPServerOptions{
		RequestErrorHandlerFunc:  requestError,
		ResponseErrorHandlerFunc: writeError,
	})
	api.HandlerWithOptions(leaseOps{strict, s}, api.ChiServerOptions{
		BaseRouter:       r,
		Middlewares:      []api.MiddlewareFunc{s.checkRequest},
		ErrorHandlerFunc: paramError,
	})
	return r
}

// allowed lists the methods that router serves on path, for Allow.
func allowed(router chi.Routes, path string) string {
	var ms []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if router.Match(chi.NewRouteContext(), m, path) {
			ms = append(ms, m)
		}
	}
	return strings.Join(ms, ", ")
}

// observe gives each request an ID (X-Request-Id) and a trace id, and when
// the request ends counts it in the metrics and writes its access log
// line: method, route, status, size, duration, key, owner and trace id.
// Never a body, so never a token. It also starts and ends the request's
// span (tracing.go). One middleware, one context value and one
// allocation (the exchange, which is also the response writer's wrapper)
// for all of it: it runs on every request. The request's logger, for the
// few lines written before the access log, is made when first asked for
// (requestLog).
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		x := &exchange{base: &s.log}
		x.w.ResponseWriter = w
		x.reqID[0] = xid.New().String()
		w.Header()["X-Request-Id"] = x.reqID[:]
		// The request's span: in the caller's trace (traceparent), or a
		// new one; its trace id goes on every log line of the request.
		ctx, span := s.startSpan(r)
		x.traceID = tracing.TraceID(ctx)
		// The trace id rides along to the history events the request
		// causes (lock.WithTrace); the exchange (who calls, from where)
		// rides in the same new context: identify and checkHost fill it
		// in.
		ctx = lock.WithTrace(ctx, x.traceID)
		r = r.WithContext(context.WithValue(ctx, callerKey{}, x))
		next.ServeHTTP(&x.w, r)

		d := time.Since(start)
		route, method, status := routePattern(r), methodLabel(r.Method), x.w.status
		s.metrics.request(route, method, status, d)
		res := s.resourceOf(r)
		endSpan(span, res, method, route, status)
		ev := s.log.Info()
		if status >= 500 {
			ev = s.log.Warn()
		}
		if !ev.Enabled() {
			return
		}
		ev = x.fields(ev)
		if res.Name != "" {
			ev = ev.Str("key", res.Name)
			if res.Kind != 0 {
				ev = ev.Stringer("kind", res.Kind)
			}
		}
		// The method and route come from fixed sets, as in the metrics:
		// an 8 KB made-up method is not worth a log line of its size.
		ev.Str("method", method).Str("route", route).Int("status", status).
			Int("size", x.w.size).Dur("duration", d).Msg("request")
	})
}

// resourceOf is the resource r's {key} names: an operation of the API
// says its kind, a dashboard page's section says it.
func (s *Server) resourceOf(r *http.Request) lock.Resource {
	res := resourceParam(r)
	if res.Name != "" && res.Kind == 0 && s.pageKind != nil {
		res.Kind = s.pageKind(r)
	}
	return res
}

// recoverer turns a panic into a logged 500 problem, never a stack trace
// on the wire.
func recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				requestLog(r.Context()).Error().Str("panic", fmt.Sprint(v)).Bytes("stack", debug.Stack()).Msg("panic")
				writeError(w, r, fmt.Errorf("panic: %v", v))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// requireMetricsReader guards /metrics: a key with the read scope and no
// prefixes (N25 of the third audit). The metrics label every tenant's
// prefix and count its activity, so a key limited to some prefixes, a
// tenant's, would learn the other tenants and their load; that holds for
// an admin key limited to prefixes too. Filtering the labels by the
// caller's prefixes instead would hand each tenant a different, partial
// view of server-wide gauges (waiters, streams, Redis errors) that cannot
// be split by tenant, so the whole page is for operators only.
func (s *Server) requireMetricsReader(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.authorize(r); err != nil {
			writeError(w, r, err)
			return
		}
		if c := callerOf(r.Context()); c.key != nil && len(c.key.Prefixes) > 0 {
			writeError(w, r, problem.Errorf(problem.ErrForbidden,
				"API key %s is limited to the prefixes %s; /metrics shows every tenant's, so it needs a key without prefixes",
				c.name, strings.Join(c.key.Prefixes, ", ")))
			return
		}
		next.ServeHTTP(w, r)
	})
}
