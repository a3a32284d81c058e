package main

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/lockdtest"
)

// waitHolders polls until the lock or semaphore has n holders, and returns
// its state.
func waitHolders(t *testing.T, state func(context.Context) (api.LockState, error), n int) api.LockState {
	t.Helper()
	var st api.LockState
	var err error
	lockdtest.Eventually(t, func() bool {
		st, err = state(context.Background())
		return err == nil && len(st.Holders) == n
	}, 5*time.Second, strconv.Itoa(n)+" holders")
	return st
}

// Two lockd run --semaphore with limit 2 hold a permit each while their
// commands run, each command sees its own fence, a third finds no permit
// free (exit 1), and both permits are released when the commands end.
func TestRunSemaphoreHoldsAPermit(t *testing.T) {
	ls := startCLIServer(t)
	const name = "run:pool"
	sem := ls.c.Semaphore(name, 0)
	// Each command prints its key and fence, then waits for its file to
	// appear.
	dir := t.TempDir()
	var outs [2]lockdtest.Buffer
	var errs [2]lockdtest.Buffer
	var dones [2]<-chan int
	for i := range dones {
		dones[i] = lockdRun(ls, &outs[i], &errs[i], "--semaphore", name, "--limit", "2", "--ttl", "600ms", "--owner", "job-"+strconv.Itoa(i), "--",
			"sh", "-c", `echo "key=$LOCKD_KEY fence=$LOCKD_FENCE"; while [ ! -e `+dir+`/stop ]; do sleep 0.02; done`)
	}
	st := waitHolders(t, sem.State, 2)
	if st.Limit == nil || *st.Limit != 2 || st.Mode != api.GrantModePermit {
		t.Errorf("state: limit %v, mode %q; want 2, permit", st.Limit, st.Mode)
	}
	// Outlive a few TTLs: the permits are renewed.
	time.Sleep(1500 * time.Millisecond)
	st = waitHolders(t, sem.State, 2)
	fences := map[string]bool{}
	for _, h := range st.Holders {
		fences["key="+name+" fence="+strconv.FormatInt(h.Fence, 10)] = true
	}
	for i := range outs {
		line := strings.TrimSpace(outs[i].String())
		if !fences[line] {
			t.Errorf("command %d printed %q; the holders are %+v", i, line, st.Holders)
		}
	}

	var out, errb lockdtest.Buffer
	code := waitExit(t, lockdRun(ls, &out, &errb, "--semaphore", name, "--limit", "2", "--wait", "200ms", "--", "true"), 10*time.Second, &errb)
	if code != exitHeld || !strings.Contains(errb.String(), "every permit of "+name+" is held") {
		t.Errorf("a third run: exit %d, want %d, stderr:\n%s", code, exitHeld, &errb)
	}
	code = waitExit(t, lockdRun(ls, &out, &errb, "--semaphore", name, "--limit", "3", "--", "true"), 10*time.Second, &errb)
	if code != exitUsage || !strings.Contains(errb.String(), "limit_mismatch") {
		t.Errorf("a run with another limit: exit %d, want %d, stderr:\n%s", code, exitUsage, &errb)
	}

	touch(t, dir+"/stop")
	for i, done := range dones {
		if code := waitExit(t, done, 10*time.Second, &errs[i]); code != 0 {
			t.Errorf("run %d: exit %d; stderr:\n%s", i, code, &errs[i])
		}
	}
	if _, err := sem.State(context.Background()); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("the semaphore is still held after both runs: %v", err)
	}
}

// Breaking a run's permit stops its command and exits 3, saying so.
func TestRunSemaphoreStopsCommandWhenPermitIsLost(t *testing.T) {
	ls := startCLIServer(t)
	const name = "run:pool:lost"
	sem := ls.c.Semaphore(name, 0)
	var out, errb lockdtest.Buffer
	done := lockdRun(ls, &out, &errb, "--semaphore", name, "--limit", "4", "--ttl", "600ms", "--", "sh", "-c", "echo started; sleep 30")
	st := waitHolders(t, sem.State, 1)
	lockdtest.Eventually(t, func() bool { return strings.Contains(out.String(), "started") }, 5*time.Second, "command started")
	if _, err := sem.ForceReleaseFence(context.Background(), st.Holders[0].Fence, "pool drained"); err != nil {
		t.Fatal(err)
	}
	code := waitExit(t, done, 10*time.Second, &errb)
	if code != exitLeaseLost {
		t.Errorf("exit %d, want %d", code, exitLeaseLost)
	}
	for _, want := range []string{"the permit of semaphore " + name + " was lost", "force-released", `"pool drained"`, "SIGTERM"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, &errb)
		}
	}
}

