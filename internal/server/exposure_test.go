package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
)

// N14: /readyz tells anyone its status (probes carry no key), and the Redis
// nodes' addresses and roles only to a caller with a valid API key; with
// auth off, only to one that names the server by a Host it answers to, so
// a DNS-rebinding page learns nothing.
func TestReadyzDetailsNeedAKey(t *testing.T) {
	keys, err := auth.Parse([]byte(authYAML))
	if err != nil {
		t.Fatal(err)
	}
	rs := redistest.Start(t)
	on := newFixtureWith(t, rs, func(c *server.Config) { c.Keys = keys })
	off := newFixtureWith(t, rs, func(c *server.Config) { c.CheckHost = true })
	tests := []struct {
		name, url, key, host string
		details              bool
	}{
		{"auth on, no key", on.url, "", "", false},
		{"auth on, unknown key", on.url, "not-a-key-0123456789", "", false},
		{"auth on, read key", on.url, "read-key-0123456789", "", true},
		{"auth on, prefix-limited key", on.url, "prefix-key-0123456789", "", true},
		{"auth off, loopback Host", off.url, "", "localhost:8080", true},
		{"auth off, rebinding Host", off.url, "", "rebind.evil.example:8080", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, tc.url+"/readyz", nil)
			if tc.key != "" {
				req.Header.Set("Authorization", "Bearer "+tc.key)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			body := string(b)
			if res.StatusCode != 200 || !strings.Contains(body, `"status":"ok"`) {
				t.Fatalf("/readyz: %d %s", res.StatusCode, body)
			}
			if got := strings.Contains(body, rs.Addr); got != tc.details {
				t.Fatalf("/readyz names the Redis node: %v, want %v: %s", got, tc.details, body)
			}
			if got := strings.Contains(body, `"topology"`); got != tc.details {
				t.Fatalf("/readyz names the topology: %v, want %v: %s", got, tc.details, body)
			}
		})
	}
}

// N13: the contention metrics' prefix labels start with the auth file's
// prefixes: a key that makes up many first segments takes the free labels
// only, never a configured tenant's, which would else count as "other"
// until a restart.
func TestContentionLabelsSeededFromAuthFile(t *testing.T) {
	keys, err := auth.Parse([]byte(`
keys:
  - {name: squatter, key: "squatter-key-0123456789", scopes: [write]}
  - {name: payments, key: "payments-key-0123456789", scopes: [read], prefixes: ["payments:", "billing:eu:"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	// Two labels are the tenants' (payments: and billing:, for every
	// kind), two are left for whoever comes first.
	f := newFixtureWith(t, redistest.Start(t), func(c *server.Config) {
		c.Keys = keys
		c.Contention = server.ContentionConfig{MaxPrefixes: 4}
	})
	for i := range 10 {
		if status, body, _ := call(t, "POST", fmt.Sprintf("%s/v1/locks/squat%d:x/acquire", f.url, i), "squatter-key-0123456789", `{}`); status != 200 {
			t.Fatalf("squat %d: %d %s", i, status, body)
		}
	}
	// The tenant's own acquires come after the squatting.
	for _, path := range []string{"/v1/locks/payments:critical/acquire", "/v1/locks/billing:eu:1/acquire"} {
		if status, body, _ := call(t, "POST", f.url+path, "squatter-key-0123456789", `{}`); status != 200 {
			t.Fatalf("%s: %d %s", path, status, body)
		}
	}
	if status, body, _ := call(t, "POST", f.url+"/v1/semaphores/payments:pool/acquire", "squatter-key-0123456789", `{"limit":1}`); status != 200 {
		t.Fatalf("semaphore: %d %s", status, body)
	}
	if status, body, _ := call(t, "POST", f.url+"/v1/elections/billing:eu:leader/campaign", "squatter-key-0123456789", `{}`); status != 200 {
		t.Fatalf("election: %d %s", status, body)
	}
	_, metrics, _ := call(t, "GET", f.url+"/metrics", "payments-key-0123456789", "")
	for _, want := range []string{
		`lockd_acquires_total{kind="lock",outcome="granted",prefix="payments:"} 1`,
		`lockd_acquires_total{kind="lock",outcome="granted",prefix="billing:"} 1`,
		`lockd_acquires_total{kind="semaphore",outcome="granted",prefix="payments:"} 1`,
		`lockd_acquires_total{kind="election",outcome="granted",prefix="billing:"} 1`,
		`lockd_acquires_total{kind="lock",outcome="granted",prefix="other"} 8`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	squatted := 0
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, `lockd_acquires_total{kind="lock",outcome="granted",prefix="squat`) {
			squatted++
		}
	}
	if squatted != 2 {
		t.Errorf("%d labels of made-up prefixes, want the 2 left free", squatted)
	}
}

// N18: a key limited to one prefix that lists more broadly walks only its
// own prefix: paging with limit=1 gives one page per lock of its own (and
// perhaps a last empty one), not an empty page per other tenant's lock,
// which told how many there are.
func TestBroadListingWalksOnlyTheKeysPrefix(t *testing.T) {
	keys, err := auth.Parse([]byte(authYAML))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureWith(t, redistest.Start(t), func(c *server.Config) { c.Keys = keys })
	ctx := context.Background()
	for i := range 3 {
		if _, err := f.engine.Acquire(ctx, lock.Lock(fmt.Sprintf("deploy:%d", i)), lock.AcquireRequest{Owner: "o", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		if _, err := f.engine.Acquire(ctx, lock.Lock(fmt.Sprintf("order:%d", i)), lock.AcquireRequest{Owner: "o", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	pages, rows, cursor := 0, 0, ""
	for {
		url := f.url + "/v1/locks?limit=1"
		if cursor != "" {
			url += "&cursor=" + neturl.QueryEscape(cursor)
		}
		status, body, _ := call(t, "GET", url, "prefix-key-0123456789", "")
		var page struct {
			Locks []struct {
				Key string `json:"key"`
			} `json:"locks"`
			NextCursor string `json:"next_cursor"`
		}
		if err := json.Unmarshal([]byte(body), &page); status != 200 || err != nil {
			t.Fatalf("page %d: %d %s", pages, status, body)
		}
		pages++
		for _, l := range page.Locks {
			if !strings.HasPrefix(l.Key, "deploy:") {
				t.Fatalf("the deployer sees %s", l.Key)
			}
			rows++
		}
		if cursor = page.NextCursor; cursor == "" || pages > 100 {
			break
		}
	}
	t.Logf("3 own locks among 20 others: %d pages", pages)
	if rows != 3 || pages > 4 {
		t.Fatalf("%d rows in %d pages, want 3 in at most 4", rows, pages)
	}
}
