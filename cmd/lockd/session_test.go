package main

import (
	"context"
	"errors"
	"strings"
	"testing"

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
	if code, out, errOut := cli(t, env, "session", "renew", id); code != exitOK || !strings.Contains(out, "holds lock cli:sess:a") {
		t.Fatalf("renew: %d %q %q", code, out, errOut)
	}
	if code, out, _ := cli(t, env, "session", "show", id); code != exitOK || !strings.Contains(out, "holds semaphore cli:sess:pool") {
		t.Fatalf("show: %d %q", code, out)
	}
	if code, out, _ := cli(t, env, "session", "end", id); code != exitOK || !strings.Contains(out, "released lock cli:sess:a") {
		t.Fatalf("end: %d %q", code, out)
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
