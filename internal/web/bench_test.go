package web

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
)

// BenchmarkListPage_100kLocks renders the dashboard's first page with
// 100,000 live locks in Redis, whole (engine List + templ) through the
// router, and fails when a page takes 200 ms or more on average.
//
//	go test ./internal/web -run '^$' -bench ListPage -benchtime 50x
func BenchmarkListPage_100kLocks(b *testing.B) {
	const n = 100_000
	rdb := redistest.Start(b).Client(b)
	engine := lock.New(rdb, lock.Options{})
	b.Cleanup(func() { _ = engine.Close() })

	began := time.Now()
	fill(b, engine, n)
	// One lock under a prefix no other key has: filtering for it makes
	// SCAN walk the whole keyspace, the slow case.
	if _, err := engine.Acquire(context.Background(), lock.Lock("rare:1"), lock.AcquireRequest{Owner: "bench", TTL: time.Hour}); err != nil {
		b.Fatal(err)
	}
	b.Logf("filled %d locks in %v", n+1, time.Since(began).Round(time.Millisecond))

	r := chi.NewRouter()
	NewDashboard(engine, zerolog.Nop()).Routes(r)
	for _, bc := range []struct {
		name, path string
		rows       int
	}{
		{"first-page", "/", pageSize},
		{"prefix-one-match", "/?prefix=rare:", 1},
	} {
		b.Run(bc.name, func(b *testing.B) {
			pages := 0
			for b.Loop() {
				// A rare prefix may take a few short pages (each request's
				// SCAN is budgeted); follow the cursor as a person would.
				path, rows := bc.path, 0
				for {
					rec := httptest.NewRecorder()
					r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
					if rec.Code != http.StatusOK {
						b.Fatalf("status %d", rec.Code)
					}
					pages++
					rows += strings.Count(rec.Body.String(), `data-testid="lock-row"`)
					next := nextHref(rec.Body.String())
					if rows >= bc.rows || next == "" {
						break
					}
					path = next
				}
				if rows != bc.rows {
					b.Fatalf("%d rows, want %d", rows, bc.rows)
				}
			}
			ms := float64(b.Elapsed().Microseconds()) / 1000 / float64(b.N)
			b.ReportMetric(ms, "ms/page")
			b.ReportMetric(float64(pages)/float64(b.N), "requests")
			if bc.name == "first-page" && ms >= 200 {
				b.Errorf("first page took %.1f ms, want < 200 ms", ms)
			}
		})
	}
}

// fill acquires n locks through the engine, many at a time: the real
// layout, built at Redis's speed rather than one round trip at a time.
func fill(b *testing.B, engine *lock.Engine, n int) {
	b.Helper()
	const workers = 64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				key := fmt.Sprintf("bench:%06d", i)
				if _, err := engine.Acquire(context.Background(), lock.Lock(key), lock.AcquireRequest{Owner: "bench-" + key, TTL: time.Hour}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// nextHref is the list page's "next page" link, or "".
func nextHref(html string) string {
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(html))
	if err != nil {
		return ""
	}
	href, _ := doc.Find(`[data-testid="next-page"]`).Attr("href")
	return href
}
