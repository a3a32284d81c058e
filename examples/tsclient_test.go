package examples_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A TypeScript client generated from api/openapi.yaml by outside tools
// (openapi-typescript for the types, openapi-fetch for the calls, tsc in
// strict mode) takes, renews and releases order:pay:1 against a real
// lockd. openapi-fetch percent-encodes the key in the path, as any correct
// client does, so this also proves that lockd decodes it.
func TestTypeScriptClientFromTheSpec(t *testing.T) {
	need(t, "node", "apt-get install -y nodejs npm")
	dir, err := filepath.Abs("../tools/js")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".bin", "openapi-typescript")); err != nil {
		t.Fatalf("the npm tools of tools/js are not installed (%v); run ./scripts/install-deps (make test does)", err)
	}
	// The types are generated next to client.ts (git ignores them); the
	// JavaScript goes to a temporary directory, ESM, resolving its imports
	// from tools/js/node_modules.
	out := t.TempDir()
	for _, step := range [][]string{
		{"node_modules/.bin/openapi-typescript", "../../api/openapi.yaml", "-o", "client/lockd.d.ts"},
		{"node_modules/.bin/tsc", "-p", "client", "--outDir", out},
	} {
		cmd := exec.Command(step[0], step[1:]...)
		cmd.Dir = dir
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(step, " "), err, b)
		}
	}
	if err := os.WriteFile(filepath.Join(out, "package.json"), []byte(`{"type":"module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "node_modules"), filepath.Join(out, "node_modules")); err != nil {
		t.Fatal(err)
	}

	ld := startLockd(t)
	cmd := exec.Command("node", filepath.Join(out, "client.js"), ld.url)
	b, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("the TypeScript client failed: %v\n%s%s", err, b, stderr)
	}
	var got struct {
		Key   string   `json:"key"`
		Paths []string `json:"paths"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("output %q: %v", b, err)
	}
	if got.Key != "order:pay:1" || !slices.Contains(got.Paths, "/v1/locks/order%3Apay%3A1/acquire") {
		t.Fatalf("key %q, paths %q: want order:pay:1 sent percent-encoded", got.Key, got.Paths)
	}
}
