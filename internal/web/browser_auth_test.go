package web

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
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
	// The page changes under the test: the list and the detail page swap
	// their parts when events arrive, and more than one refresh may find a
	// session gone, each sending the page to the sign-in form. A node that
	// chromedp found before such a change is gone after it, so every step
	// looks its element up in a script that runs in the page, until one run
	// finds it; the script returns "" while it has not.
	inPage := func(what, script string) string {
		t.Helper()
		var got string
		lockdtest.Eventually(t, func() bool {
			v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
				if (document.readyState !== 'complete') return "";
				`+script+`
			})()`))
			got = v
			return err == nil && v != ""
		}, 15*time.Second, what)
		return got
	}
	signIn := func(what string) {
		t.Helper()
		inPage(what, `
			const k = document.querySelector('#key');
			if (!k) return "";
			k.value = `+"`"+opsKey+"`"+`;
			k.form.requestSubmit();
			return "sent";`)
	}
	onSignIn := `return location.pathname === '/ui/login' && document.querySelector('#key') ? "yes" : "";`

	// A lock's page sends us to sign in, and back there afterwards.
	must("open", chromedp.Do(ctx, chromedp.Navigate(e.ts.URL+"/ui/locks/deploy:prod")))
	inPage("the sign-in page", onSignIn)
	if got := location(); got != "/ui/login?next=%2Fui%2Flocks%2Fdeploy%3Aprod" {
		t.Fatalf("sent to %q", got)
	}
	if focused := inPage("focus", `return document.activeElement.id || "none";`); focused != "key" {
		t.Errorf("the key field is not focused (%q)", focused)
	}
	signIn("the sign-in form")
	who := inPage("the lock's page, signed in", `
		if (location.pathname !== '/ui/locks/deploy:prod' || !document.querySelector('[data-testid="state"]')) return "";
		const w = document.querySelector('[data-testid="signed-in"]');
		return w ? w.textContent.trim() : "";`)
	if who != "Signed in as ops (admin)" {
		t.Errorf("header says %q", who)
	}

	// Force-release through the confirmation form.
	inPage("the force-release link", `
		const a = document.querySelector('[data-testid="force-release-link"]');
		if (!a) return "";
		a.click();
		return "clicked";`)
	inPage("the confirmation form", `
		const r = document.querySelector('#reason'), b = document.querySelector('[data-testid="confirm-force-release"]');
		if (!r || !b) return "";
		r.value = "stuck";
		b.click();
		return "sent";`)
	actor := inPage("the notice and the history", `
		if (!document.querySelector('[data-testid="notice"]')) return "";
		const a = document.querySelector('[data-testid="event"] [data-testid="event-actor"]');
		return a ? a.textContent.trim() : "";`)
	if actor != "ops" {
		t.Errorf("actor %q, want ops", actor)
	}
	if _, held := e.held(lock.Lock("deploy:prod")); held {
		t.Fatal("still held after the browser's force-release")
	}

	// The session goes (its cookie deleted); the list's next refresh takes
	// the whole page to the sign-in form, which leads back to the list.
	must("list", chromedp.Do(ctx, chromedp.Navigate(e.ts.URL+"/?prefix=ci%3A")))
	inPage("the list", `return document.querySelector('tr[data-key="ci:build"]') ? "yes" : "";`)
	_, err := chromedp.Call(ctx, network.DeleteCookies, network.DeleteCookiesParams{Name: sessionCookie, URL: e.ts.URL + "/"})
	must("delete the session cookie", err)
	inPage("sent to sign in", onSignIn)
	if got := location(); got != "/ui/login?next=%2F%3Fprefix%3Dci%253A" {
		t.Errorf("htmx refresh sent us to %q", got)
	}
	signIn("the sign-in form, sent again")
	inPage("the list after signing in again", `return document.querySelector('tr[data-key="ci:build"]') ? "yes" : "";`)

	// Sign out: back to the sign-in page, and the list is closed again.
	inPage("the sign-out button", `
		const b = document.querySelector('[data-testid="sign-out"]');
		if (!b) return "";
		b.click();
		return "clicked";`)
	inPage("the sign-in page after signing out", onSignIn)
	must("the list, signed out", chromedp.Do(ctx, chromedp.Navigate(e.ts.URL+"/")))
	inPage("the sign-in page instead of the list", onSignIn)

	for _, m := range consoleErrors() {
		t.Errorf("browser console: %s", m)
	}
}
