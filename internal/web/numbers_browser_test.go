package web

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowser_FenceAndTermOnOneLine: a fence or a term (16 digits, floored
// at Redis's clock in microseconds) is one number in the State card and is
// never broken across two lines, at desktop and at phone width
// (newcomer #18: `179591879473781` / `9` at 1440×900).
func TestBrowser_FenceAndTermOnOneLine(t *testing.T) {
	chrome := chromium(t)
	e := newEnv(t)
	apiAcquire(t, e.ts.URL, "deploy:prod", "ci-runner-7", time.Minute)
	apiPost(t, e.ts.URL+"/v1/elections/billing:leader/campaign", `{"candidate":"host-a","ttl_ms":60000}`)
	ctx, consoleErrors := newBrowser(t, chrome, nil)

	// lines is how many line boxes the number's text takes, and whether it
	// stays inside its card.
	const lines = `(() => {
		const d = document.querySelector(%q);
		const r = document.createRange(); r.selectNodeContents(d);
		const card = d.parentElement;
		return r.getClientRects().length === 1 && card.scrollWidth <= card.clientWidth;
	})()`
	for _, size := range []struct{ w, h int64 }{{1440, 900}, {1280, 720}, {390, 844}} {
		for _, c := range []struct{ path, sel string }{
			{"/ui/locks/deploy:prod", `[data-testid="fence"]`},
			{"/ui/elections/billing:leader", `[data-testid="term"]`},
		} {
			if err := doStable(ctx,
				chromedp.EmulateViewport(size.w, size.h),
				chromedp.Navigate(e.ts.URL+c.path),
				chromedp.WaitVisible(chromedp.CSS(c.sel)),
			); err != nil {
				t.Fatalf("%s at %d px: %v", c.path, size.w, err)
			}
			one, err := runStable(ctx, chromedp.Evaluate[bool](fmt.Sprintf(lines, c.sel)))
			if err != nil {
				t.Fatal(err)
			}
			if !one {
				t.Errorf("%s at %d×%d: %s wraps or overflows its card", c.path, size.w, size.h, c.sel)
			}
		}
	}
	for _, m := range consoleErrors() {
		t.Errorf("browser console: %s", m)
	}
}
