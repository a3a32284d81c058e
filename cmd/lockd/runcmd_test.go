package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/lockdtest"
)

// lockdRun starts `lockd run ARGS...` in process; the channel gets its exit
// code once it has returned.
func lockdRun(ls *cliServer, stdout, stderr *lockdtest.Buffer, args ...string) <-chan int {
	done := make(chan int, 1)
	env := map[string]string{"LOCKD_SERVER": ls.url}
	go func() {
		err := run(context.Background(), append([]string{"lockd", "run"}, args...), func(k string) string { return env[k] }, stdout, stderr)
		done <- exitCode(err, stderr)
	}()
	return done
}

func waitExit(t *testing.T, done <-chan int, within time.Duration, stderr *lockdtest.Buffer) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(within):
		t.Fatalf("lockd run did not exit within %v; stderr:\n%s", within, stderr)
		return -1
	}
}

// waitHeld polls until key is held and returns its state.
func waitHeld(t *testing.T, c *client.Client, key string) api.LockState {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := c.State(context.Background(), key)
		if err == nil {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not held within 5 s: %v", key, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func assertFree(t *testing.T, c *client.Client, key string) {
	t.Helper()
	if _, err := c.State(context.Background(), key); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("%s is still held after lockd run: %v", key, err)
	}
}

func TestRunExitsWithCommandStatus(t *testing.T) {
	ls := startCLIServer(t)
	tests := []struct {
		name   string
		script string
		code   int
	}{
		{"success", "exit 0", 0},
		{"failure", "exit 7", 7},
		{"killed by a signal", "kill -KILL $$", 128 + 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb lockdtest.Buffer
			key := "run:status:" + strconv.Itoa(tt.code)
			code := waitExit(t, lockdRun(ls, &out, &errb, key, "--", "sh", "-c", tt.script), 10*time.Second, &errb)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.code, &errb)
			}
			assertFree(t, ls.c, key)
		})
	}
}

func TestRunKeepsLeaseAndReleasesAtExit(t *testing.T) {
	ls := startCLIServer(t)
	// A TTL a busy machine's scheduling cannot eat (300 ms lost the lease
	// under two busy loops: the process did not run for a third of it).
	const key, ttl = "run:long", 1500 * time.Millisecond
	var out, errb lockdtest.Buffer
	// The child runs until the lease has been renewed three times (the
	// test says so with a file), then prints when it ends (ns since epoch).
	stop := filepath.Join(t.TempDir(), "stop")
	done := lockdRun(ls, &out, &errb, "--ttl", ttl.String(), key, "--",
		"sh", "-c", `echo "key=$LOCKD_KEY fence=$LOCKD_FENCE"; while [ ! -e "$0" ]; do sleep 0.02; done; date +%s%N`, stop)

	st := waitHeld(t, ls.c, key)
	deadline := time.Now().Add(20 * time.Second)
	for st.Renewals < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		if s, err := ls.c.State(context.Background(), key); err == nil {
			st = s
		}
	}
	if st.Renewals < 3 {
		t.Errorf("renewals = %d while the command ran, want ≥ 3", st.Renewals)
	}
	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, done, 10*time.Second, &errb); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, &errb)
	}

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("child printed %q", out.String())
	}
	if want := "key=" + key + " fence=" + strconv.FormatInt(st.Fence, 10); lines[0] != want {
		t.Errorf("child saw %q, want %q", lines[0], want)
	}
	endNs, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		t.Fatalf("date printed %q", lines[1])
	}
	assertFree(t, ls.c, key)

	h, err := ls.c.History(context.Background(), key, 100)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := ls.c.Renewals(context.Background(), key, 100)
	if err != nil {
		t.Fatal(err)
	}
	h.Events = append(h.Events, rs.Events...)
	slices.SortFunc(h.Events, func(a, b api.Event) int { return b.At.Compare(a.At) })
	var renewedAt []time.Time
	var releasedAt, acquiredAt time.Time
	for _, e := range slices.Backward(h.Events) {
		if e.Fence != st.Fence {
			t.Errorf("event %s has fence %d, want %d throughout", e.Type, e.Fence, st.Fence)
		}
		switch e.Type {
		case api.Acquired:
			acquiredAt = e.At
		case api.Renewed:
			renewedAt = append(renewedAt, e.At)
		case api.Released:
			releasedAt = e.At
		}
	}
	if len(renewedAt) < 3 || releasedAt.IsZero() {
		t.Fatalf("history: %d renewals, released at %v", len(renewedAt), releasedAt)
	}
	var gaps []time.Duration
	prev := acquiredAt
	for _, at := range renewedAt {
		gaps = append(gaps, at.Sub(prev))
		prev = at
	}
	var sum time.Duration
	for _, g := range gaps {
		sum += g
	}
	releaseDelay := releasedAt.Sub(time.Unix(0, endNs))
	t.Logf("lockd run, ttl %v: %d renewals, interval mean %v (ttl/3 = %v), min %v, max %v; released %v after the command's last line",
		ttl, len(gaps), (sum / time.Duration(len(gaps))).Round(time.Millisecond), ttl/3,
		slices.Min(gaps).Round(time.Millisecond), slices.Max(gaps).Round(time.Millisecond), releaseDelay.Round(time.Millisecond))
	if m := slices.Max(gaps); m >= ttl {
		t.Errorf("a renewal came %v after the previous one: the lease could have expired", m)
	}
	if releaseDelay > 2*time.Second {
		t.Errorf("released %v after the command ended", releaseDelay)
	}
}

