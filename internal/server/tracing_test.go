package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/server"
	"github.com/lockd/lockd/internal/tracing"
	"github.com/lockd/lockd/internal/tracing/tracingtest"
)

var traceIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// sendTraced makes a request with the given headers and returns the response and
// its access log line.
func sendTraced(t *testing.T, f *fixture, method, path, body string, headers ...string) (*http.Response, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, f.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res, accessLine(t, f.logs, res.Header.Get("X-Request-Id"))
}

// accessLine is the access log line of the request with id reqID.
func accessLine(t *testing.T, logs *lockdtest.Buffer, reqID string) map[string]any {
	t.Helper()
	var line map[string]any
	lockdtest.Eventually(t, func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["req_id"] == reqID && m["message"] == "request" {
				line = m
				return true
			}
		}
		return false
	}, 2*time.Second, "access log line of request "+reqID)
	return line
}

const (
	testTrace  = "0af7651916cd43dd8448eb211c80319c"
	testParent = "b7ad6b7169203331"
)

// Without an endpoint, a valid traceparent's trace id is the request's, in
// its access log line; an invalid one is ignored (the request is served as
// usual, with a trace id of its own), and so is a missing one.
func TestTraceparentInAccessLog(t *testing.T) {
	f := newFixture(t)
	res, line := sendTraced(t, f, http.MethodPost, "/v1/locks/traced/acquire", `{"owner":"a"}`,
		"traceparent", "00-"+testTrace+"-"+testParent+"-01", "tracestate", "vendor=opaque")
	if res.StatusCode != 200 || line["trace_id"] != testTrace {
		t.Fatalf("with traceparent: %d, access log trace_id %v, want %s", res.StatusCode, line["trace_id"], testTrace)
	}
	seen := map[any]bool{testTrace: true}
	for _, tp := range []string{"", "00-xyz", "00-" + testTrace + "-" + testParent + "-1", "01-" + testTrace, strings.Repeat("-", 10000)} {
		var headers []string
		if tp != "" {
			headers = []string{"traceparent", tp}
		}
		res, line := sendTraced(t, f, http.MethodPost, "/v1/locks/untraced/acquire", `{"owner":"b","ttl_ms":1000}`, headers...)
		id, _ := line["trace_id"].(string)
		if res.StatusCode != 200 && res.StatusCode != 409 {
			t.Errorf("traceparent %.30q: status %d, want the usual answer", tp, res.StatusCode)
		}
		if !traceIDPattern.MatchString(id) || seen[id] {
			t.Errorf("traceparent %.30q: access log trace_id %q, want a fresh one", tp, id)
		}
		seen[id] = true
	}
	// Probes too.
	res, line = sendTraced(t, f, http.MethodGet, "/livez", "", "traceparent", "garbage")
	if id, _ := line["trace_id"].(string); res.StatusCode != 200 || !traceIDPattern.MatchString(id) {
		t.Errorf("/livez with a bad traceparent: %d, trace_id %q", res.StatusCode, id)
	}
}

