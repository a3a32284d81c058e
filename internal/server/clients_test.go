package server_test

import (
	"testing"
)

// Item 3 of issue 9: any correct client works: HEAD on the probes, and
// invalid UTF-8 in a string field is a 400 that names the field.
// Percent-encoded keys and null bodies: TestServeAnyCorrectClient
// (cmd/lockd), through lockd serve's router (lockdtest's spec validator
// checks path parameters before unescaping them).
func TestAnyCorrectClient(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name, method, path, ct, body string
		status                       int
		field                        string
	}{
		{"encoded slash stays refused", "GET", "/v1/locks/a%2Fb", "", "", 400, "key"},
		{"invalid UTF-8 owner", "POST", "/v1/locks/u:1/acquire", "application/json", "{\"owner\":\"a\xffb\"}", 400, "owner"},
		{"invalid UTF-8 reason", "POST", "/v1/locks/u:1/force-release", "application/json", "{\"reason\":\"\xc3\"}", 400, "reason"},
		{"invalid UTF-8 token", "POST", "/v1/locks/u:1/release", "application/json", "{\"token\":\"\xfe\xfe\"}", 400, "token"},
		{"HEAD healthz", "HEAD", "/healthz", "", "", 200, ""},
		{"HEAD readyz", "HEAD", "/readyz", "", "", 200, ""},
		{"HEAD metrics", "HEAD", "/metrics", "", "", 200, ""},
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
