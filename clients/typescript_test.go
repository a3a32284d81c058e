package clients

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lockdtest"
)

// TestTypeScript runs the TypeScript client's tests (clients/typescript,
// compiled by tsc and run by node --test through its scripts/test.mjs,
// which `npm test` runs too) against a real lockd on a real Redis, then
// reports the shared scenarios one subtest each.
func TestTypeScript(t *testing.T) {
	node := needNode(t)
	h := startHarness(t)
	results := filepath.Join(t.TempDir(), "scenarios.jsonl")

	// The suite takes about 20 s; the bound is for a hang, not for speed.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "clients/typescript/scripts/test.mjs")
	cmd.Dir = ".." // the repository's root
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), h.env...)
	cmd.Env = append(cmd.Env, "LOCKD_SCENARIO_RESULTS="+results, "NO_COLOR=1")
	var out lockdtest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out

	began := time.Now()
	err := h.run(t, cmd)
	took := time.Since(began)
	if err != nil {
		t.Errorf("node --test: %v after %v\n%s", err, took.Round(time.Millisecond), &out)
	} else {
		t.Logf("node --test: %s (%v with tsc and node's start)\n%s", nodeSummary(out.String()), took.Round(time.Millisecond), &out)
	}
	checkScenarios(t, "typescript", results)
}

// nodeSummary is the count and time of node --test's spec reporter
// ("ℹ tests 42" ... "ℹ duration_ms 12345.6").
func nodeSummary(out string) string {
	field := func(name string) string {
		m := regexp.MustCompile(`(?m)^ℹ ` + name + ` ([0-9.]+)$`).FindStringSubmatch(out)
		if m == nil {
			return "?"
		}
		return m[1]
	}
	secs := field("duration_ms")
	if ms, err := strconv.ParseFloat(secs, 64); err == nil {
		secs = strconv.FormatFloat(ms/1000, 'f', 1, 64)
	}
	return "ran " + field("tests") + " tests (" + field("pass") + " passed) in " + secs + " s"
}

// needNode returns node's path; it fails (never skips) when node is
// missing or older than 18, or the TypeScript compiler of tools/js is not
// installed.
func needNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not on PATH; the TypeScript client's tests need Node 18 or later. " +
			"Install it with `apt-get install -y nodejs npm`, or run `make test`, which installs it when it can.")
	}
	out, err := exec.Command(node, "-p", "process.versions.node").Output()
	if err != nil {
		t.Fatalf("%s -p process.versions.node: %v", node, err)
	}
	version := strings.TrimSpace(string(out))
	if major, _, _ := strings.Cut(version, "."); atoi(major) < 18 {
		t.Fatalf("%s is Node %s; the TypeScript client needs 18 or later", node, version)
	}
	for _, tool := range []string{"../tools/js/node_modules/.bin/tsc", "../tools/js/node_modules/@types/node"} {
		if _, err := os.Stat(tool); err != nil {
			t.Fatalf("%v: the npm tools of tools/js are not installed; run ./scripts/install-deps (make test does), "+
				"which runs `npm ci` in tools/js", err)
		}
	}
	return node
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}
