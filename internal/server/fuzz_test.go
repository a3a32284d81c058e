package server_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/server"
)

// keyPattern is the contract's key rule (api.md, openapi.yaml).
var keyPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$`)

func validKeyReference(s string) bool { return keyPattern.MatchString(s) }

func FuzzValidKey(f *testing.F) {
	for _, s := range []string{"order:pay:12345", "", "a", ".a", "a/b", "a b", "ä", strings.Repeat("k", 200), strings.Repeat("k", 201), "a\x00", "A-Z_0.9@x:y", "{k}", "k*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := server.ValidKey(s), validKeyReference(s); got != want {
			t.Fatalf("ValidKey(%q) = %v, want %v", s, got, want)
		}
	})
}

// Any key in the path gets 200 or 404 when valid, else a 400 naming
// "key" (or a 404 for a path that is no route); never a 500.
func FuzzKeyThroughRouter(f *testing.F) {
	fx := newFixture(f)
	for _, s := range []string{"order:pay:1", "..", "a/b", "%", "a b", "\u00e4", strings.Repeat("x", 300), "a?b", "a#b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		res, b, err := do(http.MethodGet, fx.url+"/v1/locks/"+url.PathEscape(key), "", "")
		if err != nil {
			t.Fatal(err)
		}
		valid := validKeyReference(key)
		switch {
		case valid && (res.StatusCode == 200 || res.StatusCode == 404):
		case !valid && res.StatusCode == 400:
			if p := problemOf(t, res, b); p.Field == nil || *p.Field != "key" {
				t.Fatalf("400 without field key: %s", b)
			}
		case !valid && res.StatusCode == 404:
			problemOf(t, res, b)
		default:
			t.Fatalf("key %q: status %d: %s", key, res.StatusCode, b)
		}
	})
}

// Any body to acquire gets 200 or a 4xx problem+json; never a 500.
func FuzzAcquireBody(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"owner":"w","ttl_ms":1000}`, `{"ttl_ms":-1}`, `{"wait_ms":1e99}`, `[]`, `null`, `{"owner":"\u0000"}`, `{"token":"x"}`, `{"a":1}`, `{"owner":"a"}{}`, `{"ttl_ms":"1"}`, "\xff\xfe", `{"owner":` + strings.Repeat("[", 10000)} {
		f.Add(s)
	}
	fx := newFixture(f)
	f.Fuzz(func(t *testing.T, body string) {
		res, b, err := do(http.MethodPost, fx.url+"/v1/locks/fuzz:"+url.PathEscape(strings.Repeat("k", len(body)%7))+"k/acquire", "application/json", body)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case res.StatusCode == 200:
			var l api.Lease
			if json.Unmarshal(b, &l) != nil || l.Token == "" {
				t.Fatalf("200 without a lease: %s", b)
			}
		case res.StatusCode >= 400 && res.StatusCode < 500:
			problemOf(t, res, b)
		default:
			t.Fatalf("status %d for body %q: %s", res.StatusCode, body, b)
		}
	})
}