// Two lockd run --shared hold the key together; an exclusive run waits
// until both have ended.
func TestRunShared(t *testing.T) {
	ls := startCLIServer(t)
	const key = "run:shared"
	dir := t.TempDir()
	var outs, errs [2]lockdtest.Buffer
	var dones [2]<-chan int
	for i := range dones {
		dones[i] = lockdRun(ls, &outs[i], &errs[i], "--shared", "--ttl", "2s", key, "--",
			"sh", "-c", `while [ ! -e `+dir+`/stop ]; do sleep 0.02; done`)
	}
	st := waitHolders(t, func(ctx context.Context) (api.LockState, error) { return ls.c.State(ctx, key) }, 2)
	for _, h := range st.Holders {
		if h.Mode != api.GrantModeShared {
			t.Errorf("holder %+v, want shared", h)
		}
	}
	var out, errb lockdtest.Buffer
	code := waitExit(t, lockdRun(ls, &out, &errb, "--wait", "200ms", key, "--", "true"), 10*time.Second, &errb)
	if code != exitHeld {
		t.Errorf("an exclusive run while shared runs hold: exit %d, want %d; stderr:\n%s", code, exitHeld, &errb)
	}
	exclusive := lockdRun(ls, &out, &errb, "--wait", "20s", key, "--", "sh", "-c", "echo exclusive")
	lockdtest.Eventually(t, func() bool {
		st, err := ls.c.State(context.Background(), key)
		return err == nil && len(st.Queue) == 1
	}, 5*time.Second, "the exclusive run in the queue")
	touch(t, dir+"/stop")
	for i, done := range dones {
		if code := waitExit(t, done, 10*time.Second, &errs[i]); code != 0 {
			t.Errorf("shared run %d: exit %d; stderr:\n%s", i, code, &errs[i])
		}
	}
	if code := waitExit(t, exclusive, 10*time.Second, &errb); code != 0 || !strings.Contains(out.String(), "exclusive") {
		t.Errorf("the exclusive run: exit %d, out %q; stderr:\n%s", code, &out, &errb)
	}
	assertFree(t, ls.c, key)
}

func TestRunSemaphoreUsage(t *testing.T) {
	ls := startCLIServer(t)
	tests := []struct {
		name string
		args []string
		msg  string
	}{
		{"no limit", []string{"--semaphore", "run:p", "--", "true"}, "needs --limit"},
		{"limit without semaphore", []string{"--limit", "2", "run:p", "--", "true"}, "--limit is for --semaphore"},
		{"a KEY as well", []string{"--semaphore", "run:p", "--limit", "2", "run:p", "--", "true"}, "takes no KEY"},
		{"shared semaphore", []string{"--semaphore", "run:p", "--limit", "2", "--shared", "--", "true"}, "--shared is for locks"},
		{"no command", []string{"--semaphore", "run:p", "--limit", "2"}, "-- COMMAND"},
		{"limit 0 is no limit", []string{"--semaphore", "run:p", "--limit", "0", "--", "true"}, "needs --limit"},
		{"limit out of range", []string{"--semaphore", "run:p", "--limit", "10001", "--", "true"}, "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb lockdtest.Buffer
			code := waitExit(t, lockdRun(ls, &out, &errb, tt.args...), 10*time.Second, &errb)
			if code != exitUsage || !strings.Contains(errb.String(), tt.msg) {
				t.Errorf("exit %d, want %d and %q on stderr:\n%s", code, exitUsage, tt.msg, &errb)
			}
		})
	}
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}