func TestRunStopsCommandWhenLeaseIsLost(t *testing.T) {
	ls := startCLIServer(t)
	tests := []struct {
		name   string
		script string
		grace  time.Duration
	}{
		{"command ends on SIGTERM", `echo started; sleep 30`, 10 * time.Second},
		{"command ignores SIGTERM: SIGKILL after the grace", `trap "" TERM; echo started; sleep 30`, 300 * time.Millisecond},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "run:lost:" + strconv.Itoa(i)
			var out, errb lockdtest.Buffer
			// The loss is heard at the next renewal, a third of the TTL
			// after the last: 3 s leaves a busy machine room.
			done := lockdRun(ls, &out, &errb, "--ttl", "3s", "--grace", tt.grace.String(), key, "--", "sh", "-c", tt.script)
			waitHeld(t, ls.c, key)
			for !strings.Contains(out.String(), "started") {
				time.Sleep(5 * time.Millisecond)
			}
			broke := time.Now()
			if _, err := ls.c.ForceRelease(context.Background(), key, "stuck after deploy"); err != nil {
				t.Fatal(err)
			}
			code := waitExit(t, done, 10*time.Second, &errb)
			t.Logf("%s: lockd run exited %v after the force-release", tt.name, time.Since(broke).Round(time.Millisecond))
			if code != exitLeaseLost {
				t.Errorf("exit %d, want %d", code, exitLeaseLost)
			}
			for _, want := range []string{"lease lost", key, "force-released", `"stuck after deploy"`, "SIGTERM"} {
				if !strings.Contains(errb.String(), want) {
					t.Errorf("stderr does not say %q:\n%s", want, &errb)
				}
			}
		})
	}
}

func TestRunRefusals(t *testing.T) {
	ls := startCLIServer(t)
	held, err := ls.c.Acquire(context.Background(), "run:held", client.AcquireOptions{Owner: "other", TTL: time.Minute, NoAutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"held after the wait", []string{"--wait", "200ms", "run:held", "--", "true"}, exitHeld, "held by other"},
		{"no command", []string{"run:x"}, exitUsage, "KEY -- COMMAND"},
		{"no key", nil, exitUsage, "KEY -- COMMAND"},
		{"command not found", []string{"run:nf", "--", "/nonexistent/cmd"}, exitNoCommand, "no such file"},
		{"bad ttl", []string{"--ttl", "1ms", "run:y", "--", "true"}, exitUsage, "ttl_ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb lockdtest.Buffer
			code := waitExit(t, lockdRun(ls, &out, &errb, tt.args...), 10*time.Second, &errb)
			if code != tt.code || !strings.Contains(errb.String(), tt.msg) {
				t.Errorf("exit %d, want %d and %q on stderr:\n%s", code, tt.code, tt.msg, &errb)
			}
		})
	}
	assertFree(t, ls.c, "run:nf")
}

