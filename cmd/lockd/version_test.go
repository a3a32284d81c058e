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
