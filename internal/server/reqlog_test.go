package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// Every log line of a request carries its id (the X-Request-Id answered)
// and trace id; its access log line also the lease's owner and, on a
// refusal, the holder. These ride on the request's exchange, not on a
// logger made per request, so they are checked line by line here.
func TestRequestLogLines(t *testing.T) {
	f := authFixture(t, false)
	acquire := func(key, owner string) (int, string, http.Header) {
		return call(t, http.MethodPost, f.url+"/v1/locks/"+key+"/acquire", "write-key-0123456789", `{"owner":"`+owner+`"}`)
	}
	tests := []struct {
		name    string
		send    func() (int, string, http.Header)
		status  int
		message string            // the line looked for
		want    map[string]string // fields it must have ("" : must not have)
	}{
		{"a grant names its owner", func() (int, string, http.Header) { return acquire("logged", "w1") },
			200, "request", map[string]string{"owner": "w1", "holder": "", "key": "logged", "status": "200"}},
		{"a refusal names the holder", func() (int, string, http.Header) { return acquire("logged", "w2") },
			409, "request", map[string]string{"owner": "w2", "holder": "w1", "key": "logged", "status": "409"}},
		{"a refused key's line is the request's", func() (int, string, http.Header) {
			return call(t, http.MethodPost, f.url+"/v1/locks/logged/acquire", "no-such-key-0123456789", `{}`)
		}, 401, "API key refused", map[string]string{"owner": "", "holder": ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body, h := tc.send()
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			id := h.Get("X-Request-Id")
			line := logLine(t, f.logs.String(), id, tc.message)
			if tid, _ := line["trace_id"].(string); len(tid) != 32 {
				t.Errorf("trace_id %q: want 32 hex digits", tid)
			}
			for k, want := range tc.want {
				got, ok := line[k]
				switch {
				case want == "" && ok:
					t.Errorf("%s = %v, want none", k, got)
				case want != "" && jsonText(got) != want:
					t.Errorf("%s = %v, want %s", k, got, want)
				}
			}
		})
	}
}

// logLine is the JSON log line with req_id id and message msg.
func logLine(t *testing.T, logs, id, msg string) map[string]any {
	t.Helper()
	for _, l := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["req_id"] == id && m["message"] == msg {
			return m
		}
	}
	t.Fatalf("no %q line with req_id %q in:\n%s", msg, id, logs)
	return nil
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return strings.Trim(string(b), `"`)
}