func TestRunRetriesWhileRedisIsDown(t *testing.T) {
	ls := startCLIServer(t)
	ls.redis.Stop()
	var out, errb lockdtest.Buffer
	// --wait 0s: a waiting acquire is kept open by the server while Redis
	// is down, so only an acquire that does not wait meets the 503s that
	// --retry is about.
	done := lockdRun(ls, &out, &errb, "--retry", "20s", "--wait", "0s", "run:retry", "--", "sh", "-c", "echo fence=$LOCKD_FENCE")
	// The retry path must run: wait until the server has answered two
	// 503s (a first try and a retry) before Redis comes back.
	lockdtest.Eventually(t, func() bool { return answered503(t, ls.url) >= 2 }, 5*time.Second, "two 503s while Redis is down")
	ls.redis.Restart()
	if code := waitExit(t, done, 15*time.Second, &errb); code != 0 || !strings.Contains(out.String(), "fence=") {
		t.Fatalf("exit %d, out %q; stderr:\n%s", code, &out, &errb)
	}
}

// answered503 is how many 503s the lockd at url has answered, from its
// lockd_http_requests_total series.
func answered503(t *testing.T, url string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	total := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "lockd_http_requests_total{") && strings.Contains(line, `status="503"`) {
			var n float64
			_, _ = fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &n)
			total += n
		}
	}
	return total
}

// Signals to lockd run reach the command; this needs a real lockd process.
func TestRunForwardsSignals(t *testing.T) {
	ls := startCLIServer(t)
	bin := buildLockd(t)
	tests := []struct {
		sig  syscall.Signal
		name string
	}{
		{syscall.SIGTERM, "TERM"},
		{syscall.SIGINT, "INT"},
		{syscall.SIGHUP, "HUP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "run:signal:" + tt.name
			cmd := exec.Command(bin, "run", "--server", ls.url, key, "--", "sh", "-c",
				`trap 'echo got `+tt.name+`; exit 42' `+tt.name+`; echo ready; while :; do sleep 0.05; done`)
			cmd.Env = []string{"PATH=/usr/bin:/bin"}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var errb lockdtest.Buffer
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := bufio.NewScanner(stdout)
			if !lines.Scan() || lines.Text() != "ready" {
				t.Fatalf("child said %q; stderr:\n%s", lines.Text(), &errb)
			}
			if err := cmd.Process.Signal(tt.sig); err != nil {
				t.Fatal(err)
			}
			var rest []string
			for lines.Scan() {
				rest = append(rest, lines.Text())
			}
			err = cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 42 {
				t.Errorf("lockd run ended with %v, want exit 42 (the command's)", err)
			}
			if !slices.Contains(rest, "got "+tt.name) {
				t.Errorf("command printed %q, want %q", rest, "got "+tt.name)
			}
			assertFree(t, ls.c, key)
		})
	}
}

// F17: COMMAND does not inherit lockd's API key or a lease token.
func TestRunHidesSecretsFromCommand(t *testing.T) {
	ls := startCLIServer(t)
	t.Setenv("LOCKD_API_KEY", "ci-key-0123456789abcdef")
	t.Setenv("LOCKD_TOKEN", "a-token-from-elsewhere-0123456789")
	t.Setenv("LOCKD_RUN_TEST_KEEP", "kept")
	var out, errb lockdtest.Buffer
	code := waitExit(t, lockdRun(ls, &out, &errb, "run:env", "--", "sh", "-c",
		`echo "api=${LOCKD_API_KEY-unset} token=${LOCKD_TOKEN-unset} keep=${LOCKD_RUN_TEST_KEEP-unset} key=$LOCKD_KEY"`), 10*time.Second, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, &errb)
	}
	if got, want := strings.TrimSpace(out.String()), "api=unset token=unset keep=kept key=run:env"; got != want {
		t.Fatalf("COMMAND saw %q, want %q", got, want)
	}
}

