package main

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "version", "-version"} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), []string{"lockd", arg}, func(string) string { return "" }, &out, &errOut)
		if err != nil {
			t.Fatalf("lockd %s: %v %s", arg, err, errOut.String())
		}
		got := strings.TrimSpace(out.String())
		if !strings.HasPrefix(got, "lockd ") || !strings.Contains(got, runtime.Version()) || strings.Count(got, "\n") != 0 {
			t.Errorf("lockd %s printed %q, want one line with the version and %s", arg, got, runtime.Version())
		}
	}
}

// newcomer #9: the version and commit that `make build` and the Dockerfile
// stamp (-X main.version, -X main.commit) are what --version prints and
// what the spans carry as service.version.
func TestVersionStamped(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "v1.4.2-3-gabcdef1-dirty", "abcdef123456"
	if got := versionString(); !strings.HasPrefix(got, "lockd v1.4.2-3-gabcdef1-dirty commit abcdef123456 "+runtime.Version()) {
		t.Errorf("versionString() = %q", got)
	}
	if got := serviceVersion(); got != "v1.4.2-3-gabcdef1-dirty+abcdef123456" {
		t.Errorf("serviceVersion() = %q", got)
	}
}
