package web

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
)

// Under Redlock the semaphores and elections pages say that this server
// has none, never an empty table that reads as "none in use"; the locks
// page works as ever.
func TestSemaphores_RedlockSaysUnsupported(t *testing.T) {
	clients := make([]*redis.Client, 3)
	for i := range clients {
		clients[i] = redistest.Start(t).Client(t)
	}
	engine, err := lock.NewRedlock(clients, lock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.Close() })
	reg := prometheus.NewRegistry()
	srv := server.New(engine, zerolog.Nop(), server.DefaultConfig(), reg)
	ts := httptest.NewServer(srv.Handler(reg, NewDashboard(engine, zerolog.Nop())))
	t.Cleanup(func() { srv.Shutdown(); ts.Close() })

	get := func(path string) (int, *goquery.Document) {
		t.Helper()
		res, err := ts.Client().Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		doc, err := goquery.NewDocumentFromReader(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, doc
	}
	for _, path := range []string{"/ui/semaphores", "/ui/semaphores?prefix=rl:", "/ui/fragments/semaphores", "/ui/semaphores/rl:pool"} {
		status, doc := get(path)
		problem := text(doc.Find(`[data-testid="problem"]`))
		if status != http.StatusBadRequest || !strings.Contains(problem, "Redlock") || !strings.Contains(problem, "semaphores") {
			t.Errorf("%s: %d %q, want 400 saying Redlock has no semaphores", path, status, problem)
		}
		if doc.Find(`[data-testid="empty"], [data-testid="semaphores"]`).Length() != 0 {
			t.Errorf("%s shows an empty list or a table", path)
		}
	}
	// Nor elections: the same, in their words.
	for _, path := range []string{"/ui/elections", "/ui/fragments/elections", "/ui/elections/rl:leader", "/ui/elections/rl:leader/force-release"} {
		status, doc := get(path)
		problem := text(doc.Find(`[data-testid="problem"]`))
		if status != http.StatusBadRequest || !strings.Contains(problem, "Redlock, which has no elections") {
			t.Errorf("%s: %d %q, want 400 saying Redlock has no elections", path, status, problem)
		}
		if doc.Find(`[data-testid="empty"], [data-testid="elections"], [data-testid="not-held"]`).Length() != 0 {
			t.Errorf("%s shows an empty list or a vacant election", path)
		}
	}
	// No live updates either: the event stream is refused (the pages then
	// refresh every 10 s, as when the stream cannot be opened).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/ui/events", nil)
	res, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Errorf("/ui/events: %d %s, want 400", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if status, doc := get("/"); status != http.StatusOK || doc.Find(`[data-testid="empty"]`).Length() != 1 {
		t.Errorf("locks page: %d", status)
	}
}
