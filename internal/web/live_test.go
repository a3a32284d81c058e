package web

import (
	"bufio"
	"context"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lockdtest"

	"github.com/lockd/lockd/internal/lock"
)

// A holder that renewed late is marked at risk on the list and the detail
// page, and the detail page charts its renewals against the TTL, the late
// ones apart.
func TestAtRiskAndRenewalRhythm(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	l := e.acquire("rhythm:a", "worker-1", 900*time.Millisecond)
	e.acquire("rhythm:b", "worker-2", time.Minute)
	for range 3 { // on time: with two thirds left
		if _, err := e.engine.Renew(ctx, lock.Lock("rhythm:a"), lock.RenewRequest{Token: l.Token, TTL: 0, Actor: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	// Late: with under a third left.
	lockdtest.Eventually(t, func() bool {
		st, ok := e.held(lock.Lock("rhythm:a"))
		return ok && st.Remaining < 250*time.Millisecond
	}, 2*time.Second, "the lease running low")
	if _, err := e.engine.Renew(ctx, lock.Lock("rhythm:a"), lock.RenewRequest{Token: l.Token, TTL: 0, Actor: "t"}); err != nil {
		t.Fatal(err)
	}

	list := e.get("/")
	r := rows(list.doc)
	if !r["rhythm:a"].Is(".at-risk") || r["rhythm:a"].Find(`[data-testid="at-risk"]`).Length() != 1 {
		t.Errorf("late renewer not marked: %s", outer(r["rhythm:a"]))
	}
	if r["rhythm:b"].Is(".at-risk") {
		t.Errorf("healthy holder marked at risk: %s", outer(r["rhythm:b"]))
	}

	p := e.get("/ui/locks/rhythm:a")
	if p.doc.Find(`[data-testid="state"] [data-testid="at-risk"]`).Length() != 1 {
		t.Error("detail page: no at-risk mark")
	}
	svg := p.doc.Find(`svg[data-testid="rhythm"]`)
	if svg.Find("rect").Length() != 4 || svg.Find("rect.late").Length() != 1 || svg.Find("line.risk").Length() != 1 {
		t.Errorf("rhythm chart: %s", outer(svg))
	}
	if s := text(p.doc.Find(`[data-testid="rhythm-summary"]`)); !strings.Contains(s, "4 renewals") || !strings.Contains(s, "1 came with under a third left") {
		t.Errorf("rhythm summary %q", s)
	}
	if g := strings.Join(eventTypes(p.doc), ","); g != "acquired" {
		t.Errorf("history %s: renewals must not push the lifecycle out", g)
	}
}

// The live pages follow /ui/events: a change of a key under the page's
// prefix arrives as a "change" event; keys outside it do not.
func TestLiveEvents(t *testing.T) {
	e := newEnv(t)
	p := e.get("/?prefix=live:")
	src, ok := p.doc.Find("[data-live]").Attr("data-live")
	if !ok || src != "/ui/events?prefix=live%3A" {
		t.Fatalf("data-live = %q", src)
	}
	lines := e.live(src, "")
	e.acquire("other:x", "w", time.Minute)
	e.acquire("live:x", "w", time.Minute)
	deadline := time.After(5 * time.Second)
	for {
		select {
		case l := <-lines:
			if strings.HasPrefix(l, "data: ") {
				if want := `data: {"key":"live:x","kind":"lock","type":"acquired"}`; l != want {
					t.Fatalf("first change %s, want %s", l, want)
				}
				return
			}
		case <-deadline:
			t.Fatal("no change event in 5 s")
		}
	}
}

// live opens the dashboard's event stream src (with Last-Event-ID lastID
// when set) and returns its lines from the first comment on.
func (e *env) live(src, lastID string) <-chan string {
	e.t.Helper()
	resp := e.openLive(src, lastID)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		e.t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// The stream is open once its first comment arrives.
	for l := range lines {
		if strings.HasPrefix(l, ": lockd") {
			break
		}
	}
	return lines
}

// A live page that resumes from an event the stream no longer keeps is
// told to refresh (a change of type reset), not left with a silent gap.
func TestLiveEventsReset(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.acquire("live:a", "w", time.Minute)
	old, err := e.engine.EventClient().XRevRangeN(ctx, e.engine.EventStream(), "+", "-", 1).Result()
	if err != nil || len(old) != 1 {
		t.Fatal(old, err)
	}
	e.acquire("live:b", "w", time.Minute)
	e.acquire("live:c", "w", time.Minute)
	if err := e.engine.EventClient().XTrimMaxLen(ctx, e.engine.EventStream(), 1).Err(); err != nil {
		t.Fatal(err)
	}
	lines := e.live("/ui/events?prefix=live%3A", old[0].ID)
	var msg []string
	deadline := time.After(5 * time.Second)
	for len(msg) < 2 {
		select {
		case l := <-lines:
			if strings.HasPrefix(l, "event: ") || strings.HasPrefix(l, "data: ") {
				msg = append(msg, l)
			}
		case <-deadline:
			t.Fatalf("no reset in 5 s: %q", msg)
		}
	}
	if want := []string{"event: change", `data: {"type":"reset"}`}; strings.Join(msg, "\n") != strings.Join(want, "\n") {
		t.Fatalf("first message %q, want %q", msg, want)
	}
}

// openLive opens the dashboard's event stream src, kept open until the
// test ends.
func (e *env) openLive(src, lastID string) *http.Response {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.ts.URL+src, nil)
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// N7 of the second audit: one signed-in key's live pages take at most a
// tenth of the dashboard's streams; another key's page still gets one.
// Before, one session took all 200 and the admin's page got 429.
func TestLiveStreamsPerKey(t *testing.T) {
	e, _ := newAuthEnv(t)
	e.mustLogin(viewerKey)
	ok := 0
	for range 21 {
		if resp := e.openLive("/ui/events", ""); resp.StatusCode == http.StatusOK {
			ok++
		} else if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("status %d, want 200 or 429", resp.StatusCode)
		}
	}
	if ok != 20 {
		t.Fatalf("one key opened %d of 21 live streams, want its share of 20 (a tenth of 200)", ok)
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	other := *e
	c := *e.client
	c.Jar = jar
	other.client = &c
	other.mustLogin(opsKey)
	if resp := other.openLive("/ui/events", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("another key's live page: %d, want 200", resp.StatusCode)
	}
}
