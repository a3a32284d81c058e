package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
)

var (
	buildOnce sync.Once
	built     string
	buildErr  error
)

// buildLockd builds the lockd binary once per test run, for tests that
// need a real process (signals).
func buildLockd(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		// Not t.TempDir: the binary outlives the test that built it.
		dir, err := os.MkdirTemp("", "lockd-bin-")
		if err != nil {
			buildErr = err
			return
		}
		built = filepath.Join(dir, "lockd")
		if b, err := exec.Command("go", "build", "-o", built, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("%w\n%s", err, b)
		}
	})
	if buildErr != nil {
		t.Fatalf("go build: %v", buildErr)
	}
	return built
}

// serveProcess runs `lockd serve` as a process of its own and returns its
// URL and the process.
func serveProcess(t *testing.T, redisURL string) (string, *exec.Cmd) {
	t.Helper()
	return serveBinary(t, buildLockd(t), redisURL)
}

// serveBinary runs `bin serve` on redisURL, as serveProcess runs this
// lockd.
func serveBinary(t *testing.T, bin, redisURL string) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--redis", redisURL)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var l struct{ Message, Addr string }
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Message == "listening" {
				addr <- l.Addr
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + a, cmd
	case <-time.After(10 * time.Second):
		t.Fatal("lockd serve did not listen in 10 s")
		return "", nil
	}
}

// The reproduction of a 409 that named a waiter as holder: hold a key
// through replica A, queue a waiter through replica B, stop B (SIGSTOP),
// release through A and try once through A. The key is free but kept for
// B's waiter: 409 queued with waiters and next, never lock_held.
func TestServeQueuedIsNotHeld(t *testing.T) {
	rs := redistest.Start(t)
	a, _ := serveProcess(t, rs.URL())
	b, bProc := serveProcess(t, rs.URL())
	const key = "/v1/locks/order:pay:12345"
	_, held := post(t, a+key+"/acquire", `{"owner":"holder","ttl_ms":60000}`)
	go func() {
		// Its answer never comes: b is stopped, then killed.
		res, err := http.Post(b+key+"/acquire", "application/json", strings.NewReader(`{"owner":"waiter-on-b","wait_ms":20000}`))
		if err == nil {
			res.Body.Close()
		}
	}()
	lockdtest.Eventually(t, func() bool { return waitersOf(t, b) == 1 }, 5*time.Second, "the waiter on b")
	redistest.StopProcess(t, bProc.Process)
	if status, _ := post(t, a+key+"/release", `{"token":"`+held["token"].(string)+`"}`); status != 200 {
		t.Fatalf("release: %d", status)
	}
	res, err := http.Post(a+key+"/acquire", "application/json", strings.NewReader(`{"owner":"other"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var p map[string]any
	_ = json.NewDecoder(res.Body).Decode(&p)
	t.Logf("%d Retry-After %s %v", res.StatusCode, res.Header.Get("Retry-After"), p)
	next, _ := p["next"].(map[string]any)
	if res.StatusCode != 409 || p["code"] != "queued" || p["waiters"] != 1.0 || next["owner"] != "waiter-on-b" || next["waiting_since"] == nil {
		t.Fatalf("try-once on a free key kept for a waiter: %d %v, want 409 queued with waiters 1 and next waiter-on-b", res.StatusCode, p)
	}
	if _, ok := p["holder"]; ok {
		t.Fatalf("a queued answer names a holder: %v", p)
	}
	if _, ok := p["remaining_ms"]; ok {
		t.Fatalf("a queued answer gives a lease's time left: %v", p)
	}
	if ra := res.Header.Get("Retry-After"); ra != "1" && ra != "2" {
		t.Fatalf("Retry-After %q, want 1 or 2", ra)
	}
}
