package main

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
)

// A shell's session: create prints the id alone, acquire --session takes
// grants in it, renew keeps them, end releases them all, and every later
// use of the id exits 3.
func TestCLISession(t *testing.T) {
	ls := startCLIServer(t)
	env := map[string]string{"LOCKD_SERVER": ls.url}
	code, out, errOut := cli(t, env, "session", "create", "--ttl", "5s", "--owner", "nightly")
	if code != exitOK || !strings.Contains(errOut, "session of nightly") {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	id := strings.TrimSpace(out)
	if len(id) != 32 {
		t.Fatalf("create printed %q", out)
	}
	if code, _, errOut := cli(t, env, "acquire", "--session", id, "cli:sess:a"); code != exitOK {
		t.Fatalf("acquire in the session: %d %s", code, errOut)
	}
	if code, _, errOut := cli(t, env, "sem", "acquire", "--limit", "2", "--session", id, "cli:sess:pool"); code != exitOK {
		t.Fatalf("sem acquire in the session: %d %s", code, errOut)
	}
	if code, _, errOut := cli(t, env, "acquire", "--session", id, "--owner", "step-2", "cli:sess:own"); code != exitOK {
		t.Fatalf("acquire in the session with an owner: %d %s", code, errOut)
	}
	// A grant in a session is the session owner's unless it names another
	// (issue 35: it was the caller's address).
	for key, want := range map[string]string{"cli:sess:a": "nightly", "cli:sess:own": "step-2"} {
		if st, err := ls.c.State(context.Background(), key); err != nil || st.Owner != want {
			t.Errorf("%s: owner %q (%v), want %q", key, st.Owner, err, want)
		}
	}
	if st, err := ls.c.Semaphore("cli:sess:pool", 2).State(context.Background()); err != nil || st.Owner != "nightly" {
		t.Errorf("the permit's owner %q (%v), want the session's, nightly", st.Owner, err)
	}
	if code, out, errOut := cli(t, env, "session", "renew", id); code != exitOK || !strings.Contains(out, "holds lock cli:sess:a") {
		t.Fatalf("renew: %d %q %q", code, out, errOut)
	}
	if code, out, _ := cli(t, env, "session", "show", id); code != exitOK || !strings.Contains(out, "holds semaphore cli:sess:pool") {
		t.Fatalf("show: %d %q", code, out)
	}
	before := time.Now()
	code, out, _ = cli(t, env, "session", "end", id)
	if code != exitOK || !strings.Contains(out, "released lock cli:sess:a") {
		t.Fatalf("end: %d %q", code, out)
	}
	// "ended at" the moment it ended, not its expiry, 5 s ahead
	// (issue 35).
	m := regexp.MustCompile(`ended at (\d\d:\d\d:\d\d\.\d{3})`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("end printed %q, want ended at HH:MM:SS.mmm", out)
	}
	ended, err := time.ParseInLocation("15:04:05.000", m[1], time.Local)
	if err != nil {
		t.Fatal(err)
	}
	// Times of day: the difference, around the clock.
	lag := (ended.Sub(time.Date(0, 1, 1, before.Hour(), before.Minute(), before.Second(), before.Nanosecond(), time.Local)) + 36*time.Hour) % (24 * time.Hour)
	if lag -= 12 * time.Hour; lag < -time.Second || lag > 2*time.Second {
		t.Errorf("end printed %q: %v from when it was asked, want the moment it ended", out, lag)
	}
	if _, err := ls.c.State(context.Background(), "cli:sess:a"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("the lock after the end: %v", err)
	}
	for _, args := range [][]string{
		{"session", "renew", id}, {"session", "show", id}, {"session", "end", id}, {"acquire", "--session", id, "cli:sess:b"},
	} {
		if code, _, errOut := cli(t, env, args...); code != exitLeaseLost || !strings.Contains(errOut, "session_not_found") {
			t.Errorf("%v after the end: %d %s", args, code, errOut)
		}
	}
	if code, _, errOut := cli(t, env, "session", "show", "short"); code != exitUsage {
		t.Errorf("a malformed id: %d %s", code, errOut)
	}
}