// lockd run --on-request USR1: a request that the holder step aside
// reaches COMMAND as that signal (once); COMMAND decides, here by exiting
// 0, and the lease is released then. Bad values and --shared are usage
// errors.
func TestRunOnRequest(t *testing.T) {
	ls := startCLIServer(t)
	key := "run:onrequest"
	var out, errb lockdtest.Buffer
	done := lockdRun(ls, &out, &errb, "--ttl", "600ms", "--on-request", "USR1", key, "--", "sh", "-c",
		`trap 'echo asked; exit 0' USR1; echo started; while :; do sleep 0.05; done`)
	waitHeld(t, ls.c, key)
	for !strings.Contains(out.String(), "started") {
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := ls.c.RequestRelease(context.Background(), key, "deploy-42", "hotfix"); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, done, 10*time.Second, &errb); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, &errb)
	}
	if !strings.Contains(out.String(), "asked") || !strings.Contains(errb.String(), "deploy-42 asks for "+key) {
		t.Fatalf("stdout %q, stderr %q", out.String(), errb.String())
	}
	assertFree(t, ls.c, key)

	for _, args := range [][]string{
		{"--on-request", "NOPE", "run:x", "--", "true"},
		{"--on-request", "TERM", "--shared", "run:x", "--", "true"},
	} {
		var out, errb lockdtest.Buffer
		if code := waitExit(t, lockdRun(ls, &out, &errb, args...), 10*time.Second, &errb); code != exitUsage || !strings.Contains(errb.String(), "--on-request") {
			t.Errorf("%v: exit %d, stderr %s", args, code, &errb)
		}
	}
}

// `lockd run --key A --key B` holds every key all or nothing while COMMAND
// runs, tells COMMAND the keys and their fences, and releases them all.
func TestRunLockSet(t *testing.T) {
	ls := startCLIServer(t)
	var out, errb lockdtest.Buffer
	code := waitExit(t, lockdRun(ls, &out, &errb, "--key", "run:set:b", "--key", "run:set:c", "run:set:a", "--",
		"sh", "-c", `echo "$LOCKD_KEYS|$LOCKD_FENCES|$LOCKD_KEY"`), 10*time.Second, &errb)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, &errb)
	}
	f := strings.Split(strings.TrimSpace(out.String()), "|")
	if len(f) != 3 || f[0] != "run:set:b run:set:c run:set:a" || len(strings.Fields(f[1])) != 3 || f[2] != "run:set:b" {
		t.Fatalf("COMMAND saw %q", out.String())
	}
	for _, k := range []string{"run:set:a", "run:set:b", "run:set:c"} {
		assertFree(t, ls.c, k)
	}

	held, err := ls.c.Acquire(context.Background(), "run:set:c", client.AcquireOptions{Owner: "other", TTL: time.Minute, NoAutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	for _, tt := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"a key held after the wait", []string{"--wait", "200ms", "--key", "run:set:a", "--key", "run:set:c", "--", "true"}, exitHeld, "run:set:c is held by other"},
		{"one key", []string{"--key", "run:set:a", "--", "true"}, exitUsage, "two or more keys"},
		{"on-request", []string{"--on-request", "USR1", "--key", "run:set:a", "--key", "run:set:b", "--", "true"}, exitUsage, "--on-request"},
		{"a duplicate", []string{"--key", "run:set:a", "--key", "run:set:a", "--", "true"}, exitUsage, "keys[1]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb lockdtest.Buffer
			code := waitExit(t, lockdRun(ls, &out, &errb, tt.args...), 10*time.Second, &errb)
			if code != tt.code || !strings.Contains(errb.String(), tt.msg) {
				t.Errorf("exit %d, want %d and %q on stderr:\n%s", code, tt.code, tt.msg, &errb)
			}
		})
	}
	assertFree(t, ls.c, "run:set:a")
}
