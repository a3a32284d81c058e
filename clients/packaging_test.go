package clients

import (
	"context"
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
