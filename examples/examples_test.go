package examples_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/server"
)

// binDir holds a lockd binary built from this tree, for run.sh.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lockd-examples")
	if err != nil {
		panic(err)
	}
	out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "lockd"), "../cmd/lockd").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build ../cmd/lockd: %v\n%s", err, out)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type lockd struct {
	url string
	c   *client.Client
}

func startLockd(t *testing.T) *lockd {
	t.Helper()
	ld := lockdtest.Start(t, lockdtest.Options{})
	c, err := client.New(ld.URL, client.WithRetry(0))
	if err != nil {
		t.Fatal(err)
	}
	return &lockd{url: ld.URL, c: c}
}

// need fails (never skips) when an interpreter the examples need is missing.
func need(t *testing.T, prog, install string) {
	t.Helper()
	if _, err := exec.LookPath(prog); err != nil {
		t.Fatalf("%s is not on PATH; the examples' tests need it. Install it: %s", prog, install)
	}
}

// script is a running example.
type script struct {
	cmd      *exec.Cmd
	out, err lockdtest.Buffer
	done     chan struct{}
	code     int
	ended    time.Time
}

func start(t *testing.T, ld *lockd, env []string, argv ...string) *script {
	t.Helper()
	s := &script{done: make(chan struct{})}
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Env = append(os.Environ(), append([]string{
		"LOCKD_SERVER=" + ld.url,
		"PATH=" + binDir + string(os.PathListSeparator) + os.Getenv("PATH"),
	}, env...)...)
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.err
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := s.cmd.Wait()
		s.ended = time.Now()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			s.code = ee.ExitCode()
		case err != nil:
			s.code = -1
		}
		close(s.done)
	}()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-s.done
	})
	return s
}

func (s *script) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-s.done:
		return s.code
	case <-time.After(20 * time.Second):
		t.Fatalf("%v did not end in 20 s\nstdout:\n%s\nstderr:\n%s", s.cmd.Args, &s.out, &s.err)
		return -1
	}
}

