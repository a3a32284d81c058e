package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version and commit are stamped by `make build` and the Dockerfile
// (-ldflags "-X main.version=… -X main.commit=…", from git describe and
// git rev-parse): a -trimpath build from a checkout otherwise records only
// "(devel)", and an image build, which sees no .git, no commit at all.
// Empty, the Go toolchain's build information says what it can.
var version, commit string

// versionString says which lockd this is: the stamped version and commit,
// else the build information the Go toolchain records: the module version
// (a release tag with `go install …@v1.2.3`, a pseudo-version or "(devel)"
// from a checkout) and, when the build saw the Git checkout, the commit.
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

// buildVersion is the version and the short commit (with "+dirty" for a
// modified checkout; "" when the build saw no Git checkout): the stamped
// ones when given, else the module's from the build information.
func buildVersion() (string, string) {
	v, rev := moduleVersion()
	if version != "" {
		v = version
	}
	if commit != "" {
		rev = commit
	}
	return v, rev
}

// moduleVersion is the module version and the short commit that the Go
// toolchain recorded.
func moduleVersion() (version, revision string) {
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
