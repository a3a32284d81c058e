package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lockdtest"
)

// lockd run --min-hold keeps the key for the window however soon COMMAND
// ends: another run meanwhile exits 1 without running its command (or
// waits the window out), and status says so.
func TestRunMinHold(t *testing.T) {
	ls := startCLIServer(t)
	env := map[string]string{"LOCKD_SERVER": ls.url}
	const key = "run:minhold"

	var out, errb lockdtest.Buffer
	if code := waitExit(t, lockdRun(ls, &out, &errb, "--min-hold", "2s", key, "--", "true"), 10*time.Second, &errb); code != 0 {
		t.Fatalf("first run: exit %d; stderr:\n%s", code, &errb)
	}
	code, stdout, stderr := cli(t, env, "run", "--wait", "0s", key, "--", "echo", "ran")
	if code != exitHeld || stdout != "" || !strings.Contains(stderr, "hold window") {
		t.Fatalf("a run inside the window: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, _ = cli(t, env, "status", key)
	if code != 0 || !strings.Contains(stdout, "inside its hold window") {
		t.Fatalf("status inside the window: exit %d\n%s", code, stdout)
	}
	code, stdout, stderr = cli(t, env, "run", "--wait", "10s", key, "--", "echo", "ran")
	if code != 0 || stdout != "ran\n" || !strings.Contains(stderr, "released inside its hold window") {
		t.Fatalf("a run that waits the window out: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	for _, args := range [][]string{
		{"--min-hold", "1m", "--ttl", "30s"},
		{"--min-hold", "-1s"},
		{"--min-hold", "5"},
		{"--min-hold", "1s", "--shared"},
		{"--min-hold", "1s", "--semaphore", "run:pool", "--limit", "2"},
	} {
		argv := append(append([]string{"run"}, args...), "--", "true")
		if !slices.Contains(args, "--semaphore") {
			argv = append(append([]string{"run"}, args...), key, "--", "true")
		}
		if code, _, stderr := cli(t, env, argv...); code != exitUsage || !strings.Contains(stderr, "min-hold") {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
}