// waitOutput polls until stdout contains want.
func (s *script) waitOutput(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%v did not print %q in 10 s\nstdout:\n%s\nstderr:\n%s", s.cmd.Args, want, &s.out, &s.err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// renewals counts the key's renewed events under one fence.
func renewals(t *testing.T, ld *lockd, key string) (n int, fences map[int64]bool) {
	t.Helper()
	h, err := ld.c.Renewals(context.Background(), key, 200)
	if err != nil {
		t.Fatal(err)
	}
	fences = map[int64]bool{}
	for _, e := range h.Events {
		fences[e.Fence] = true
		if e.Type == api.Renewed {
			n++
		}
	}
	return n, fences
}

// freeWithin polls until key has no live lease; it returns how long that
// took from since.
func freeWithin(t *testing.T, ld *lockd, key string, since time.Time, within time.Duration) time.Duration {
	t.Helper()
	for {
		_, err := ld.c.State(context.Background(), key)
		if errors.Is(err, client.ErrNotFound) {
			return time.Since(since)
		}
		if time.Since(since) > within {
			t.Fatalf("%s still held %v after the script ended: %v", key, within, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func holdOther(t *testing.T, ld *lockd, key string) {
	t.Helper()
	l, err := ld.c.Acquire(context.Background(), key, client.AcquireOptions{Owner: "someone-else", TTL: time.Minute, NoAutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
}

func TestRunSh(t *testing.T) {
	need(t, "bash", "apt-get install -y bash")
	ld := startLockd(t)

	t.Run("runs the job under a renewed lease", func(t *testing.T) {
		s := start(t, ld, []string{"KEY=ex:run", "TTL=300ms", "JOB_SECONDS=1.2"}, "bash", "run.sh")
		if code := s.wait(t); code != 0 {
			t.Fatalf("exit %d\n%s%s", code, &s.out, &s.err)
		}
		for _, want := range []string{"under fence", "report written", "done"} {
			if !strings.Contains(s.out.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, &s.out)
			}
		}
		n, fences := renewals(t, ld, "ex:run")
		if n < 3 || len(fences) != 1 {
			t.Errorf("%d renewals under %d fences, want ≥ 3 under one", n, len(fences))
		}
		freeWithin(t, ld, "ex:run", s.ended, time.Second)
	})
	t.Run("skips when another run holds the lock", func(t *testing.T) {
		holdOther(t, ld, "ex:run:held")
		s := start(t, ld, []string{"KEY=ex:run:held", "WAIT=100ms"}, "bash", "run.sh")
		if code := s.wait(t); code != 0 || !strings.Contains(s.out.String(), "skipping") {
			t.Fatalf("exit %d, want 0 and skipping\n%s%s", code, &s.out, &s.err)
		}
	})
}

func TestHoldSh(t *testing.T) {
	need(t, "bash", "apt-get install -y bash")
	need(t, "curl", "apt-get install -y curl")
	ld := startLockd(t)

	t.Run("holds while the command runs, releases on disconnect", func(t *testing.T) {
		s := start(t, ld, []string{"TTL_MS=300"}, "bash", "hold.sh", "ex:hold", "sh", "-c", `echo "fence=$LOCKD_FENCE"; sleep 1.2`)
		if code := s.wait(t); code != 0 {
			t.Fatalf("exit %d\n%s%s", code, &s.out, &s.err)
		}
		if !regexp.MustCompile(`(?m)^fence=[1-9][0-9]*$`).MatchString(s.out.String()) {
			t.Errorf("the command did not get LOCKD_FENCE:\n%s", &s.out)
		}
		d := freeWithin(t, ld, "ex:hold", s.ended, time.Second)
		n, fences := renewals(t, ld, "ex:hold")
		t.Logf("hold.sh: %d server-side renewals under ttl 300ms; key free %v after the script ended", n, d.Round(time.Millisecond))
		if n < 3 || len(fences) != 1 {
			t.Errorf("%d renewals under %d fences, want ≥ 3 under one", n, len(fences))
		}
	})
	t.Run("stops the command when the lease is lost", func(t *testing.T) {
		s := start(t, ld, []string{"TTL_MS=600"}, "bash", "hold.sh", "ex:hold:lost", "sleep", "30")
		s.waitOutput(t, "holding ex:hold:lost")
		if _, err := ld.c.ForceRelease(context.Background(), "ex:hold:lost", "test"); err != nil {
			t.Fatal(err)
		}
		if code := s.wait(t); code != 3 || !strings.Contains(s.err.String(), "lost") {
			t.Fatalf("exit %d, want 3 and lost\n%s%s", code, &s.out, &s.err)
		}
	})
	t.Run("exit 1 when held", func(t *testing.T) {
		holdOther(t, ld, "ex:hold:held")
		s := start(t, ld, []string{"WAIT_MS=100"}, "bash", "hold.sh", "ex:hold:held", "true")
		if code := s.wait(t); code != 1 || !strings.Contains(s.err.String(), "someone-else") {
			t.Fatalf("exit %d, want 1 and the holder\n%s%s", code, &s.out, &s.err)
		}
	})
}

// renew.py and renew.mjs behave alike: the same table for both.
func TestManualRenewal(t *testing.T) {
	ld := startLockd(t)
	langs := []struct {
		name, prog, file, install string
	}{
		{"python", "python3", "renew.py", "apt-get install -y python3 (or brew install python)"},
		{"node", "node", "renew.mjs", "apt-get install -y nodejs (Node 18 or newer, for fetch)"},
	}
	for _, lang := range langs {
		t.Run(lang.name, func(t *testing.T) {
			need(t, lang.prog, lang.install)
			key := "ex:" + lang.name

			// A TTL of 1.5 s, renewed every 0.5 s: a loaded 2-core machine
			// can hold a Python or Node thread back for a few hundred ms
			// (a 300 ms TTL lapsed between renewals there).
			s := start(t, ld, nil, lang.prog, lang.file, key, "1500", "2")
			if code := s.wait(t); code != 0 {
				t.Fatalf("exit %d\n%s%s", code, &s.out, &s.err)
			}
			if got := strings.Count(s.out.String(), "renewed"); got < 3 {
				t.Errorf("%d renewals printed, want ≥ 3:\n%s", got, &s.out)
			}
			if !strings.Contains(s.out.String(), "released") {
				t.Errorf("no release:\n%s", &s.out)
			}
			n, fences := renewals(t, ld, key)
			if n < 3 || len(fences) != 1 {
				t.Errorf("%d renewals under %d fences, want ≥ 3 under one", n, len(fences))
			}
			freeWithin(t, ld, key, s.ended, time.Second)

			// A force-release stops the work: exit 3.
			s = start(t, ld, nil, lang.prog, lang.file, key+":lost", "600", "30")
			s.waitOutput(t, "acquired")
			if _, err := ld.c.ForceRelease(context.Background(), key+":lost", "test"); err != nil {
				t.Fatal(err)
			}
			if code := s.wait(t); code != 3 || !strings.Contains(s.err.String(), "lost") {
				t.Errorf("after force-release: exit %d, want 3\n%s%s", code, &s.out, &s.err)
			}

			holdOther(t, ld, key+":held")
			s = start(t, ld, []string{"WAIT_MS=100"}, lang.prog, lang.file, key+":held", "300", "0")
			if code := s.wait(t); code != 1 || !strings.Contains(s.err.String(), "someone-else") {
				t.Errorf("held: exit %d, want 1\n%s%s", code, &s.out, &s.err)
			}

			s = start(t, &lockd{url: "http://127.0.0.1:1"}, nil, lang.prog, lang.file, key, "300", "0")
			if code := s.wait(t); code != 4 {
				t.Errorf("unreachable: exit %d, want 4\n%s%s", code, &s.out, &s.err)
			}
		})
	}
}

// F16: hold.sh sends the API key without putting it in any process's argv,
// where ps would show it for as long as the hold lasts.
func TestHoldShKeepsKeyOutOfArgv(t *testing.T) {
	const apiKey = "hold-sh-key-0123456789abcdef"
	keys, err := auth.Parse([]byte("keys:\n  - {name: holder, key: \"" + apiKey + "\", scopes: [write]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	srv := lockdtest.Start(t, lockdtest.Options{Configure: func(c *server.Config) { c.Keys = keys }})
	ld := &lockd{url: srv.URL}
	s := start(t, ld, []string{"LOCKD_API_KEY=" + apiKey, "TTL_MS=5000"}, "bash", "hold.sh", "ex:hold:argv", "sleep", "2")
	s.waitOutput(t, "holding ex:hold:argv")
	// Every process's argv, while curl holds the stream.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(apiKey)) {
			// End that process (curl), or the script would hold on.
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("%s shows the API key: %q", p, bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		}
	}
	if len(procs) == 0 {
		t.Fatal("no /proc to look at")
	}
	if code := s.wait(t); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, &s.out, &s.err)
	}
}
