// Package tracing gives lockd's requests their W3C trace context and, with
// an OTLP endpoint, exports OpenTelemetry spans: one per HTTP request, one
// around a waiting acquire's wait, and one per Redis command or pipeline a
// request causes.
//
// Without an endpoint nothing is recorded or exported: a request still gets
// a trace id (its caller's, from traceparent, or a new one) for the access
// log and the history, at the cost of a few random numbers.
//
// No span carries a lease token, an API key, an Authorization header, an
// Idempotency-Key, a session id or a Redis command's arguments: request
// spans have the method, route, status and lock key; Redis spans the
// command's name only.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ServiceName is the service.name of lockd's spans (OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES may say otherwise).
const ServiceName = "lockd"

// DefaultPath is the path an endpoint without one gets: OTLP/HTTP's
// traces path.
const DefaultPath = "/v1/traces"

// Config says where spans go.
type Config struct {
	// Endpoint is the OTLP/HTTP URL spans are sent to (protobuf), e.g.
	// http://otel-collector:4318; without a path, DefaultPath is used.
	// Empty: no spans are recorded, trace ids are still made.
	Endpoint string
	// Version is the service.version of the spans.
	Version string
}

// Tracer makes lockd's spans. A nil *Tracer, like one made without an
// endpoint, records nothing and only hands out trace ids; every method
// works on it.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
}

// EndpointURL checks an --otlp-endpoint and gives the URL spans are sent
// to: http or https, a host, no user or password (a collector's
// credentials go in OTEL_EXPORTER_OTLP_HEADERS, which ps does not show),
// and DefaultPath when the URL has no path.
func EndpointURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", errors.New("not a URL (want http://host:4318 or https://host:4318/v1/traces)")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("want an http:// or https:// URL (OTLP over HTTP), not %q", u.Scheme+"://")
	case u.Host == "":
		return "", errors.New("the URL has no host")
	case u.User != nil:
		return "", errors.New("no user or password in the URL: give the collector's credentials as headers in OTEL_EXPORTER_OTLP_HEADERS")
	case u.RawQuery != "" || u.Fragment != "":
		return "", errors.New("the URL must not have a query or fragment")
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = DefaultPath
	}
	return u.String(), nil
}

// New returns the tracer of cfg. With an endpoint it exports spans over
// OTLP/HTTP in batches; Shutdown sends what is left. The exporter, sampler
// and batching also follow the standard OTEL_* variables (headers, timeout,
// OTEL_TRACES_SAMPLER, OTEL_BSP_*), except the endpoint, which is cfg's.
func New(ctx context.Context, cfg Config) (*Tracer, error) {
	if cfg.Endpoint == "" {
		return nil, nil
	}
	endpoint, err := EndpointURL(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(
			attribute.String("service.name", ServiceName),
			attribute.String("service.version", cfg.Version),
		),
		resource.WithTelemetrySDK(),
		// OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME come last: an
		// operator may add the pod's name or rename the service.
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("tracing resource: %w", err)
	}
	return newTracer(sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))), nil
}

// NewWithProvider returns a tracer that records through tp, for tests that
// read spans from an in-memory exporter.
func NewWithProvider(tp *sdktrace.TracerProvider) *Tracer {
	return newTracer(tp)
}

func newTracer(tp *sdktrace.TracerProvider) *Tracer {
	return &Tracer{provider: tp, tracer: tp.Tracer("github.com/lockd/lockd")}
}

// Enabled says whether spans are recorded (an endpoint was given).
func (t *Tracer) Enabled() bool { return t != nil && t.tracer != nil }

// Shutdown exports the spans not yet sent and stops the exporter; ctx
// bounds how long that takes.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if !t.Enabled() {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// traceContext reads W3C traceparent and tracestate. A header that is
// missing or not valid is ignored: the request starts a new trace.
var traceContext = propagation.TraceContext{}

// Attribute keys of the request span (OpenTelemetry's HTTP conventions)
// and lockd's own.
const (
	attrMethod = attribute.Key("http.request.method")
	attrRoute  = attribute.Key("http.route")
	attrStatus = attribute.Key("http.response.status_code")
	attrKey    = attribute.Key("lockd.key")
	attrKind   = attribute.Key("lockd.kind")
)

