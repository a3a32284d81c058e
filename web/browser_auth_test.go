package web

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// TestBrowser_SignInAndForceRelease is the dashboard with API keys, as a
// person uses it: sent to the sign-in page, signs in with an admin key,
// force-releases a lock, is sent back to sign in when the session goes
// (by the htmx refresh), and signs out.
func TestBrowser_SignInAndForceRelease(t *testing.T) {
	chrome := chromium(t)
	e, _ := newAuthEnv(t)
	e.acquire("deploy:prod", "ci-runner-7", 60*time.Second)
	e.acquire("ci:build", "builder", 60*time.Second)

	ctx, consoleErrors := newBrowser(t, chrome, func(msg string) bool {
		// The 401 of the refresh that finds the session gone is expected.
		return strings.Contains(msg, "401")
	})
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	location := func() string {
		t.Helper()
		u, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.pathname + location.search`))
		must("location", err)
		return u
	}

	// A lock's page sends us to sign in, and back there afterwards.
	must("open", chromedp.Do(ctx,
		chromedp.Navigate(e.ts.URL+"/ui/locks/deploy:prod"),
		chromedp.WaitVisible(chromedp.CSS(`#key`)),
	))
	if got := location(); got != "/ui/login?next=%2Fui%2Flocks%2Fdeploy%3Aprod" {
		t.Fatalf("sent to %q", got)
	}
	focused, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.activeElement.id`))
	must("focus", err)
	if focused != "key" {
		t.Errorf("the key field is not focused (%q)", focused)
	}
	must("sign in", chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#key`), opsKey+kb.Enter),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="state"]`)),
	))
	if got := location(); got != "/ui/locks/deploy:prod" {
		t.Errorf("after sign-in at %q", got)
	}
	who, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`[data-testid="signed-in"]`)))
	must("signed in", err)
	if who != "Signed in as ops (admin)" {
		t.Errorf("header says %q", who)
	}

	// Force-release through the confirmation form.
	must("force-release", chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`[data-testid="force-release-link"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#reason`)),
		chromedp.SendKeys(chromedp.CSS(`#reason`), "stuck"),
		chromedp.Click(chromedp.CSS(`[data-testid="confirm-force-release"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="notice"]`)),
	))
	actor, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`[data-testid="event"] [data-testid="event-actor"]`)))
	must("actor", err)
	if actor != "ops" {
		t.Errorf("actor %q, want ops", actor)
	}
	if _, held := e.held("deploy:prod"); held {
		t.Fatal("still held after the browser's force-release")
	}

	// The session goes (its cookie deleted); the list's next refresh takes
	// the whole page to the sign-in form, which leads back to the list.
	must("list", chromedp.Do(ctx,
		chromedp.Navigate(e.ts.URL+"/?prefix=ci%3A"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-key="ci:build"]`)),
	))
	_, err = chromedp.Call(ctx, network.DeleteCookies, network.DeleteCookiesParams{Name: sessionCookie, URL: e.ts.URL + "/"})
	must("delete the session cookie", err)
	must("sent to sign in", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#key`))))
	if got := location(); got != "/ui/login?next=%2F%3Fprefix%3Dci%253A" {
		t.Errorf("htmx refresh sent us to %q", got)
	}
	must("sign in again", chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#key`), opsKey+kb.Enter),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-key="ci:build"]`)),
	))

	// Sign out: back to the sign-in page, and the list is closed again.
	must("sign out", chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`[data-testid="sign-out"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#key`)),
		chromedp.Navigate(e.ts.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#key`)),
	))

	for _, m := range consoleErrors() {
		t.Errorf("browser console: %s", m)
	}
}
