package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/server"
	"github.com/lockd/lockd/internal/web"
)

// A query string that does not parse is a 400 naming the parameter (N27),
// on every route that reads a query: the API and the dashboard. Before,
// r.URL.Query() dropped the pair, and "?prefix=%zz" listed everything,
// "?cursor=%%%%" restarted from the first page. The probes, /metrics and
// /openapi.yaml read no query and answer as always.
func TestBadQueryString(t *testing.T) {
	ld := lockdtest.Start(t, lockdtest.Options{Dashboard: func(e *lock.Engine, log zerolog.Logger) server.Dashboard {
		return web.NewDashboard(e, log)
	}})
	cases := []struct {
		method, path, field string
	}{
		{"GET", "/v1/locks?prefix=%zz", "prefix"},
		{"GET", "/v1/locks?cursor=%%%%", "cursor"},
		{"GET", "/v1/locks?limit=%zz", "limit"},
		{"GET", "/v1/locks?limit=5&prefix=a%2", "prefix"},
		{"GET", "/v1/locks?prefix=a;limit=5", "prefix"},
		{"GET", "/v1/locks?%zz=1", "%zz"},
		{"GET", "/v1/semaphores?prefix=%zz", "prefix"},
		{"GET", "/v1/semaphores?cursor=%%%%", "cursor"},
		{"GET", "/v1/elections?limit=%zz", "limit"},
		{"GET", "/v1/locks/k/history?limit=%zz", "limit"},
		{"GET", "/v1/semaphores/k/history?type=%zz", "type"},
		{"GET", "/v1/elections/k/history?limit=1%", "limit"},
		{"GET", "/v1/events?prefix=%zz", "prefix"},
		{"GET", "/v1/locks/k?x=%zz", "x"},
		{"POST", "/v1/locks/k/acquire?x=%zz", "x"},
		{"GET", "/?prefix=%zz", "prefix"},
		{"GET", "/ui/semaphores?cursor=%%%%", "cursor"},
		{"GET", "/ui/elections?prefix=%zz", "prefix"},
		{"GET", "/ui/fragments/locks?prefix=%zz", "prefix"},
		{"GET", "/ui/events?prefix=%zz", "prefix"},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			body := ""
			if c.method == "POST" {
				body = `{"ttl_ms":1000}`
			}
			status, got, h := call(t, c.method, ld.URL+c.path, "", body)
			if status != http.StatusBadRequest || h.Get("Content-Type") != "application/problem+json" ||
				!strings.Contains(got, `"field":"`+c.field+`"`) || !strings.Contains(got, `"code":"invalid_request"`) {
				t.Fatalf("%d %s %s", status, h.Get("Content-Type"), got)
			}
		})
	}
	// Well-formed queries, and the endpoints that read none, are served.
	for _, path := range []string{"/v1/locks?prefix=a%3A&limit=5", "/v1/locks?prefix=", "/v1/locks?", "/livez?%zz", "/healthz?x=%", "/readyz?%%", "/openapi.yaml?%zz", "/metrics?%zz"} {
		if status, got, _ := call(t, "GET", ld.URL+path, "", ""); status != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, status, got)
		}
	}
}
