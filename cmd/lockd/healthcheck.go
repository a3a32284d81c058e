package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

// healthcheck asks a lockd server whether it is alive: the container
// image's HEALTHCHECK, which cannot rely on curl in a distroless image.
func healthcheck(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := flag.NewFlagSet("lockd healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := envDefaults{getenv: getenv}
	url := fs.String("url", env.str("healthcheck-url", "http://127.0.0.1:8080/healthz"), "URL that must answer 200")
	if err := fs.Parse(args); err != nil {
		return &exitError{code: exitUsage}
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return usageError("--url: %v", err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return &exitError{code: exitUnreachable, msg: fmt.Sprintf("healthcheck: %v", err)}
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return &exitError{code: exitUnreachable, msg: fmt.Sprintf("healthcheck: %s answered %d", *url, res.StatusCode)}
	}
	return nil
}
