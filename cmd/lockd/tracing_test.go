package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/tracing"
	"github.com/lockd/lockd/internal/tracing/tracingtest"
)

const (
	tracedKey  = "tracing-api-key-5d1c0e7b9a84f2"
	tracedIdem = "idem-key-3e9d7c51a0b2"
)

// tracedCall is one request to inst with an API key and extra headers; it
// returns the status, the JSON body and the request's id.
func tracedCall(t *testing.T, inst *instance, method, path, body string, headers ...string) (int, map[string]any, string) {
	t.Helper()
	req, err := http.NewRequest(method, inst.url+path, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0, nil, ""
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tracedKey)
	for i := 0; i < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil, ""
	}
	defer res.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(res.Body).Decode(&m)
	return res.StatusCode, m, res.Header.Get("X-Request-Id")
}

// accessLogs are the access log lines of inst by request id.
func accessLogs(inst *instance) map[string]map[string]any {
	lines := map[string]map[string]any{}
	for _, l := range strings.Split(inst.out.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["message"] == "request" {
			id, _ := m["req_id"].(string)
			lines[id] = m
		}
	}
	return lines
}

// lockd serve --otlp-endpoint on a real Redis, against an in-process OTLP
// receiver: the caller's trace id is the spans' and the access log's; a
// waiting acquire's span tree is request → lock.wait → Redis commands;
// an invalid traceparent is served as usual in a fresh trace; no exported
// string holds a token, the API key or the Idempotency-Key; lockd sends
// what is left when it stops.
func TestServeExportsTraces(t *testing.T) {
	recv := tracingtest.Start(t)
	rs := redistest.Start(t)
	env := map[string]string{
		"LOCKD_REDIS":     rs.URL(),
		"LOCKD_AUTH_YAML": "keys:\n  - name: tracer\n    key: " + tracedKey + "\n    scopes: [read, write]\n",
	}
	inst := startServe(t, env, "--otlp-endpoint", recv.URL, "--metrics-auth=false")
	if !strings.Contains(inst.out.String(), `"otlp_endpoint":"`+recv.URL+tracing.DefaultPath+`"`) {
		t.Errorf("no log line says where spans go:\n%s", inst.out)
	}

	const (
		holderTrace  = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"
		waiterTrace  = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2"
		releaseTrace = "c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3"
		parent       = "00f067aa0ba902b7"
		state        = "lockd=test,other=x"
	)
	tp := func(trace string) []string {
		return []string{"traceparent", "00-" + trace + "-" + parent + "-01", "tracestate", state}
	}
	reqTrace := map[string]string{} // request id → the trace id it was sent in

	status, lease, id := tracedCall(t, inst, http.MethodPost, "/v1/locks/jobs:report/acquire", `{"owner":"holder","ttl_ms":30000}`,
		append(tp(holderTrace), "Idempotency-Key", tracedIdem)...)
	if status != 200 {
		t.Fatalf("holder: %d %v", status, lease)
	}
	reqTrace[id] = holderTrace
	holderToken, _ := lease["token"].(string)
	status, _, id = tracedCall(t, inst, http.MethodPost, "/v1/locks/jobs:report/renew", `{"token":"`+holderToken+`"}`, tp(holderTrace)...)
	if status != 200 {
		t.Fatalf("renew: %d", status)
	}
	reqTrace[id] = holderTrace

	type answer struct {
		status int
		lease  map[string]any
		id     string
	}
	waited := make(chan answer, 1)
	go func() {
		s, l, id := tracedCall(t, inst, http.MethodPost, "/v1/locks/jobs:report/acquire", `{"owner":"waiter","ttl_ms":30000,"wait_ms":10000}`, tp(waiterTrace)...)
		waited <- answer{s, l, id}
	}()
	lockdtest.Eventually(t, func() bool { return waitersOf(t, inst.url) == 1 }, 5*time.Second, "the waiter queued")
	time.Sleep(20 * time.Millisecond)
	status, _, id = tracedCall(t, inst, http.MethodPost, "/v1/locks/jobs:report/release", `{"token":"`+holderToken+`"}`, tp(releaseTrace)...)
	if status != 200 {
		t.Fatalf("release: %d", status)
	}
	reqTrace[id] = releaseTrace
	w := <-waited
	if w.status != 200 {
		t.Fatalf("waiter: %d %v", w.status, w.lease)
	}
	reqTrace[w.id] = waiterTrace
	waiterToken, _ := w.lease["token"].(string)

	// An invalid traceparent is ignored: the usual answer, a new trace.
	status, _, badID := tracedCall(t, inst, http.MethodPost, "/v1/locks/jobs:other/acquire", `{"owner":"x"}`,
		"traceparent", "00-"+holderTrace+"-zzzzzzzzzzzzzzzz-01", "tracestate", state)
	if status != 200 {
		t.Fatalf("acquire with an invalid traceparent: %d", status)
	}
	status, _, plainID := tracedCall(t, inst, http.MethodPost, "/v1/locks/jobs:report/release", `{"token":"`+waiterToken+`"}`)
	if status != 200 {
		t.Fatalf("release without traceparent: %d", status)
	}

	// Stopping lockd sends the spans still in its batch.
	inst.stop()
	if err := <-inst.result; err != nil {
		t.Fatalf("lockd serve: %v", err)
	}
	inst.result <- errors.New("already stopped") // for startServe's clean-up

	logs := accessLogs(inst)
	for id, trace := range reqTrace {
		if got := logs[id]["trace_id"]; got != trace {
			t.Errorf("access log of request %s: trace_id %v, want the caller's %s", id, got, trace)
		}
	}
	badTrace, _ := logs[badID]["trace_id"].(string)
	plainTrace, _ := logs[plainID]["trace_id"].(string)
	for name, tr := range map[string]string{"invalid traceparent": badTrace, "no traceparent": plainTrace} {
		if len(tr) != 32 || tr == holderTrace || tr == strings.Repeat("0", 32) {
			t.Errorf("%s: access log trace_id %q, want a fresh one", name, tr)
		}
	}
	logged := map[string]bool{}
	for _, l := range logs {
		tr, _ := l["trace_id"].(string)
		logged[tr] = true
	}

	spans := recv.Spans()
	byID := map[string]tracingtest.Span{}
	for _, s := range spans {
		byID[s.SpanID()] = s
		// Redis calls outside requests (expiry sweeps, the event stream)
		// make no spans of their own.
		if !logged[s.TraceID()] {
			t.Errorf("span %s is in trace %s, which no request logged", s.Name, s.TraceID())
		}
		if s.Resource["service.name"] != "lockd" || s.Resource["service.version"] == "" {
			t.Errorf("span %s: resource %v", s.Name, s.Resource)
		}
		if strings.Contains(s.Name, "jobs:") {
			t.Errorf("span named after a raw path: %s", s.Name)
		}
	}
	t.Logf("waiting acquire, as exported:\n%s", tracingtest.Tree(spans, waiterTrace))

	// requestSpan is the request span of the trace, checked.
	requestSpan := func(trace, name string) tracingtest.Span {
		t.Helper()
		for _, s := range spans {
			if s.TraceID() == trace && s.Name == name {
				if s.ParentID() != parent || s.TraceState != state || s.Kind != 2 /* server */ {
					t.Errorf("%s span in %s: parent %s, tracestate %q, kind %v; want the caller's %s and %q, server", name, trace, s.ParentID(), s.TraceState, s.Kind, parent, state)
				}
				return s
			}
		}
		t.Fatalf("no %s span in trace %s:\n%s", name, trace, tracingtest.Dump(spans))
		return tracingtest.Span{}
	}
	// redisUnder counts the Redis spans whose parent is p.
	redisUnder := func(p tracingtest.Span) int {
		n := 0
		for _, s := range spans {
			if sys, _ := s.Attr("db.system"); sys == "redis" && s.ParentID() == p.SpanID() {
				if s.TraceID() != p.TraceID() {
					t.Errorf("Redis span %s is in another trace than its parent", s.Name)
				}
				n++
			}
		}
		return n
	}
	holder := requestSpan(holderTrace, "POST /v1/locks/{key}/acquire")
	if n := redisUnder(holder); n == 0 {
		t.Errorf("no Redis span under the holder's acquire:\n%s", tracingtest.Tree(spans, holderTrace))
	}
	for k, want := range map[string]string{"http.route": "/v1/locks/{key}/acquire", "http.response.status_code": "200", "http.request.method": "POST", "lockd.key": "jobs:report"} {
		if got, _ := holder.Attr(k); got != want {
			t.Errorf("holder's request span %s = %q, want %q", k, got, want)
		}
	}
	if n := redisUnder(requestSpan(holderTrace, "POST /v1/locks/{key}/renew")); n == 0 {
		t.Error("no Redis span under the renewal")
	}
	if n := redisUnder(requestSpan(releaseTrace, "POST /v1/locks/{key}/release")); n == 0 {
		t.Error("no Redis span under the release")
	}
	waiter := requestSpan(waiterTrace, "POST /v1/locks/{key}/acquire")
	var wait tracingtest.Span
	for _, s := range spans {
		if s.Name == tracing.WaitSpanName && s.ParentID() == waiter.SpanID() {
			wait = s
		}
	}
	if wait.Span == nil {
		t.Fatalf("no lock.wait span under the waiter's request:\n%s", tracingtest.Tree(spans, waiterTrace))
	}
	if granted, _ := wait.Attr("lockd.wait.granted"); granted != "true" {
		t.Errorf("lock.wait granted = %q", granted)
	}
	if n := redisUnder(wait); n == 0 {
		t.Errorf("no Redis span under lock.wait:\n%s", tracingtest.Tree(spans, waiterTrace))
	}
	if redisUnder(waiter) != 0 {
		t.Errorf("a Redis call of the waiting acquire is outside its lock.wait span:\n%s", tracingtest.Tree(spans, waiterTrace))
	}
	// The invalid traceparent's request is a root in its new trace.
	found := false
	for _, s := range spans {
		if s.TraceID() == badTrace && s.Name == "POST /v1/locks/{key}/acquire" {
			found = true
			if s.ParentID() != "" {
				t.Errorf("request with an invalid traceparent has parent %s", s.ParentID())
			}
		}
	}
	if !found {
		t.Errorf("no span in trace %s of the request with an invalid traceparent", badTrace)
	}

	// No secret in anything exported: every string of every span,
	// attribute, event, status and resource, and the raw payloads.
	secrets := map[string]string{
		"the holder's token": holderToken, "the waiter's token": waiterToken,
		"the API key": tracedKey, "the Idempotency-Key": tracedIdem, "an Authorization header": "Bearer ",
	}
	strs := recv.Strings()
	if len(strs) == 0 {
		t.Fatal("nothing exported")
	}
	for what, secret := range secrets {
		if secret == "" {
			t.Fatalf("%s is empty", what)
		}
		probe := secret
		if len(probe) > 16 {
			probe = probe[:16] // a prefix counts too
		}
		for _, s := range strs {
			if strings.Contains(s, probe) {
				t.Errorf("an exported string holds %s: %q", what, s)
			}
		}
		for _, p := range recv.Payloads() {
			if strings.Contains(string(p), probe) {
				t.Errorf("an exported payload holds %s", what)
			}
		}
	}
}

