package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/lockd/lockd/client"
)

// clientFlags are the flags every client subcommand takes. Each flag's
// default comes from LOCKD_<FLAG>, like lockd serve's.
type clientFlags struct {
	fs     *flag.FlagSet
	env    envDefaults
	name   string
	server string
	apiKey string
	json   bool
}

func newClientFlags(name, synopsis string, getenv func(string) string, stderr io.Writer) *clientFlags {
	cf := &clientFlags{env: envDefaults{getenv: getenv}, name: name}
	cf.fs = flag.NewFlagSet("lockd "+name, flag.ContinueOnError)
	cf.fs.SetOutput(stderr)
	cf.fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: lockd %s %s\n\nFlags (each also read from LOCKD_<FLAG>):\n", name, synopsis)
		cf.fs.PrintDefaults()
	}
	cf.fs.StringVar(&cf.server, "server", cf.env.str("server", "http://127.0.0.1:8080"), "lockd server URL")
	cf.fs.StringVar(&cf.apiKey, "api-key", cf.env.str("api-key", ""), "API key, sent as a Bearer token (prefer LOCKD_API_KEY: flags show in ps)")
	return cf
}

// jsonFlag adds --json.
func (cf *clientFlags) jsonFlag() {
	cf.fs.BoolVar(&cf.json, "json", cf.env.bool("json", false), "print the API's JSON answer")
}

// parse reads flags placed before, between or after the positional
// arguments, and wants exactly the named positional arguments.
func (cf *clientFlags) parse(args []string, names ...string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(cf.fs, args); err != nil {
			return nil, err
		}
		args = cf.fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if cf.env.err != nil {
		return nil, usageError("%v", cf.env.err)
	}
	if len(pos) != len(names) {
		cf.fs.Usage()
		if len(names) == 0 {
			return nil, usageError("%s takes no arguments, got %q", cf.name, pos)
		}
		return nil, usageError("%s wants %s, got %q", cf.name, strings.Join(names, " "), pos)
	}
	return pos, nil
}

// client is a client of --server that tries each request once: scripts
// decide about retries from the exit code.
func (cf *clientFlags) client(opts ...client.Option) (*client.Client, error) {
	c, err := client.New(cf.server, append([]client.Option{client.WithAPIKey(cf.apiKey), client.WithRetry(0)}, opts...)...)
	if err != nil {
		return nil, usageError("--server: %v", err)
	}
	return c, nil
}

// printJSON writes v as the API's JSON, indented for people and jq alike.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// failed maps a client error to the exit codes of the contract.
func failed(err error) error {
	code := exitUnreachable
	switch {
	case errors.Is(err, client.ErrHeld), errors.Is(err, client.ErrQueued), errors.Is(err, client.ErrNoPermits), errors.Is(err, client.ErrTooManyHolders),
		errors.Is(err, client.ErrMinHold):
		code = exitHeld
	case errors.Is(err, client.ErrLeaseLost), errors.Is(err, client.ErrNotFound), errors.Is(err, client.ErrSessionNotFound):
		code = exitLeaseLost
	case errors.Is(err, client.ErrUnauthorized), errors.Is(err, client.ErrForbidden):
		code = exitAuth
	case errors.Is(err, client.ErrInvalid), errors.Is(err, client.ErrLimitMismatch), errors.Is(err, client.ErrModeMismatch), errors.Is(err, client.ErrUnsupported):
		// A semaphore held with another limit, or a server (Redlock)
		// without shared holds or semaphores: the command line must change.
		code = exitUsage
	case errors.Is(err, client.ErrUnavailable):
		code = exitUnreachable
	}
	// main prefixes "lockd:" already.
	return &exitError{code: code, msg: trimLockd(err)}
}

// ms formats milliseconds as a short duration.
func ms(n int64) string {
	return (time.Duration(n) * time.Millisecond).String()
}

func clock(t time.Time) string {
	return t.Local().Format("15:04:05.000")
}
