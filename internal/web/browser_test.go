package web

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
)

// chromium finds the browser, failing (never skipping) when there is none.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("headless Chromium is not installed; the dashboard's browser test needs it. " +
		"Install it with `apt-get install -y chromium` (Debian/Ubuntu); `make test` and .ci/run do so through scripts/install-deps.")
	return ""
}

// apiAcquire takes a lock through the JSON API, as a client would, and
// returns its token.
func apiAcquire(t *testing.T, base, key, owner string, ttl time.Duration) string {
	t.Helper()
	body := fmt.Sprintf(`{"owner":%q,"ttl_ms":%d}`, owner, ttl.Milliseconds())
	return apiPost(t, base+"/v1/locks/"+key+"/acquire", body)
}

func apiPost(t *testing.T, url, body string) string {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var lease struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&lease); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: status %d (%v)", url, resp.StatusCode, err)
	}
	return lease.Token
}

var screenshot = flag.String("screenshot", "", "write the dashboard's screenshot to this file (make screenshot)")

var secondsLeft = regexp.MustCompile(`^(\d+) s left$`)

// TestBrowser_FindAndForceRelease is what a person does: open the
// dashboard, find the stuck lock and its owner, watch its TTL run down,
// break it with the button (by keyboard), and see it gone from the list
// and force_released in its history. With -screenshot FILE it also writes
// the screenshot of the list (make screenshot: docs/dashboard.png).
func TestBrowser_FindAndForceRelease(t *testing.T) {
	start := time.Now()
	chrome := chromium(t)
	e := newEnv(t)
	token := apiAcquire(t, e.ts.URL, "deploy:prod", "ci-runner-7", 25*time.Second)
	apiPost(t, e.ts.URL+"/v1/locks/deploy:prod/renew", fmt.Sprintf(`{"token":%q}`, token))
	apiAcquire(t, e.ts.URL, "order:pay:12345", "worker-3@10.0.4.17", 90*time.Second)
	apiAcquire(t, e.ts.URL, "reports:nightly", "cron@batch-2", 10*time.Minute)

	ctx, consoleErrors := newBrowser(t, chrome, nil)

	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	row := `tr[data-key="deploy:prod"]`
	must("open /", doStable(ctx, chromedp.Navigate(e.ts.URL+"/"), chromedp.WaitVisible(chromedp.CSS(row))))
	owner, err := runStable(ctx, chromedp.Text(chromedp.CSS(row+` [data-testid="owner"]`)))
	must("owner", err)
	if owner != "ci-runner-7" {
		t.Fatalf("owner %q, want ci-runner-7", owner)
	}
	htmx, err := runStable(ctx, chromedp.Evaluate[string](`typeof window.htmx`))
	must("htmx", err)
	if htmx != "object" {
		t.Fatalf("htmx did not load under the CSP: typeof htmx = %q", htmx)
	}

	// The TTL counts down in the page, without a reload.
	ttl := func() int {
		t.Helper()
		s, err := runStable(ctx, chromedp.Text(chromedp.CSS(row+` [data-testid="left"] time`)))
		must("TTL", err)
		m := secondsLeft.FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("TTL text %q, want \"N s left\"", s)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	first := ttl()
	deadline := time.Now().Add(4 * time.Second)
	for ttl() >= first {
		if time.Now().After(deadline) {
			t.Fatalf("TTL stayed at %d s left", first)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// A lock taken after the page loaded shows up by itself (htmx refresh).
	apiAcquire(t, e.ts.URL, "cache:warmup", "job-runner", 45*time.Second)
	must("refresh", doStable(ctx, chromedp.WaitVisible(chromedp.CSS(`tr[data-key="cache:warmup"]`))))

	shot, err := runStable(ctx, chromedp.CaptureScreenshot())
	must("screenshot", err)
	if len(shot) == 0 {
		t.Fatal("empty screenshot")
	}
	if *screenshot != "" {
		// Only on request (make screenshot): go test never rewrites a
		// tracked file.
		must("write screenshot", os.WriteFile(*screenshot, shot, 0o644))
	}

	// Force-release through the row's button, then by keyboard on the form.
	must("open confirm", doStable(ctx, chromedp.Click(chromedp.CSS(row+` [data-testid="force-release-link"]`))))
	must("fill in the reason", doStable(ctx,
		chromedp.WaitVisible(chromedp.CSS(`#reason`)),
		chromedp.Focus(chromedp.CSS(`#reason`)),
		chromedp.SendKeys(chromedp.CSS(`#reason`), "stuck after deploy"),
		chromedp.KeyEvent(kb.Tab),
	))
	focused, err := runStable(ctx, chromedp.Evaluate[string](`document.activeElement.dataset.testid || ""`))
	must("focus", err)
	if focused != "confirm-force-release" {
		t.Fatalf("Tab from the reason field focused %q, want the Force-release button", focused)
	}
	must("submit", doStable(ctx,
		chromedp.KeyEvent(kb.Enter),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="notice"]`)),
	))
	notice, err := runStable(ctx, chromedp.Text(chromedp.CSS(`[data-testid="notice"]`)))
	must("notice", err)
	if !strings.Contains(notice, "ci-runner-7") {
		t.Errorf("outcome %q does not name the owner", notice)
	}
	newest, err := runStable(ctx, chromedp.Text(chromedp.CSS(`[data-testid="event"] [data-testid="event-type"]`)))
	must("history", err)
	if newest != "force_released" {
		t.Fatalf("newest event %q, want force_released", newest)
	}
	reason, err := runStable(ctx, chromedp.Text(chromedp.CSS(`[data-testid="event"] [data-testid="event-reason"]`)))
	must("reason", err)
	if reason != "stuck after deploy" {
		t.Errorf("reason %q", reason)
	}

	// Back on the list the row is gone; the others are still there.
	must("back to list", doStable(ctx,
		chromedp.Click(chromedp.CSS(`[data-testid="all-locks"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-key="order:pay:12345"]`)),
	))
	gone, err := runStable(ctx, chromedp.Evaluate[bool](`document.querySelector('tr[data-key="deploy:prod"]') === null`))
	must("row gone", err)
	if !gone {
		t.Error("deploy:prod is still listed after force-release")
	}

	// At phone width nothing scrolls sideways.
	must("phone", doStable(ctx,
		chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile),
		chromedp.Navigate(e.ts.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-key="order:pay:12345"]`)),
	))
	fits, err := runStable(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth <= window.innerWidth`))
	must("phone width", err)
	if !fits {
		t.Error("the list scrolls sideways at 390 px")
	}

	for _, m := range consoleErrors() {
		t.Errorf("browser console: %s", m)
	}
	t.Logf("browser test took %v", time.Since(start).Round(time.Millisecond))
}

// newBrowser starts headless Chromium (closed when the test ends) with the
// flags this machine needs, and collects console errors and exceptions:
// each one (a CSP violation, a script error) is a test failure unless
// expected says it is expected. The context ends after 25 s.
func newBrowser(t *testing.T, chrome string, expected func(msg string) bool) (context.Context, func() []string) {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chrome),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 720),
	)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(cancelTab)
	ctx, cancel := context.WithTimeout(ctx, 25*time.Second)
	t.Cleanup(cancel)

	var mu sync.Mutex
	var errs []string
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if (m.Type == chromedp.ConsoleError || m.IsException()) && (expected == nil || !expected(m.String())) {
				mu.Lock()
				errs = append(errs, m.String()+" "+m.URL)
				mu.Unlock()
			}
		}
	}()
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(errs)
	}
}

// staleNode says that the page replaced a node between chromedp finding it
// and using it: the dashboard swaps parts of its pages when events arrive.
func staleNode(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "node with given id") || strings.Contains(err.Error(), "No node with given id"))
}

// runStable is chromedp.Run, run again (up to five times) while the node it
// found was replaced before it was used.
func runStable[T any](ctx context.Context, a chromedp.Action[T]) (T, error) {
	for i := 0; ; i++ {
		v, err := chromedp.Run(ctx, a)
		if !staleNode(err) || i == 4 {
			return v, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// doStable is chromedp.Do, run again as runStable is. The steps must be
// safe to repeat from the start.
func doStable(ctx context.Context, steps ...chromedp.Action[chromedp.Void]) error {
	for i := 0; ; i++ {
		err := chromedp.Do(ctx, steps...)
		if !staleNode(err) || i == 4 {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestBrowser_HoldersQueueAndSemaphores: a lock with two shared holders
// and an exclusive request queued behind them, and a semaphore with two
// of three permits held. A person sees the mode and the queue on the list,
// used/limit on the semaphores page, both holders and the queue on the
// lock's page, breaks one holder (the other keeps the lock, the writer
// keeps waiting), and watches a new permit appear by itself.
func TestBrowser_HoldersQueueAndSemaphores(t *testing.T) {
	chrome := chromium(t)
	e := newEnv(t)
	r1 := e.acquireReq(lock.Lock("reports:db"), lock.AcquireRequest{Owner: "reader-1", Mode: lock.Shared, TTL: time.Minute})
	r2 := e.acquireReq(lock.Lock("reports:db"), lock.AcquireRequest{Owner: "reader-2", Mode: lock.Shared, TTL: time.Minute})
	e.enqueue(lock.Lock("reports:db"), lock.AcquireRequest{Owner: "migrator", TTL: time.Minute, Wait: 20 * time.Second})
	e.permit("pool:gpu", "job-7", 3, time.Minute)
	e.permit("pool:gpu", "job-8", 3, time.Minute)

	ctx, consoleErrors := newBrowser(t, chrome, nil)
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	textOf := func(sel string) string {
		t.Helper()
		s, err := runStable(ctx, chromedp.Text(chromedp.CSS(sel)))
		must(sel, err)
		return strings.TrimSpace(s)
	}
	count := func(sel string) int {
		t.Helper()
		n, err := runStable(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
		must("count "+sel, err)
		return n
	}

	row := `tr[data-key="reports:db"]`
	must("open /", doStable(ctx, chromedp.Navigate(e.ts.URL+"/"), chromedp.WaitVisible(chromedp.CSS(row))))
	if g := textOf(row + ` [data-testid="mode"]`); g != "shared" {
		t.Errorf("list mode %q, want shared", g)
	}
	if g := textOf(row + ` [data-testid="waiters"]`); g != "1" {
		t.Errorf("list waiting %q, want 1", g)
	}

	sem := `tr[data-name="pool:gpu"]`
	must("semaphores", doStable(ctx,
		chromedp.Click(chromedp.CSS(`[data-testid="nav-semaphores"]`)),
		chromedp.WaitVisible(chromedp.CSS(sem)),
	))
	if g := textOf(sem + ` [data-testid="used"]`); g != "2 / 3" {
		t.Errorf("semaphore used %q, want 2 / 3", g)
	}

	must("open the lock", doStable(ctx,
		chromedp.Navigate(e.ts.URL+"/ui/locks/reports:db"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="holders"]`)),
	))
	if n := count(`[data-testid="holders"] [data-testid="holder"]`); n != 2 {
		t.Errorf("%d holder rows, want 2", n)
	}
	if g := textOf(`[data-testid="queue"] [data-testid="queued-owner"]`); g != "migrator" {
		t.Errorf("queue head %q, want migrator", g)
	}
	if g := textOf(`[data-testid="queue"] [data-testid="queued-mode"]`); g != "exclusive" {
		t.Errorf("queued mode %q", g)
	}

	// Break reader-1 only, from its row.
	holder := fmt.Sprintf(`tr[data-fence="%d"]`, r1.Fence)
	must("open confirm", doStable(ctx, chromedp.Click(chromedp.CSS(holder+` [data-testid="force-holder"]`))))
	must("confirm", doStable(ctx,
		chromedp.WaitVisible(chromedp.CSS(`#reason`)),
		chromedp.SendKeys(chromedp.CSS(`#reason`), "stuck reader"),
		chromedp.Click(chromedp.CSS(`[data-testid="confirm-force-release"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="notice"]`)),
	))
	if g := textOf(`[data-testid="notice"]`); !strings.Contains(g, "reader-1") {
		t.Errorf("outcome %q does not name reader-1", g)
	}
	if n := count(`[data-testid="holders"] [data-testid="holder"]`); n != 1 {
		t.Errorf("%d holder rows after breaking one, want 1", n)
	}
	if n := count(fmt.Sprintf(`tr[data-fence="%d"]`, r2.Fence)); n != 1 {
		t.Error("reader-2 is not shown holding any more")
	}
	if g := textOf(`[data-testid="queue"] [data-testid="queued-owner"]`); g != "migrator" {
		t.Errorf("queue after %q, want migrator still waiting", g)
	}
	if g := e.holderFences(lock.Lock("reports:db")); len(g) != 1 || g[0] != r2.Fence {
		t.Fatalf("engine holders %v, want reader-2's %d only", g, r2.Fence)
	}

	// A permit taken while the semaphore's page is open shows up by itself.
	must("open the semaphore", doStable(ctx,
		chromedp.Navigate(e.ts.URL+"/ui/semaphores/pool:gpu"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="holders"]`)),
	))
	p := e.permit("pool:gpu", "job-9", 3, time.Minute)
	must("live permit", doStable(ctx, chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`tr[data-fence="%d"]`, p.Fence)))))
	if g := textOf(`[data-testid="state"] [data-testid="used"]`); g != "3 of 3" {
		t.Errorf("used %q, want 3 of 3", g)
	}

	for _, m := range consoleErrors() {
		t.Errorf("browser console: %s", m)
	}
}

// TestBrowser_ElectionLive: a person opens an election's page and sees
// its leader and value; when the leader resigns and another candidate
// leads, the page shows the new leader and the ended term by itself, from
// the event stream (well before the 10 s poll). The header leads to the
// elections list, which shows the new leader too.
func TestBrowser_ElectionLive(t *testing.T) {
	chrome := chromium(t)
	e := newEnv(t)
	ctx := context.Background()
	a := e.campaign("svc:api", "host-a", `{"addr":"10.0.0.7:8080"}`, time.Minute)

	bctx, consoleErrors := newBrowser(t, chrome, nil)
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	textOf := func(sel string) string {
		t.Helper()
		s, err := runStable(bctx, chromedp.Text(chromedp.CSS(sel)))
		must(sel, err)
		return strings.TrimSpace(s)
	}

	must("open the election", doStable(bctx,
		chromedp.Navigate(e.ts.URL+"/ui/elections/svc:api"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="leader"]`)),
	))
	if g := textOf(`[data-testid="leader"]`); g != "host-a" {
		t.Fatalf("leader %q, want host-a", g)
	}
	if g := textOf(`pre[data-testid="value"]`); !strings.Contains(g, `"addr": "10.0.0.7:8080"`) {
		t.Errorf("value %q", g)
	}
	// The page's event stream is open before anything changes: a change
	// before then would only show at the next poll.
	lockdtest.Eventually(t, func() bool { return e.dash.live.open() == 1 }, 5*time.Second, "the page's event stream")

	start := time.Now()
	if _, err := e.engine.Release(ctx, lock.Election("svc:api"), a.Token, "host-a"); err != nil {
		t.Fatal(err)
	}
	b := e.campaign("svc:api", "host-b", `{"addr":"10.0.0.8:8080"}`, time.Minute)
	for textOf(`[data-testid="leader"]`) != "host-b" {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("the page still shows %q 5 s after host-b began to lead", textOf(`[data-testid="leader"]`))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the page showed the new leader %v after the resignation", time.Since(start).Round(time.Millisecond))
	if g := textOf(`[data-testid="state"] [data-testid="term"]`); g != itoa(b.Fence) {
		t.Errorf("term %q, want %d", g, b.Fence)
	}
	if g := textOf(`pre[data-testid="value"]`); !strings.Contains(g, `"addr": "10.0.0.8:8080"`) {
		t.Errorf("value %q, want host-b's", g)
	}
	if g := textOf(fmt.Sprintf(`li[data-term="%d"] [data-testid="term-end"]`, a.Fence)); g != "resigned" {
		t.Errorf("host-a's term ended %q, want resigned", g)
	}

	row := `tr[data-name="svc:api"]`
	must("elections", doStable(bctx,
		chromedp.Click(chromedp.CSS(`[data-testid="nav-elections"]`)),
		chromedp.WaitVisible(chromedp.CSS(row)),
	))
	if g := textOf(row + ` [data-testid="owner"]`); g != "host-b" {
		t.Errorf("list leader %q, want host-b", g)
	}

	for _, m := range consoleErrors() {
		t.Errorf("browser console: %s", m)
	}
}

// open is how many streams are open.
func (l *liveStreams) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}
