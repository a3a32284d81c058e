package lockdtest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lockd/lockd/internal/lockdtest"
)

// The spec check must catch each kind of drift: a test suite that passes
// through a checker that cannot fail proves nothing.
func TestValidateSpecCatchesDrift(t *testing.T) {
	problem := func(status int, code string) string {
		return fmt.Sprintf(`{"type":"/problems/%s","title":"t","status":%d,"code":"%s"}`, code, status, code)
	}
	lease := `{"key":"k","mode":"exclusive","owner":"o","token":"t","fence":1,"count":1,"ttl_ms":30000,"acquired_at":"2026-01-01T00:00:00Z","expires_at":"2026-01-01T00:00:30Z"}`
	permit := `{"key":"k","mode":"permit","limit":3,"owner":"o","token":"t","fence":1,"count":1,"ttl_ms":30000,"acquired_at":"2026-01-01T00:00:00Z","expires_at":"2026-01-01T00:00:30Z"}`
	tests := []struct {
		name       string
		method     string
		path, body string
		status     int
		ctype      string
		header     http.Header
		answer     string
		want       string // "" = no violation
	}{
		{"good acquire", "POST", "/v1/locks/k/acquire", `{}`, 200, "application/json", nil, lease, ""},
		{"undeclared status", "POST", "/v1/locks/k/acquire", `{}`, 418, "application/problem+json", nil, problem(418, "internal"), "status is not supported"},
		{"body off schema", "POST", "/v1/locks/k/acquire", `{}`, 200, "application/json", nil, `{"key":"k"}`, "does not match"},
		{"missing required header", "POST", "/v1/locks/k/acquire", `{}`, 429, "application/problem+json", nil, problem(429, "too_many_requests"), "Retry-After"},
		{"declared header present", "POST", "/v1/locks/k/acquire", `{}`, 429, "application/problem+json", http.Header{"Retry-After": {"1"}}, problem(429, "too_many_requests"), ""},
		{"accepts what the spec rejects", "POST", "/v1/locks/k/acquire", `{"ttl_ms":5}`, 200, "application/json", nil, lease, "rejects"},
		{"refuses it: fine", "POST", "/v1/locks/k/acquire", `{"ttl_ms":5}`, 400, "application/problem+json", nil, problem(400, "invalid_request"), ""},
		{"405 without Allow", "DELETE", "/v1/locks/k", "", 405, "application/problem+json", nil, problem(405, "method_not_allowed"), "Allow"},
		{"405 with Allow", "DELETE", "/v1/locks/k", "", 405, "application/problem+json", http.Header{"Allow": {"GET"}}, problem(405, "method_not_allowed"), ""},
		{"unknown /v1 path as text", "GET", "/v1/nope", "", 404, "text/plain", nil, "404 page not found", "problem+json"},
		// A key with ':' sent percent-encoded, as generated clients send
		// it: the contract's key pattern applies to the decoded key.
		{"percent-encoded key", "POST", "/v1/locks/order%3Apay%3A1/acquire", `{}`, 200, "application/json", nil, lease, ""},
		{"percent-encoded bad key", "POST", "/v1/locks/bad%20key/acquire", `{}`, 200, "application/json", nil, lease, "rejects"},
		{"dashboard passes", "GET", "/ui/locks/k", "", 200, "text/html", nil, "<p>hi</p>", ""},
		{"hold stream", "POST", "/v1/locks/k/hold", `{}`, 200, "text/event-stream", nil, "event: acquired\ndata: " + lease + "\n\n: keep-alive\n\n", ""},
		{"semaphore acquire", "POST", "/v1/semaphores/k/acquire", `{"limit":3}`, 200, "application/json", nil, permit, ""},
		{"semaphore acquire without limit granted", "POST", "/v1/semaphores/k/acquire", `{}`, 200, "application/json", nil, permit, "rejects"},
		{"lease with an unknown mode", "POST", "/v1/locks/k/acquire", `{}`, 200, "application/json", nil, strings.Replace(lease, "exclusive", "read", 1), "does not match"},
		{"hold event off schema", "POST", "/v1/locks/k/hold", `{}`, 200, "text/event-stream", nil, "event: acquired\ndata: {\"key\":\"k\"}\n\n", "does not match"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.header {
					w.Header()[k] = v
				}
				w.Header().Set("Content-Type", tc.ctype)
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.answer))
			})
			var got []string
			v := lockdtest.ValidateSpec(h, func(f string, a ...any) { got = append(got, fmt.Sprintf(f, a...)) })
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			v.ServeHTTP(httptest.NewRecorder(), req)
			all := strings.Join(got, "\n")
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("unexpected violation: %s", all)
			case tc.want != "" && !strings.Contains(all, tc.want):
				t.Errorf("violations %q, want one mentioning %q", all, tc.want)
			}
		})
	}
}
