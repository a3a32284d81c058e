package server

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/tracing"
)

// startSpan starts the span of request r, in the caller's trace when r has
// a valid traceparent (an invalid one is ignored, never refused). Without
// an endpoint (Config.Tracer nil) it only gives r a trace id.
func (s *Server) startSpan(r *http.Request) (context.Context, trace.Span) {
	return s.cfg.Tracer.StartRequest(r.Context(), r.Header, methodLabel(r.Method))
}

// endSpan names r's span after its route pattern (never the path, which
// holds the key), records the status and the key, and ends it.
func endSpan(span trace.Span, res lock.Resource, method, route string, status int) {
	if !span.IsRecording() {
		return
	}
	if route == unmatchedRoute {
		route = ""
	}
	var kind string
	if res.Name != "" && res.Kind != 0 {
		kind = res.Kind.String()
	}
	tracing.EndRequest(span, method, route, status, res.Name, kind)
}

// engineAcquire is the engine's Acquire, inside a lock.wait span when the
// request may wait in the queue (wait_ms > 0) and is traced: the span
// shows how long it waited, whether it got the lease and the outcome
// (lockd_acquires_total's label), and the Redis calls of the wait are its
// children.
func (s *Server) engineAcquire(ctx context.Context, res lock.Resource, req lock.AcquireRequest) (lock.Lease, error) {
	if req.Wait <= 0 || !s.cfg.Tracer.Enabled() {
		return s.engine.Acquire(ctx, res, req)
	}
	start := time.Now()
	wctx, span := s.cfg.Tracer.StartWait(ctx, res.Name, req.Wait)
	l, err := s.engine.Acquire(wctx, res, req)
	tracing.EndWait(span, time.Since(start), err == nil, outcomeLabel(l.Outcome, err))
	return l, err
}