// A malformed --otlp-endpoint is a usage error that does not echo what may
// be a credential.
func TestServeRejectsBadOTLPEndpoint(t *testing.T) {
	for _, ep := range []string{"collector:4318", "grpc://collector:4317", "http://user:hunter2@collector:4318", "http://collector:4318/v1/traces?key=hunter2"} {
		_, err := parseServe([]string{"--otlp-endpoint", ep}, func(string) string { return "" }, &strings.Builder{})
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitUsage {
			t.Errorf("--otlp-endpoint %s: %v, want a usage error", ep, err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("--otlp-endpoint's error quotes the password: %v", err)
		}
	}
	c, err := parseServe(nil, func(k string) string {
		if k == "LOCKD_OTLP_ENDPOINT" {
			return "http://collector:4318"
		}
		return ""
	}, &strings.Builder{})
	if err != nil || c.otlpEndpoint != "http://collector:4318" {
		t.Errorf("LOCKD_OTLP_ENDPOINT: %q, %v", c.otlpEndpoint, err)
	}
}

// The Redis hook is on every client lockd serve builds: one acquire on each
// topology shows Redis spans under its request span.
func TestServeTracesRedisOnEveryTopology(t *testing.T) {
	topologies := map[string]func(t *testing.T) (map[string]string, []string){
		"embedded": func(*testing.T) (map[string]string, []string) { return nil, nil },
		"sentinel": func(t *testing.T) (map[string]string, []string) {
			return map[string]string{"LOCKD_REDIS": redistest.StartSentinel(t).URL()}, nil
		},
		"cluster": func(t *testing.T) (map[string]string, []string) {
			return map[string]string{"LOCKD_REDIS": redistest.StartCluster(t).URL()}, nil
		},
		"redlock": func(t *testing.T) (map[string]string, []string) {
			var urls []string
			for range 3 {
				urls = append(urls, redistest.Start(t).URL())
			}
			return nil, []string{"--redlock", strings.Join(urls, ",")}
		},
	}
	for name, start := range topologies {
		t.Run(name, func(t *testing.T) {
			recv := tracingtest.Start(t)
			env, args := start(t)
			inst := startServe(t, env, append(args, "--otlp-endpoint", recv.URL)...)
			const trace = "d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4"
			req, err := http.NewRequest(http.MethodPost, inst.url+"/v1/locks/topo:"+name+"/acquire", strings.NewReader(`{"owner":"o"}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("traceparent", "00-"+trace+"-00f067aa0ba902b7-01")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("acquire: %d", res.StatusCode)
			}
			inst.stop()
			inst.result <- <-inst.result // startServe's clean-up reads it again
			spans := recv.Spans()
			var request string
			for _, s := range spans {
				if s.TraceID() == trace && s.Name == "POST /v1/locks/{key}/acquire" {
					request = s.SpanID()
				}
			}
			n := 0
			for _, s := range spans {
				if sys, _ := s.Attr("db.system"); sys == "redis" && s.TraceID() == trace && s.ParentID() == request {
					n++
				}
			}
			if request == "" || n == 0 {
				t.Fatalf("want a request span with Redis spans under it:\n%s", tracingtest.Tree(spans, trace))
			}
			t.Logf("%s:\n%s", name, tracingtest.Tree(spans, trace))
		})
	}
}
