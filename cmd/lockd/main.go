// Command lockd is a distributed lock and lease server over HTTP, on Redis,
// and the command-line client for it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// Exit codes, the contract that scripts rely on.
const (
	exitOK          = 0
	exitHeld        = 1 // not granted: held, queued behind earlier waiters, no permit (after the wait)
	exitUsage       = 2
	exitLeaseLost   = 3 // token not the live one, or not found on renew/release
	exitUnreachable = 4 // server unreachable or 5xx
	exitAuth        = 5 // unauthorized or forbidden
)

// exitError carries an exit code; its message (if any) goes to stderr.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(stderr, "lockd:", ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "lockd:", err)
	return 1
}

func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, msg: fmt.Sprintf(format, args...)}
}

const usage = `lockd — distributed locks and leases over HTTP, on Redis.

Server:
  lockd serve [flags]           run the server (lockd serve -h for flags)
  lockd healthcheck [--url U]   exit 0 when the server's /healthz answers 200 (for containers)
  lockd --version               print the version, commit and Go version

Client (--server URL, default http://127.0.0.1:8080; --api-key K; or LOCKD_SERVER,
LOCKD_API_KEY; these and --json may also come before the command: lockd --server URL ls):
  lockd run     [--shared] [--ttl 30s] [--wait 60s] [--owner NAME] [--min-hold D] [--grace 10s] KEY -- COMMAND [ARGS...]
                                hold KEY while COMMAND runs; exit with its status
                                (--min-hold 50s: keep KEY that long even if COMMAND ends sooner)
  lockd run     --semaphore NAME --limit N [flags] -- COMMAND [ARGS...]
                                hold a permit of semaphore NAME while COMMAND runs
  lockd acquire [--shared] [--ttl 30s] [--wait 0s] [--owner NAME] [--value JSON] [--lock-delay D] [--min-hold D] [--json] KEY
                                take KEY (--shared: with other shared holders);
                                print its token (alone) on stdout
  lockd renew   --token T [--ttl D] [--json] KEY
  lockd release --token T KEY
  lockd status  [--json] KEY    holders and queue
  lockd ls      [--prefix P] [--json]
  lockd history [--limit N] [--json] KEY
  lockd force-release [--fence N] [--reason TEXT] KEY
  lockd quarantine end --reason TEXT
                                end the restart quarantine after Redis lost its data (admin)
  lockd sem acquire|renew|release|status|list|history|force-release ...
                                the same for semaphores (lockd sem -h)
  lockd elect   [--owner NAME] [--ttl 30s] [--wait 0] [--value JSON] NAME -- COMMAND [ARGS...]
                                wait to lead election NAME, run COMMAND while leading,
                                resign when it exits; stop it (exit 3) if leadership is lost
  lockd leader  [--watch] [--json] NAME
                                who leads NAME, its value and term; --watch: every change
  lockd session create|renew|show|end ...
                                one keep-alive for many grants (lockd session -h);
                                acquire with --session ID to take a grant in one
  lockd mcp     [--owner NAME] [--ttl 30s]
                                an MCP server on stdin/stdout for an AI agent host:
                                tools to claim, release and list keys (docs/agents.md)

Every flag also reads LOCKD_<FLAG> (LOCKD_TOKEN, LOCKD_TTL, ...).
Exit codes: 0 ok, 1 held (or no permit free) after the wait, 2 usage (also a
semaphore held with another --limit), 3 lease lost (or no live lease or session), 4 server
unreachable or 5xx, 5 unauthorized or forbidden; lockd run exits with COMMAND's
status otherwise.

Run "lockd COMMAND -h" for a command's flags.`

// run is the whole program: main only wires it to the process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) < 2 {
		fmt.Fprintln(stderr, usage)
		return &exitError{code: exitUsage}
	}
	global, args, err := leadingFlags(args[1:])
	if err != nil {
		return err
	}
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return usageError("a command must follow %s", strings.Join(global, " "))
	}
	cmd, rest := args[0], args[1:]
	if len(global) > 0 {
		if _, ok := clientCommands[cmd]; !ok {
			return usageError("%s is a client flag: it goes with a client command (lockd %s history KEY), not %q", global[0], strings.Join(global, " "), cmd)
		}
		rest = withFlags(cmd, rest, global)
	}
	switch cmd {
	case "serve":
		return serve(ctx, rest, getenv, stdout, stderr)
	case "healthcheck":
		return healthcheck(ctx, rest, getenv, stderr)
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return nil
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, versionString())
		return nil
	}
	if c, ok := clientCommands[cmd]; ok {
		return c(ctx, rest, getenv, stdout, stderr)
	}
	fmt.Fprintln(stderr, usage)
	return usageError("unknown command %q", cmd)
}

// globalFlags are the client flags that may come before the command, as
// with etcdctl --endpoints=… lock (lockd --server URL history KEY); true
// when the flag takes a value. The command is handed them, and its own
// flag set checks them as if written after it.
var globalFlags = map[string]bool{"server": true, "api-key": true, "json": false}

// leadingFlags splits the global flags written before the command from
// the command and what follows it.
func leadingFlags(args []string) (global, rest []string, err error) {
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && len(args[0]) > 1 {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		takesValue, ok := globalFlags[name]
		if !ok {
			// -h, --help and --version are commands of their own.
			if len(global) == 0 {
				return nil, args, nil
			}
			return nil, nil, usageError("unknown flag %s before the command: only --server, --api-key and --json may come first", args[0])
		}
		n := 1
		if takesValue && !hasValue {
			if len(args) < 2 {
				return nil, nil, usageError("%s wants a value", args[0])
			}
			n = 2
		}
		global, args = append(global, args[:n]...), args[n:]
	}
	return global, args, nil
}

// withSubcommands are the commands whose first argument is a subcommand
// (lockd sem acquire …): their flags come after it.
var withSubcommands = map[string]bool{"sem": true, "session": true, "quarantine": true}

// withFlags puts the global flags where cmd's own flags go: after the
// subcommand of a command that has them, else first.
func withFlags(cmd string, rest, global []string) []string {
	out := make([]string, 0, len(rest)+len(global))
	if withSubcommands[cmd] && len(rest) > 0 {
		out = append(out, rest[0])
		rest = rest[1:]
	}
	return append(append(out, global...), rest...)
}

// clientCommand is a subcommand that talks to a lockd server.
type clientCommand func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

// clientCommands are the client subcommands, by name.
var clientCommands = map[string]clientCommand{
	"run":           runCmd,
	"acquire":       acquireCmd,
	"renew":         renewCmd,
	"release":       releaseCmd,
	"status":        statusCmd,
	"ls":            lsCmd,
	"history":       historyCmd,
	"force-release": forceReleaseCmd,
	"sem":           semCmd,
	"elect":         electCmd,
	"leader":        leaderCmd,
	"session":       sessionCmd,
	"quarantine":    quarantineCmd,
	"mcp":           mcpCmd,
}
