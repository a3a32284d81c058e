package clients

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// clientFloors are each client's modules, floor by floor from the bottom:
// a module imports only modules of the floors below its own, so that no
// two modules depend on each other, directly or around a circle. A type
// named from a higher module counts too (TypeScript's import type,
// Python's imports under TYPE_CHECKING): a lease names its session by the
// interface it declares (LeaseSession), which Session implements.
var clientFloors = []struct {
	dir    string
	ext    string
	floors [][]string
	// imports finds the modules of the same package that a source imports.
	imports *regexp.Regexp
}{
	{
		dir: "python/lockd", ext: ".py",
		floors: [][]string{
			{"errors"},
			{"_http"},
			{"_keepalive", "observe"},
			{"lease", "lockset"},
			{"session"},
			{"client"},
			{"__init__"},
		},
		// from .x import …, from lockd.x import …, import lockd.x
		imports: regexp.MustCompile(`(?m)^\s*(?:from\s+(?:\.|lockd\.)(\w+)\s+import|import\s+lockd\.(\w+))`),
	},
	{
		dir: "typescript/src", ext: ".ts",
		floors: [][]string{
			{"api"},
			{"types"},
			{"errors"},
			{"http"},
			{"renewer", "observe"},
			{"lease", "lockset"},
			{"session"},
			{"client"},
			{"index"},
		},
		// import …, import type …, export … from "./x.js", and import("./x.js")
		imports: regexp.MustCompile(`(?:from\s+|import\s*\(\s*|import\s+)"\./([\w-]+)\.js"`),
	},
}

// TestClientLayers fails when a module of the Python or the TypeScript
// client imports one of its own floor or above (issue 30: lease and
// session called each other's privates, and both called their client's),
// or when a module is on no floor.
func TestClientLayers(t *testing.T) {
	for _, c := range clientFloors {
		t.Run(c.dir, func(t *testing.T) {
			floor := map[string]int{}
			for i, mods := range c.floors {
				for _, m := range mods {
					floor[m] = i
				}
			}
			files, err := filepath.Glob(filepath.Join(c.dir, "*"+c.ext))
			if err != nil || len(files) == 0 {
				t.Fatalf("no %s files in %s: %v", c.ext, c.dir, err)
			}
			var seen []string
			for _, f := range files {
				mod := strings.TrimSuffix(filepath.Base(f), c.ext)
				seen = append(seen, mod)
				own, ok := floor[mod]
				if !ok {
					t.Errorf("%s is on no floor of clientFloors: put it above what it imports and below what imports it", f)
					continue
				}
				src, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range c.imports.FindAllStringSubmatch(string(src), -1) {
					dep := m[1]
					if len(m) > 2 && dep == "" {
						dep = m[2]
					}
					at, ok := floor[dep]
					if !ok {
						t.Errorf("%s imports %s, which is on no floor", f, dep)
					} else if at >= own {
						t.Errorf("%s (floor %d) imports %s (floor %d): a module imports only from the floors below its own", f, own, dep, at)
					}
				}
			}
			for m := range floor {
				if !slices.Contains(seen, m) {
					t.Errorf("clientFloors lists %s, which %s has no longer", m, c.dir)
				}
			}
		})
	}
}
