package web

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
)

// A browser or script may escape every ':' of a key (order%3Apay%3A1):
// the dashboard's pages and its force-release serve the decoded key, as
// the API does. A '%' that is part of what was typed is no key.
func TestEncodedKeys(t *testing.T) {
	e := newEnv(t)
	e.acquire("order:pay:1", "worker", time.Minute)
	e.acquire("svc@eu.web", "worker", time.Minute)
	const keySel = `[data-testid="key"]`

	tests := []struct {
		name, path string
		status     int
		sel, want  string // the text at sel on the page; "" for an error page
	}{
		{"detail", "/ui/locks/order%3Apay%3A1", 200, keySel, "order:pay:1"},
		{"lower-case escapes", "/ui/locks/order%3apay%3a1", 200, keySel, "order:pay:1"},
		{"@ and .", "/ui/locks/svc%40eu%2Eweb", 200, keySel, "svc@eu.web"},
		{"detail fragment", listFragmentPath + "/order%3Apay%3A1", 200, `[data-testid="owner"]`, "worker"},
		{"confirm", "/ui/locks/order%3Apay%3A1/force-release", 200, keySel, "order:pay:1"},
		{"escaped percent", "/ui/locks/order%253Apay%253A1", 400, "", ""},
		{"escaped slash", "/ui/locks/order%2Fpay", 400, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := e.get(tc.path)
			if p.status != tc.status {
				t.Fatalf("status %d, want %d\n%s", p.status, tc.status, p.body)
			}
			if got := text(p.doc.Find(tc.sel).First()); tc.sel != "" && got != tc.want {
				t.Fatalf("page shows %q at %s, want %q", got, tc.sel, tc.want)
			}
		})
	}

	t.Run("force-release", func(t *testing.T) {
		token, fence := e.confirmForm("order:pay:1")
		p := e.post("/ui/locks/order%3Apay%3A1/force-release", url.Values{"csrf": {token}, "fence": {fence}, "reason": {"stuck"}}, nil)
		if p.status != http.StatusOK {
			t.Fatalf("force-release: %d\n%s", p.status, p.body)
		}
		if _, held := e.held(lock.Lock("order:pay:1")); held {
			t.Fatal("order:pay:1 is still held")
		}
	})
}
