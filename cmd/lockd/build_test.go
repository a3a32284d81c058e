package main

import (
	"os"
	"strings"
	"testing"
)

// CI builds the binary with `make build`; the image must build it the same
// way, so that CI exercises the Dockerfile's build step.
func TestDockerfileBuildsLikeCI(t *testing.T) {
	const build = "CGO_ENABLED=0 go build -trimpath -ldflags '-s -w'"
	for _, f := range []string{"../../Dockerfile", "../../Makefile"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), build) {
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
