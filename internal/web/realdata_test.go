package web

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lockd/lockd/internal/lock"
)

// Sub-second leases show milliseconds, never "0 s" or "expired".
func TestSubSecondLeaseShowsMilliseconds(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		ttl, remaining time.Duration
		left, of       string
	}{
		{900 * time.Millisecond, 651 * time.Millisecond, "651 ms left", "of 900 ms"},
		{900 * time.Millisecond, 0, "0 ms left", "of 900 ms"},
		{100 * time.Millisecond, 99 * time.Millisecond, "99 ms left", "of 100 ms"},
		{30 * time.Second, 21500 * time.Millisecond, "21 s left", "of 30 s"},
	}
	for _, tc := range tests {
		r := newLockRow(lock.State{Resource: lock.Lock("k"), Owner: "o", TTL: tc.ttl, Remaining: tc.remaining, ExpiresAt: now.Add(tc.remaining), AcquiredAt: now.Add(-time.Second)})
		if r.Left.Text != tc.left || "of "+r.TTL != tc.of {
			t.Errorf("ttl %v, remaining %v: %q %q, want %q %q", tc.ttl, tc.remaining, r.Left.Text, "of "+r.TTL, tc.left, tc.of)
		}
	}
	// app.js never writes "expired" either: it only knows the last refresh.
	js, err := assetFS.ReadFile("assets/app.js")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(js), `"expired"`) {
		t.Error(`app.js still writes "expired" when its countdown reaches zero`)
	}
}

// Pages, fragments and assets are compressed for clients that take gzip.
func TestDashboardIsCompressed(t *testing.T) {
	e := newEnv(t)
	for i := range 20 {
		e.acquire(fmt.Sprintf("gz:%02d", i), "worker", time.Minute)
	}
	for _, path := range []string{"/", listFragmentPath, "/ui/locks/gz:01", assetsPath + "htmx.min.js", assetsPath + "style.css", assetsPath + "app.js"} {
		req, err := http.NewRequest(http.MethodGet, e.ts.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Set by hand, so the transport does not decompress behind our back.
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "gzip" {
			t.Errorf("%s: status %d, Content-Encoding %q, want gzip", path, resp.StatusCode, resp.Header.Get("Content-Encoding"))
		}
	}
}

// With real data (a 100-character owner, long keys) the row's
// Force-release button is on screen at desktop widths, without scrolling
// sideways, and it is the element a click there reaches.
func TestBrowser_RowActionsInViewportWithLongOwners(t *testing.T) {
	chrome := chromium(t)
	e := newEnv(t)
	longOwner := "billing-worker-7f9c8d6b5-x2k4q.payments-prod.svc.cluster.local:pid31337:" + strings.Repeat("x", 28)
	if len(longOwner) != 100 {
		t.Fatalf("owner is %d characters", len(longOwner))
	}
	longKey := "tenant:acme-corporation-international:export:" + strings.Repeat("k", 30)
	for i := range 15 {
		e.acquire(fmt.Sprintf("job:%02d", i), "ci-runner", 10*time.Minute)
	}
	e.acquire(longKey, longOwner, 10*time.Minute)
	e.acquire("deploy:prod", longOwner, 10*time.Minute)

	for _, width := range []int64{1280, 1440, 1920} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			ctx, consoleErrors := newBrowser(t, chrome, nil)
			if err := doStable(ctx,
				chromedp.EmulateViewport(width, 900),
				chromedp.Navigate(e.ts.URL+"/"),
				chromedp.WaitVisible(chromedp.CSS(`tr[data-key="deploy:prod"]`)),
			); err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{"deploy:prod", longKey} {
				type box struct {
					Right, Width float64
					Hit, ScrollX bool
				}
				js := fmt.Sprintf(`(() => {
					const a = document.querySelector('tr[data-key=%q] [data-testid="force-release-link"]');
					a.scrollIntoView({block: "center", inline: "nearest"});
					const r = a.getBoundingClientRect();
					const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
					const sc = document.querySelector('.scroll');
					return {Right: r.right, Width: window.innerWidth, Hit: hit === a || a.contains(hit), ScrollX: sc.scrollLeft > 0};
				})()`, key)
				got, err := runStable(ctx, chromedp.Evaluate[box](js))
				if err != nil {
					t.Fatal(err)
				}
				if got.Right > got.Width || !got.Hit || got.ScrollX {
					t.Errorf("%s at %d px: button right edge %.0f of %.0f, reachable by a click %v, table scrolled sideways %v",
						key, width, got.Right, got.Width, got.Hit, got.ScrollX)
				}
			}
			for _, m := range consoleErrors() {
				t.Errorf("browser console: %s", m)
			}
		})
	}
}
