package clients

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lockdtest"
)

// TestPython runs the Python client's tests (clients/python/tests, with
// python3 -m unittest) against a real lockd on a real Redis, then reports
// the shared scenarios one subtest each.
func TestPython(t *testing.T) {
	py := needPython(t)
	h := startHarness(t)
	results := filepath.Join(t.TempDir(), "scenarios.jsonl")

	// The suite takes about 15 s; the bound is for a hang, not for speed.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-s", "clients/python/tests", "-v")
	cmd.Dir = ".." // the repository's root, as in the README's command
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), h.env...)
	cmd.Env = append(cmd.Env, "LOCKD_SCENARIO_RESULTS="+results, "PYTHONDONTWRITEBYTECODE=1")
	var out lockdtest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out

	began := time.Now()
	err := h.run(t, cmd)
	took := time.Since(began)
	ran := regexp.MustCompile(`(?m)^Ran \d+ tests? in [0-9.]+s$`).FindString(out.String())
	if err != nil {
		t.Errorf("python3 -m unittest: %v after %v\n%s", err, took.Round(time.Millisecond), &out)
	} else {
		t.Logf("python3 -m unittest: %s (%v with the interpreter's start)\n%s", ran, took.Round(time.Millisecond), &out)
	}
	checkScenarios(t, "python", results)
}

// needPython returns python3's path; it fails (never skips) when python3
// is missing or older than the client supports.
func needPython(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is not on PATH; the Python client's tests need it (3.9 or later). " +
			"Install it with `apt-get install -y python3`, or run `make test`, which installs it when it can.")
	}
	out, err := exec.Command(py, "-c", "import sys; print('%d.%d' % sys.version_info[:2]); sys.exit(sys.version_info < (3, 9))").CombinedOutput()
	if err != nil {
		t.Fatalf("%s is Python %s; the Python client needs 3.9 or later", py, strings.TrimSpace(string(out)))
	}
	return py
}
