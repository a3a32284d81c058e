package clients

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPythonPackageInstalls: `pip install ./clients/python` works as a
// newcomer types it (newcomer #6: "Neither 'setup.py' nor 'pyproject.toml'
// found"), into a fresh virtual environment, from no package index at all:
// the build backend is the client's own, on the standard library. The
// installed package imports from anywhere and says its version; pip
// uninstalls it cleanly.
func TestPythonPackageInstalls(t *testing.T) {
	py := needPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	venv := filepath.Join(t.TempDir(), "venv")
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = t.TempDir() // not the checkout: the import must find the installed copy
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PIP_DISABLE_PIP_VERSION_CHECK=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run(py, "-m", "venv", venv)
	pip, vpy := filepath.Join(venv, "bin", "pip"), filepath.Join(venv, "bin", "python")
	src, err := filepath.Abs("python")
	if err != nil {
		t.Fatal(err)
	}
	run(pip, "install", "--no-index", src)
	got := run(vpy, "-c", "import lockd, importlib.metadata as m; print(lockd.__file__); print(m.version('lockd-client')); print(lockd.Client.__name__)")
	lines := strings.Fields(got)
	if len(lines) != 3 || !strings.HasPrefix(lines[0], venv) || lines[2] != "Client" {
		t.Fatalf("the installed package: %q, want it imported from %s", got, venv)
	}
	init, err := os.ReadFile(filepath.Join("python", "lockd", "__init__.py"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(init), `__version__ = "`+lines[1]+`"`) {
		t.Errorf("installed version %s is not lockd.__version__", lines[1])
	}
	run(pip, "uninstall", "-y", "lockd-client")
	if out, err := exec.CommandContext(ctx, vpy, "-c", "import lockd").CombinedOutput(); err == nil {
		t.Fatalf("lockd still imports after pip uninstall: %s", out)
	}
}

// TestTypeScriptPackageBuildsAndPacks: clients/typescript builds from its
// own package.json (newcomer #5: its build called ../../tools/js's tsc)
// and `npm pack` gives a tarball that another project installs and
// imports. Its devDependencies are the versions tools/js pins, so the test
// builds with those (linked, not downloaded); the committed package-lock
// names the same versions, so `npm install` there leaves nothing untracked.
func TestTypeScriptPackageBuildsAndPacks(t *testing.T) {
	node := needNode(t)
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatal("npm is not on PATH; install it with `apt-get install -y npm`, or run `make test`")
	}
	var pkg struct {
		Name            string            `json:"name"`
		Version         string            `json:"version"`
		DevDependencies map[string]string `json:"devDependencies"`
		Scripts         map[string]string `json:"scripts"`
	}
	readJSON(t, "typescript/package.json", &pkg)
	var lock struct {
		Packages map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	readJSON(t, "typescript/package-lock.json", &lock)
	var tools struct {
		Packages map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	readJSON(t, "../tools/js/package-lock.json", &tools)
	for dep, want := range pkg.DevDependencies {
		if got := lock.Packages["node_modules/"+dep].Version; got != want {
			t.Errorf("package-lock.json has %s %s, package.json %s", dep, got, want)
		}
		if got := tools.Packages["node_modules/"+dep].Version; got != want {
			t.Errorf("tools/js pins %s %s, clients/typescript %s: keep them one version", dep, got, want)
		}
	}
	if strings.Contains(pkg.Scripts["build"], "tools/js") {
		t.Errorf("the build script reaches outside the package: %q", pkg.Scripts["build"])
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(dir, name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s (in %s): %v\n%s", name, strings.Join(args, " "), dir, err, out)
		}
		return string(out)
	}
	// A copy of the package as a user has it, its devDependencies in place.
	// What git tracks of it: not a node_modules or dist/ of a build here.
	src := filepath.Join(t.TempDir(), "lockd-client")
	for _, dir := range []string{"src", "scripts"} {
		if err := os.CopyFS(filepath.Join(src, dir), os.DirFS(filepath.Join("typescript", dir))); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"package.json", "package-lock.json", "tsconfig.json", "README.md"} {
		b, err := os.ReadFile(filepath.Join("typescript", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mods, err := filepath.Abs("../tools/js/node_modules")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(mods, filepath.Join(src, "node_modules")); err != nil {
		t.Fatal(err)
	}
	out := run(src, npm, "pack", "--silent") // prepack builds dist/
	tarball := filepath.Join(src, strings.TrimSpace(lastLine(out)))
	if filepath.Base(tarball) != pkg.Name+"-"+pkg.Version+".tgz" {
		t.Fatalf("npm pack made %q", out)
	}

	// Another project installs the tarball, with no registry, and uses it.
	app := t.TempDir()
	if err := os.WriteFile(filepath.Join(app, "package.json"), []byte(`{"name":"app","private":true,"type":"module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	run(app, npm, "install", "--offline", tarball)
	got := run(app, node, "-e", `import("lockd-client").then(m => console.log(typeof m.Client, typeof m.LockHeld))`)
	if strings.TrimSpace(got) != "function function" {
		t.Fatalf("import of the installed package: %q", got)
	}
	if _, err := os.Stat(filepath.Join(app, "node_modules", "lockd-client", "dist", "index.d.ts")); err != nil {
		t.Errorf("the installed package has no types: %v", err)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
