package server_test

import (
	"strings"
	"testing"
)

// Item 3 of issue 9: any correct client works: percent-encoded keys (as
// clients that escape every ':' send them) are the decoded key, HEAD on the
// probes, and invalid UTF-8 in a string field is a 400 that names the
// field. The fixture checks every exchange against api/openapi.yaml, with
// path parameters decoded as the server decodes them. The rows run in
// order: the encoded acquire makes the lease the next rows read.
func TestAnyCorrectClient(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name, method, path, ct, body string
		status                       int
		field                        string
		want                         string // in the answer
	}{
		{"encoded key acquire", "POST", "/v1/locks/order%3Apay%3A1/acquire", "application/json", `{"owner":"enc"}`, 200, "", `"key":"order:pay:1"`},
		{"plain key sees it", "GET", "/v1/locks/order:pay:1", "", "", 200, "", `"owner":"enc"`},
		{"lower-case escapes", "GET", "/v1/locks/order%3apay%3a1", "", "", 200, "", `"key":"order:pay:1"`},
		{"encoded @ and .", "POST", "/v1/locks/svc%40eu%2Eweb/acquire", "application/json", `{}`, 200, "", `"key":"svc@eu.web"`},
		{"encoded key history", "GET", "/v1/locks/order%3Apay%3A1/history", "", "", 200, "", `"type":"acquired"`},
		{"encoded bad key", "GET", "/v1/locks/bad%20key", "", "", 400, "key", ""},
		// A '%' in the key itself, escaped once: decoded once, it is no key.
		{"escaped percent is no key", "POST", "/v1/locks/order%253Apay%253A1/acquire", "application/json", `{}`, 400, "key", ""},
		{"encoded slash stays refused", "GET", "/v1/locks/a%2Fb", "", "", 400, "key", ""},
		{"invalid UTF-8 owner", "POST", "/v1/locks/u:1/acquire", "application/json", "{\"owner\":\"a\xffb\"}", 400, "owner", ""},
		{"invalid UTF-8 reason", "POST", "/v1/locks/u:1/force-release", "application/json", "{\"reason\":\"\xc3\"}", 400, "reason", ""},
		{"invalid UTF-8 token", "POST", "/v1/locks/u:1/release", "application/json", "{\"token\":\"\xfe\xfe\"}", 400, "token", ""},
		{"HEAD livez", "HEAD", "/livez", "", "", 200, "", ""},
		{"HEAD healthz", "HEAD", "/healthz", "", "", 200, "", ""},
		{"HEAD readyz", "HEAD", "/readyz", "", "", 200, "", ""},
		{"HEAD metrics", "HEAD", "/metrics", "", "", 200, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, body, err := do(tc.method, f.url+tc.path, tc.ct, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tc.status, body)
			}
			if !strings.Contains(string(body), tc.want) {
				t.Fatalf("answer %s, want it to contain %s", body, tc.want)
			}
			if tc.field != "" {
				if p := problemOf(t, res, body); p.Field == nil || *p.Field != tc.field {
					t.Fatalf("field %v, want %s: %s", p.Field, tc.field, body)
				}
			}
			if tc.method == "HEAD" && len(body) != 0 {
				t.Fatalf("HEAD has a body: %q", body)
			}
		})
	}
}
