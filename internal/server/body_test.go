package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lockd/lockd/internal/server"
)

// A body is read whole whether its length is sent (Content-Length) or
// not (chunked), and refused past MaxBody either way.
func TestBodyLength(t *testing.T) {
	f := newFixture(t)
	big := `{"owner":"` + strings.Repeat("a", server.MaxBody) + `"}`
	tests := []struct {
		name    string
		body    string
		chunked bool
		status  int
	}{
		{"sized", `{"ttl_ms":5000}`, false, 200},
		{"chunked", `{"ttl_ms":5000}`, true, 200},
		{"sized, too large", big, false, 413},
		{"chunked, too large", big, true, 413},
		{"chunked, not JSON", `{"ttl_ms":`, true, 400},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(tc.body)
			if tc.chunked {
				body = io.MultiReader(body) // no length known: sent chunked
			}
			req, err := http.NewRequest(http.MethodPost, f.url+"/v1/locks/body-"+string(rune('a'+i))+"/acquire", body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tc.status, b)
			}
			if sent := req.ContentLength != 0; sent == tc.chunked {
				t.Fatalf("the request said its length (%d): want chunked %v", req.ContentLength, tc.chunked)
			}
		})
	}
}