// StartRequest starts the span of an HTTP request with the given method:
// a child of the caller's trace when header has a valid traceparent
// (tracestate is kept with it), else the root of a new trace. The span is
// named after the method until EndRequest names its route. Without an
// endpoint the span records nothing but has fresh ids in the caller's
// trace, so that TraceID(ctx) is the request's trace id either way.
func (t *Tracer) StartRequest(ctx context.Context, header http.Header, method string) (context.Context, trace.Span) {
	if _, ok := header["Traceparent"]; ok {
		// Only then: Extract looks the header up by a name it
		// canonicalizes on every call (one allocation a request).
		ctx = traceContext.Extract(ctx, propagation.HeaderCarrier(header))
	}
	if !t.Enabled() {
		parent := trace.SpanContextFromContext(ctx)
		cfg := trace.SpanContextConfig{
			TraceID: parent.TraceID(), SpanID: newSpanID(),
			TraceFlags: parent.TraceFlags(), TraceState: parent.TraceState(),
		}
		if !parent.IsValid() {
			cfg.TraceID = newTraceID()
		}
		ctx = trace.ContextWithSpanContext(ctx, trace.NewSpanContext(cfg))
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrMethod.String(method)))
}

// EndRequest names a request's span after its route (a pattern such as
// /v1/locks/{key}/acquire, never the path with the key in it; "" when no
// route matched), records the status and the lock key and kind (both may
// be ""), and ends it. A 5xx marks the span as failed.
func EndRequest(span trace.Span, method, route string, status int, key, kind string) {
	if !span.IsRecording() {
		return
	}
	if route != "" {
		span.SetName(method + " " + route)
		span.SetAttributes(attrRoute.String(route))
	}
	span.SetAttributes(attrStatus.Int(status))
	if key != "" {
		span.SetAttributes(attrKey.String(key), attrKind.String(kind))
	}
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
}

// Start starts a span named name, a child of ctx's span. It records only
// when tracing is on and ctx's span records; else it is a span that does
// nothing (and ctx comes back as it was).
func (t *Tracer) Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !t.Enabled() || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// noSpan records nothing: the span of a context that has none.
var noSpan = trace.SpanFromContext(context.Background())

// TraceID is the trace id of the request that ctx belongs to, as 32
// lower-case hex digits (the trace-id of W3C traceparent): the caller's
// when its traceparent was valid, else one made for the request. It is ""
// for a context outside any request. Handlers use it to tie what a request
// caused (log lines, history events) to its trace; it is never a secret.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}

// newTraceID and newSpanID make the ids of requests traced without an
// endpoint. math/rand/v2's generator is seeded from the system's entropy
// and safe for concurrent use; W3C asks for random, not secret, ids.
func newTraceID() trace.TraceID {
	var id trace.TraceID
	for id == (trace.TraceID{}) {
		hi, lo := rand.Uint64(), rand.Uint64()
		for i := range 8 {
			id[i], id[8+i] = byte(hi>>(56-8*i)), byte(lo>>(56-8*i))
		}
	}
	return id
}

func newSpanID() trace.SpanID {
	var id trace.SpanID
	for id == (trace.SpanID{}) {
		v := rand.Uint64()
		for i := range 8 {
			id[i] = byte(v >> (56 - 8*i))
		}
	}
	return id
}

// Wait attribute keys: how long an acquire could wait, how long it did,
// whether it got the lease, and its outcome (lockd_acquires_total's
// label: granted, held, unavailable…).
const (
	attrWaitMax     = attribute.Key("lockd.wait.max_ms")
	attrWaitWaited  = attribute.Key("lockd.wait.waited_ms")
	attrWaitGranted = attribute.Key("lockd.wait.granted")
	attrWaitOutcome = attribute.Key("lockd.wait.outcome")
)

// WaitSpanName is the name of the span around an acquire that may wait.
const WaitSpanName = "lock.wait"

// StartWait starts the span of an acquire of key that may wait up to max
// in the queue; EndWait ends it. Like Start, it records only under a
// recording request span.
func (t *Tracer) StartWait(ctx context.Context, key string, max time.Duration) (context.Context, trace.Span) {
	if !t.Enabled() || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, WaitSpanName, trace.WithAttributes(attrKey.String(key), attrWaitMax.Int64(max.Milliseconds())))
}

// EndWait ends a wait span: how long the acquire took, whether it got a
// lease, and its outcome.
func EndWait(span trace.Span, waited time.Duration, granted bool, outcome string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attrWaitWaited.Int64(waited.Milliseconds()), attrWaitGranted.Bool(granted), attrWaitOutcome.String(outcome))
	if outcome == "unavailable" || outcome == "error" {
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
}
