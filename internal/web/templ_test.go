package web

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestTemplGenerated_UpToDate regenerates every component into a temporary
// copy of the .templ files and fails when a committed *_templ.go differs:
// someone edited a .templ file without running go generate ./web.
func TestTemplGenerated_UpToDate(t *testing.T) {
	sources, err := filepath.Glob("*.templ")
	if err != nil || len(sources) == 0 {
		t.Fatalf("no .templ files (%v)", err)
	}
	dir := t.TempDir()
	for _, src := range sources {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, src), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The templ pinned by go.mod's tool line, so the output matches what
	// go generate writes.
	cmd := exec.Command("go", "tool", "templ", "generate", "-path", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go tool templ generate: %v\n%s", err, out)
	}
	for _, src := range sources {
		gen := src[:len(src)-len(".templ")] + "_templ.go"
		want, err := os.ReadFile(filepath.Join(dir, gen))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(gen)
		if err != nil {
			t.Fatalf("%s is missing: run go generate ./web", gen)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate ./web and commit it", gen)
		}
	}
	// No generated file without its source.
	generated, _ := filepath.Glob("*_templ.go")
	if len(generated) != len(sources) {
		t.Errorf("%d generated files for %d .templ files", len(generated), len(sources))
	}
}
