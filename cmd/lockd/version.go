package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// versionString says which lockd this is, from the build information the
// Go toolchain records: the module version (a release tag with `go install
// …@v1.2.3`, a pseudo-version or "(devel)" from a checkout) and, when the
// build saw the Git checkout, the commit.
func versionString() string {
	v, rev, dirty := "(devel)", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	out := "lockd " + v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if dirty {
			rev += "+dirty"
		}
		out += " commit " + rev
	}
	return fmt.Sprintf("%s %s %s/%s", out, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