// With an endpoint: each request's span is named after its route, a child
// of the caller's span; an acquire that may wait has a lock.wait span
// under it with what came of the wait.
func TestRequestAndWaitSpans(t *testing.T) {
	recv := tracingtest.Start(t)
	tracer, err := tracing.New(context.Background(), tracing.Config{Endpoint: recv.URL, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, nil, func(c *server.Config) { c.Tracer = tracer })
	tp := func(trace string) []string { return []string{"traceparent", "00-" + trace + "-" + testParent + "-01"} }
	const (
		holderTrace  = "11111111111111111111111111111111"
		waiterTrace  = "22222222222222222222222222222222"
		timeoutTrace = "33333333333333333333333333333333"
		missingTrace = "44444444444444444444444444444444"
	)
	holder := f.acquire(t, "queue:a", api.AcquireRequest{Owner: ptr("holder")})
	// A try (wait_ms 0) has no wait span.
	if res, _ := sendTraced(t, f, http.MethodPost, "/v1/locks/queue:a/acquire", `{"owner":"x"}`, tp(holderTrace)...); res.StatusCode != 409 {
		t.Fatalf("try on a held key: %d", res.StatusCode)
	}
	if res, _ := sendTraced(t, f, http.MethodPost, "/v1/locks/queue:a/acquire", `{"owner":"late","wait_ms":150}`, tp(timeoutTrace)...); res.StatusCode != 409 {
		t.Fatalf("wait that times out: %d", res.StatusCode)
	}
	done := make(chan int, 1)
	go func() {
		res, _ := sendTraced(t, f, http.MethodPost, "/v1/locks/queue:a/acquire", `{"owner":"waiter","wait_ms":5000}`, tp(waiterTrace)...)
		done <- res.StatusCode
	}()
	lockdtest.Eventually(t, func() bool { return f.engine.Waiters() == 1 }, 5*time.Second, "the waiter queued")
	time.Sleep(50 * time.Millisecond)
	if res, _ := sendTraced(t, f, http.MethodPost, "/v1/locks/queue:a/release", `{"token":"`+holder.Token+`"}`); res.StatusCode != 200 {
		t.Fatalf("release: %d", res.StatusCode)
	}
	if status := <-done; status != 200 {
		t.Fatalf("waiter: %d", status)
	}
	if res, _ := sendTraced(t, f, http.MethodGet, "/v1/nothing/here", "", tp(missingTrace)...); res.StatusCode != 404 {
		t.Fatalf("unknown path: %d", res.StatusCode)
	}
	if err := tracer.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	spans := recv.Spans()
	inTrace := func(trace string) map[string]tracingtest.Span {
		m := map[string]tracingtest.Span{}
		for _, s := range spans {
			if s.TraceID() == trace {
				m[s.Name] = s
			}
		}
		return m
	}
	const route = "POST /v1/locks/{key}/acquire"
	for _, s := range spans {
		if strings.Contains(s.Name, "queue:a") || strings.Contains(s.Name, "/nothing") {
			t.Errorf("span named after a raw path: %q", s.Name)
		}
	}

	waiter := inTrace(waiterTrace)
	req, wait := waiter[route], waiter[tracing.WaitSpanName]
	if req.Span == nil || wait.Span == nil {
		t.Fatalf("waiter's trace lacks the request or wait span:\n%s", tracingtest.Dump(spans))
	}
	t.Logf("waiting acquire:\n%s", tracingtest.Tree(spans, waiterTrace))
	if req.ParentID() != testParent || wait.ParentID() != req.SpanID() {
		t.Errorf("request span's parent %s (want %s), wait span's %s (want %s)", req.ParentID(), testParent, wait.ParentID(), req.SpanID())
	}
	for k, want := range map[string]string{"lockd.wait.granted": "true", "lockd.wait.outcome": "granted", "lockd.key": "queue:a", "lockd.wait.max_ms": "5000"} {
		if got, _ := wait.Attr(k); got != want {
			t.Errorf("wait span %s = %q, want %q", k, got, want)
		}
	}
	if ms, _ := wait.Attr("lockd.wait.waited_ms"); ms == "0" || ms == "" {
		t.Errorf("wait span waited_ms %q, want the time queued", ms)
	}
	for k, want := range map[string]string{"http.request.method": "POST", "http.route": "/v1/locks/{key}/acquire", "http.response.status_code": "200", "lockd.key": "queue:a", "lockd.kind": "lock"} {
		if got, _ := req.Attr(k); got != want {
			t.Errorf("request span %s = %q, want %q", k, got, want)
		}
	}

	timedOut := inTrace(timeoutTrace)[tracing.WaitSpanName]
	if granted, _ := timedOut.Attr("lockd.wait.granted"); granted != "false" {
		t.Errorf("the wait that timed out: granted %q, want false", granted)
	}
	if outcome, _ := timedOut.Attr("lockd.wait.outcome"); outcome != "held" {
		t.Errorf("the wait that timed out: outcome %q, want held", outcome)
	}
	try := inTrace(holderTrace)
	if _, ok := try[tracing.WaitSpanName]; ok || try[route].Span == nil {
		t.Errorf("a try (wait_ms 0): want a request span and no wait span:\n%s", tracingtest.Dump(spans))
	}
	missing := inTrace(missingTrace)["GET"]
	if missing.Span == nil {
		t.Fatalf("no span named GET for the unknown path:\n%s", tracingtest.Dump(spans))
	}
	if _, ok := missing.Attr("http.route"); ok {
		t.Error("an unmatched request's span has a route")
	}
	if status, _ := missing.Attr("http.response.status_code"); status != "404" {
		t.Errorf("unknown path's span status %q", status)
	}
}

// benchTracer is the tracer of BenchmarkHTTPVersusBare's lockd when
// BENCH_OTLP is set: every request traced (spans for the request and each
// Redis call) and exported over OTLP/HTTP to an in-process endpoint that
// reads and drops them, so that the figure prices lockd's side of tracing,
// not a collector's. Unset, lockd runs as without --otlp-endpoint.
func benchTracer(b *testing.B) *tracing.Tracer {
	if os.Getenv("BENCH_OTLP") == "" {
		return nil
	}
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	tracer, err := tracing.New(context.Background(), tracing.Config{Endpoint: sink.URL, Version: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = tracer.Shutdown(context.Background())
		sink.Close()
	})
	b.Log("tracing on: spans exported over OTLP/HTTP to an in-process sink (BENCH_OTLP)")
	return tracer
}

// The history events a request causes carry its trace id: the acquire's,
// the release's, a force-release's, a session's end; a lapse is nobody's
// request and carries none.
func TestTraceIDInHistory(t *testing.T) {
	f := newFixture(t)
	tp := func(n int) (string, []string) {
		id := fmt.Sprintf("%032x", 0xabc000+n)
		return id, []string{"traceparent", "00-" + id + "-" + testParent + "-01"}
	}
	acqID, acqH := tp(1)
	req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/locks/tr:a/acquire", strings.NewReader(`{"ttl_ms":30000}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(acqH[0], acqH[1])
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var l api.Lease
	if err := json.NewDecoder(res.Body).Decode(&l); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	relID, relH := tp(2)
	sendTraced(t, f, http.MethodPost, "/v1/locks/tr:a/release", `{"token":"`+l.Token+`"}`, relH...)
	forceID, forceH := tp(3)
	f.acquire(t, "tr:b", api.AcquireRequest{})
	sendTraced(t, f, http.MethodPost, "/v1/locks/tr:b/force-release", `{}`, forceH...)
	f.acquire(t, "tr:c", api.AcquireRequest{TtlMs: ptr[int64](100)})
	time.Sleep(200 * time.Millisecond)
	id := *f.createSession(t, 5000).Session
	f.acquire(t, "tr:d", api.AcquireRequest{Session: &id})
	endID, endH := tp(4)
	sendTraced(t, f, http.MethodDelete, "/v1/sessions/"+id, "", endH...)

	for _, c := range []struct {
		key, typ, trace string
	}{
		{"tr:a", "acquired", acqID},
		{"tr:a", "released", relID},
		{"tr:b", "force_released", forceID},
		{"tr:c", "expired", ""},
		{"tr:d", "released", endID},
	} {
		res, err := f.client.GetLockHistoryWithResponse(context.Background(), c.key, nil)
		if err != nil || res.JSON200 == nil {
			t.Fatalf("history of %s: %v", c.key, err)
		}
		found := false
		for _, e := range res.JSON200.Events {
			if string(e.Type) != c.typ {
				continue
			}
			found = true
			got := ""
			if e.TraceId != nil {
				got = *e.TraceId
			}
			if got != c.trace {
				t.Errorf("%s %s: trace_id %q, want %q", c.key, c.typ, got, c.trace)
			}
		}
		if !found {
			t.Errorf("%s has no %s event: %s", c.key, c.typ, res.Body)
		}
	}
}
