package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// CI builds the binary with `make build`; the image must build it the same
// way, so that CI exercises the Dockerfile's build step. Both stamp the
// version and commit (newcomer #9) into the variables version.go reads.
func TestDockerfileBuildsLikeCI(t *testing.T) {
	const build = `CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}"`
	for _, f := range []string{"../../Dockerfile", "../../Makefile"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// make passes $$ to the shell as $.
		if !strings.Contains(strings.ReplaceAll(string(b), "$$", "$"), build) {
			t.Fatalf("%s does not build with %q", f, build)
		}
	}
	b, _ := os.ReadFile("../../Dockerfile")
	for _, want := range []string{"USER nonroot", "HEALTHCHECK", `ENTRYPOINT ["/lockd", "serve"]`} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("Dockerfile lacks %q", want)
		}
	}
}

// newcomer #8: .dockerignore keeps the repository's bulk out of the image's
// build context (.git, bin/, node_modules, the docs), and none of the files
// the binary's build reads: go.mod, go.sum and every Go and embedded file
// of the packages cmd/lockd imports (go list).
func TestDockerignore(t *testing.T) {
	b, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			if strings.HasPrefix(line, "!") {
				t.Fatalf(".dockerignore: %q: this test does not read exceptions", line)
			}
			patterns = append(patterns, line)
		}
	}
	ignored := func(path string) bool {
		for _, p := range patterns {
			if base, ok := strings.CutPrefix(p, "**/"); ok {
				for _, el := range strings.Split(path, "/") {
					if m, _ := filepath.Match(base, el); m {
						return true
					}
				}
				continue
			}
			if m, _ := filepath.Match(p, path); m || strings.HasPrefix(path, p+"/") {
				return true
			}
		}
		return false
	}
	for _, p := range []string{".git/config", "bin/lockd", "tools/js/node_modules/x/index.js", "clients/typescript/dist/index.js", "docs/dashboard.png"} {
		if !ignored(p) {
			t.Errorf(".dockerignore sends %s to the build", p)
		}
	}
	out, err := exec.Command("go", "list", "-deps", "-f", `{{if .Module}}{{if .Module.Main}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{range .EmbedFiles}} {{.}}{{end}}{{end}}{{end}}`, ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	needed := []string{"go.mod", "go.sum"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		dir, err := filepath.Rel(root, f[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range f[1:] {
			needed = append(needed, filepath.ToSlash(filepath.Join(dir, name)))
		}
	}
	if len(needed) < 50 {
		t.Fatalf("go list named only %d files of the build: %v", len(needed), needed)
	}
	for _, p := range needed {
		if ignored(p) {
			t.Errorf(".dockerignore leaves out %s, which the build reads", p)
		}
	}
}
