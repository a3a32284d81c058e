package tracing_test

import (
	"context"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/tracing"
	"github.com/lockd/lockd/internal/tracing/tracingtest"
)

const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
	callerState = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
)

var hexTraceID = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestEndpointURL(t *testing.T) {
	for raw, want := range map[string]string{
		"http://collector:4318":                "http://collector:4318/v1/traces",
		"http://collector:4318/":               "http://collector:4318/v1/traces",
		"https://collector.example/v1/traces":  "https://collector.example/v1/traces",
		"http://127.0.0.1:4318/otlp/v1/traces": "http://127.0.0.1:4318/otlp/v1/traces",
	} {
		if got, err := tracing.EndpointURL(raw); err != nil || got != want {
			t.Errorf("EndpointURL(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for _, raw := range []string{
		"collector:4318", "grpc://collector:4317", "http://", "http://user:secret@collector:4318",
		"http://collector:4318/v1/traces?token=secret", "::", "",
	} {
		got, err := tracing.EndpointURL(raw)
		if err == nil {
			t.Errorf("EndpointURL(%q) = %q, want an error", raw, got)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("EndpointURL(%q)'s error quotes the secret: %v", raw, err)
		}
	}
}

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// Without an endpoint a request is in its caller's trace, with tracestate
// kept, or in a new one; nothing records.
func TestStartRequestWithoutEndpoint(t *testing.T) {
	tr, err := tracing.New(context.Background(), tracing.Config{})
	if err != nil || tr.Enabled() {
		t.Fatalf("New without endpoint: %v, enabled %v", err, tr.Enabled())
	}
	ctx, span := tr.StartRequest(context.Background(),
		header("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01", "tracestate", callerState), "POST")
	if got := tracing.TraceID(ctx); got != callerTrace {
		t.Errorf("trace id %q, want the caller's %q", got, callerTrace)
	}
	sc := trace.SpanContextFromContext(ctx)
	if sc.SpanID().String() == callerSpan || !sc.SpanID().IsValid() {
		t.Errorf("span id %s: want a new one, not the caller's", sc.SpanID())
	}
	if sc.TraceState().String() != callerState {
		t.Errorf("tracestate %q, want %q", sc.TraceState(), callerState)
	}
	if span.IsRecording() {
		t.Error("a span records without an endpoint")
	}
	tracing.EndRequest(span, "POST", "/v1/locks/{key}/acquire", 200, "k", "lock")
	if _, child := tr.Start(ctx, "child"); child.IsRecording() {
		t.Error("a child span records without an endpoint")
	}

	seen := map[string]bool{callerTrace: true}
	for _, h := range []http.Header{
		nil,
		header("traceparent", "garbage"),
		header("traceparent", "00-"+strings.Repeat("0", 32)+"-"+callerSpan+"-01"),  // all-zero trace id
		header("traceparent", "00-"+callerTrace+"-"+strings.Repeat("0", 16)+"-01"), // all-zero parent id
		header("traceparent", "ff-"+callerTrace+"-"+callerSpan+"-01"),              // version ff is invalid
		header("traceparent", "00-"+strings.ToUpper(callerTrace)+"-"+callerSpan+"-01"),
		header("traceparent", "00-"+callerTrace+"-"+callerSpan),
		header("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01-extra"),
		header("traceparent", strings.Repeat("x", 8000)),
		header("tracestate", callerState), // tracestate alone
	} {
		ctx, _ := tr.StartRequest(context.Background(), h, "GET")
		id := tracing.TraceID(ctx)
		if !hexTraceID.MatchString(id) || id == strings.Repeat("0", 32) || seen[id] {
			t.Errorf("traceparent %.40q: trace id %q, want a fresh one", h.Get("traceparent"), id)
		}
		seen[id] = true
	}
	if got := tracing.TraceID(context.Background()); got != "" {
		t.Errorf("TraceID outside a request = %q, want empty", got)
	}
	var nilTracer *tracing.Tracer
	if ctx, _ := nilTracer.StartRequest(context.Background(), nil, "GET"); !hexTraceID.MatchString(tracing.TraceID(ctx)) {
		t.Error("a nil Tracer gives no trace id")
	}
	if err := nilTracer.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

// With an endpoint: the request span is the caller's child, each Redis
// command and pipeline a child of the span it ran under, with the
// command's name and never its arguments; commands outside a request make
// no span. Shutdown sends everything.
func TestSpansReachTheReceiver(t *testing.T) {
	recv := tracingtest.Start(t)
	tr, err := tracing.New(context.Background(), tracing.Config{Endpoint: recv.URL, Version: "v9.9.9"})
	if err != nil || !tr.Enabled() {
		t.Fatalf("New: %v", err)
	}
	rs := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(tr.RedisHook())

	const secret = "argument-secret-7f3a9c"
	ctx := context.Background()
	if err := rdb.Set(ctx, "outside", secret, 0).Err(); err != nil { // no request: no span
		t.Fatal(err)
	}
	rctx, req := tr.StartRequest(ctx, header("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01", "tracestate", callerState), "POST")
	if err := rdb.Set(rctx, "k:"+secret, secret, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	_ = rdb.Get(rctx, "missing").Err() // redis.Nil: not a failure
	script := redis.NewScript(`return ARGV[1]`)
	if err := script.Run(rctx, rdb, []string{"k"}, secret).Err(); err != nil { // NOSCRIPT, then EVAL
		t.Fatal(err)
	}
	wctx, wait := tr.StartWait(rctx, "k", 2*time.Second)
	if _, err := rdb.Pipelined(wctx, func(p redis.Pipeliner) error {
		p.Get(wctx, "k:"+secret)
		p.PTTL(wctx, "k:"+secret)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	tracing.EndWait(wait, 12*time.Millisecond, true, "granted")
	if _, err := rdb.TxPipelined(rctx, func(p redis.Pipeliner) error {
		p.Incr(rctx, "n")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(rctx, "NOSUCHCOMMAND", secret).Err(); err == nil {
		t.Fatal("an unknown command succeeded")
	}
	tracing.EndRequest(req, "POST", "/v1/locks/{key}/acquire", 200, "k", "lock")
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	spans := recv.Spans()
	tree := tracingtest.Tree(spans, callerTrace)
	t.Logf("spans:\n%s", tree)
	// A new connection's set-up (HELLO, CLIENT SETINFO) shows under the
	// command that dialled it; byName leaves those out.
	redisSpans := map[string]bool{}
	for _, s := range spans {
		if s.Kind == 3 /* client */ {
			redisSpans[s.SpanID()] = true
		}
	}
	byName := map[string]tracingtest.Span{}
	for _, s := range spans {
		if s.TraceID() != callerTrace {
			t.Errorf("span %s in trace %s, want every span in the caller's", s.Name, s.TraceID())
		}
		if !redisSpans[s.ParentID()] {
			byName[s.Name] = s
		}
	}
	root, ok := byName["POST /v1/locks/{key}/acquire"]
	if !ok {
		t.Fatalf("no request span:\n%s", tree)
	}
	if root.ParentID() != callerSpan || root.Kind != 2 /* server */ || root.TraceState != callerState {
		t.Errorf("request span: parent %s kind %v tracestate %q; want parent %s, server, %q", root.ParentID(), root.Kind, root.TraceState, callerSpan, callerState)
	}
	for k, want := range map[string]string{"http.request.method": "POST", "http.route": "/v1/locks/{key}/acquire", "http.response.status_code": "200", "lockd.key": "k", "lockd.kind": "lock"} {
		if got, _ := root.Attr(k); got != want {
			t.Errorf("request span %s = %q, want %q", k, got, want)
		}
	}
	if root.Resource["service.name"] != "lockd" || root.Resource["service.version"] != "v9.9.9" {
		t.Errorf("resource %v: want service.name lockd, service.version v9.9.9", root.Resource)
	}
	wantParent := map[string]string{
		"set": root.SpanID(), "get": root.SpanID(), "evalsha": root.SpanID(), "eval": root.SpanID(),
		"lock.wait": root.SpanID(), "pipeline": byName["lock.wait"].SpanID(), "multi": root.SpanID(),
		"nosuchcommand": root.SpanID(),
	}
	for name, parent := range wantParent {
		s, ok := byName[name]
		if !ok {
			t.Errorf("no %s span:\n%s", name, tree)
			continue
		}
		if s.ParentID() != parent {
			t.Errorf("%s span's parent is %s, want %s:\n%s", name, s.ParentID(), parent, tree)
		}
		if name == "lock.wait" {
			continue
		}
		if sys, _ := s.Attr("db.system"); sys != "redis" || s.Kind != 3 /* client */ {
			t.Errorf("%s span: db.system %q kind %v", name, sys, s.Kind)
		}
		for _, k := range s.AttrKeys() {
			if !slices.Contains([]string{"db.system", "db.operation.name", "db.operation.batch.size", "db.redis.commands", "db.response.status_code"}, k) {
				t.Errorf("%s span has attribute %s: only the command's name and outcome belong there", name, k)
			}
		}
	}
	if cmds, _ := byName["pipeline"].Attr("db.redis.commands"); cmds != "[get pttl]" {
		t.Errorf("pipeline commands %s, want [get pttl]", cmds)
	}
	if st := byName["evalsha"].Status; st.GetCode() == 2 {
		t.Errorf("NOSCRIPT marked the evalsha span failed: %v", st)
	}
	if st := byName["get"].Status; st.GetCode() == 2 {
		t.Errorf("a nil reply marked the get span failed: %v", st)
	}
	if st := byName["nosuchcommand"].Status; st.GetCode() != 2 || st.GetMessage() != "ERR" {
		t.Errorf("unknown command's span status %v, want error ERR", st)
	}
	for k, want := range map[string]string{"lockd.wait.granted": "true", "lockd.wait.outcome": "granted", "lockd.wait.waited_ms": "12", "lockd.wait.max_ms": "2000"} {
		if got, _ := byName["lock.wait"].Attr(k); got != want {
			t.Errorf("lock.wait %s = %q, want %q", k, got, want)
		}
	}
	sets := 0
	for _, s := range spans {
		if s.Name == "set" {
			sets++
		}
	}
	if sets != 1 {
		t.Errorf("%d set spans, want 1 (none for the command outside a request):\n%s", sets, tracingtest.Dump(spans))
	}
	for _, s := range recv.Strings() {
		if strings.Contains(s, secret) {
			t.Errorf("an exported string holds a command's argument: %q", s)
		}
	}
	for _, p := range recv.Payloads() {
		if strings.Contains(string(p), secret) {
			t.Error("the exported payload holds a command's argument")
		}
	}
}
