package server_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
)

// Any key in the path of a lock or a semaphore gets 200 or 404 when
// valid, else a 400 naming "key" (or a 404 for a path that is no route);
// never a 500.
func FuzzKeyThroughRouter(f *testing.F) {
	fx := newFixture(f)
	for _, s := range []string{"order:pay:1", "..", "a/b", "%", "a b", "\u00e4", strings.Repeat("x", 300), "a?b", "a#b", "", "sem/x", "sem%2Fx"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		for _, base := range []string{"/v1/locks/", "/v1/semaphores/"} {
			res, b, err := do(http.MethodGet, fx.url+base+url.PathEscape(key), "", "")
			if err != nil {
				t.Fatal(err)
			}
			valid := lock.ValidKey(key) // held to the contract by lock.FuzzValidKey
			switch {
			case valid && (res.StatusCode == 200 || res.StatusCode == 404):
			case !valid && res.StatusCode == 400:
				if p := problemOf(t, res, b); p.Field == nil || *p.Field != "key" {
					t.Fatalf("400 without field key: %s", b)
				}
			case !valid && res.StatusCode == 404:
				problemOf(t, res, b)
			default:
				t.Fatalf("%s%q: status %d: %s", base, key, res.StatusCode, b)
			}
		}
	})
}

// Any body to a lock's or a semaphore's acquire gets 200 or a 4xx
// problem+json; never a 500.
func FuzzAcquireBody(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"owner":"w","ttl_ms":1000}`, `{"ttl_ms":-1}`, `{"wait_ms":1e99}`, `[]`, `null`, `{"owner":"\u0000"}`, `{"token":"x"}`, `{"a":1}`, `{"owner":"a"}{}`, `{"ttl_ms":"1"}`, "\xff\xfe", `{"owner":` + strings.Repeat("[", 10000),
		`{"mode":"shared"}`, `{"mode":"exclusive","ttl_ms":500}`, `{"mode":"x"}`, `{"mode":null}`,
		`{"limit":3}`, `{"limit":1,"ttl_ms":200}`, `{"limit":10000}`, `{"limit":10001}`, `{"limit":-9223372036854775808}`, `{"limit":9223372036854775808}`} {
		f.Add(s)
	}
	fx := newFixture(f)
	f.Fuzz(func(t *testing.T, body string) {
		for _, base := range []string{"/v1/locks/", "/v1/semaphores/"} {
			res, b, err := do(http.MethodPost, fx.url+base+"fuzz:"+url.PathEscape(strings.Repeat("k", len(body)%7))+"k/acquire", "application/json", body)
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
				t.Fatalf("%s: status %d for body %q: %s", base, res.StatusCode, body, b)
			}
		}
	})
}
