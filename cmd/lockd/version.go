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
	v, rev := buildVersion()
	out := "lockd " + v
	if rev != "" {
		out += " commit " + rev
	}
	return fmt.Sprintf("%s %s %s/%s", out, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// serviceVersion is the service.version of lockd's spans: the module
// version, with the commit when the build recorded one
// ("(devel)+0123456789ab+dirty").
func serviceVersion() string {
	v, rev := buildVersion()
	if rev != "" {
		v += "+" + rev
	}
	return v
}

// buildVersion is the module version and the short commit (with "+dirty"
// for a modified checkout; "" when the build saw no Git checkout).
func buildVersion() (version, revision string) {
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
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if dirty {
			rev += "+dirty"
		}
	}
	return v, rev
}
