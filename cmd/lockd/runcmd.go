package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/client"
)

// exitNoCommand is the shell's code for a command that could not be run.
const exitNoCommand = 127

// runCmd is `lockd run`: the flock(1) of lockd. It holds KEY (or, with
// --semaphore, a permit of that semaphore) while COMMAND runs, renewing
// every ttl/3, and exits with COMMAND's status.
//
// COMMAND runs in its own process group, so that a lost lease stops all of
// it (a shell script and what it started), not just its first process.
// While it runs, SIGINT, SIGTERM and SIGHUP sent to lockd run are passed on
// to that group and lockd run waits for COMMAND to end; ctx is not watched
// then, since main cancels it on the same signals.
func runCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, err := parseRun(args, getenv, stderr)
	if err != nil {
		return err
	}
	return runUnder(ctx, o, stdout, stderr)
}

// runUnder takes what o names (a lock, a permit or, for lockd elect, a
// leadership), runs COMMAND while it is held and gives it back.
func runUnder(ctx context.Context, o runOptions, stdout, stderr io.Writer) error {
	c, err := o.cf.client(client.WithRetry(o.retry))
	if err != nil {
		return err
	}
	h, err := o.acquire(ctx, c, stderr)
	if err != nil {
		if errors.Is(err, client.ErrHeld) || errors.Is(err, client.ErrQueued) || errors.Is(err, client.ErrNoPermits) ||
			errors.Is(err, client.ErrMinHold) {
			return &exitError{code: exitHeld, msg: fmt.Sprintf("%v (waited %v)", err, o.wait)}
		}
		return failed(err)
	}
	release := func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return h.release(rctx)
	}
	status, lostErr, err := o.supervise(ctx, h, stdout, stderr)
	if err != nil {
		_ = release()
		return err
	}
	command := o.argv[0]
	if lostErr != nil {
		return &exitError{code: exitLeaseLost, msg: fmt.Sprintf("%s stopped (status %d): %s was lost", command, status, h.what)}
	}
	if err := release(); err != nil {
		if errors.Is(err, client.ErrLeaseLost) {
			// Lost between the last renew and now: COMMAND's end may have
			// run unprotected, which the caller must hear about.
			return &exitError{code: exitLeaseLost, msg: fmt.Sprintf("%s exited (status %d) but %s was already lost: %s", command, status, h.what, trimLockd(err))}
		}
		fmt.Fprintf(stderr, "lockd: release %s: %s; it will expire within %v\n", h.what, trimLockd(err), h.ttl())
	}
	if status != 0 {
		return &exitError{code: status}
	}
	return nil
}

// runOptions is what `lockd run` was asked to do.
type runOptions struct {
	cf *clientFlags
	// key is the lock key, or with sem the semaphore's name.
	key string
	// keys are the keys of a lock set (--key, with KEY if given): 2 or
	// more, held all or nothing; key is the first of them.
	keys  []string
	sem   bool
	limit int
	// argv is COMMAND and its arguments.
	argv                    []string
	ttl, wait, grace, retry time.Duration
	owner                   string
	shared                  bool
	// elect campaigns for the election key (lockd elect); value is the
	// leader's value (JSON) then.
	elect bool
	value string
	// onRequest is the signal COMMAND's process group gets when somebody
	// asks the holder to step aside (0: none; --on-request).
	onRequest syscall.Signal
	// minHold is the lease's hold window (--min-hold): COMMAND runs at
	// most once in it, however soon it ends.
	minHold time.Duration
}

// minHoldUsage describes --min-hold, of lockd run and lockd acquire.
const minHoldUsage = "hold window (exclusive locks only, at most --ttl; ShedLock's lockAtLeastFor): a release earlier than this " +
	"after the grant keeps the key taken until the window ends, so that a job many nodes start at once runs once per window (0: none)"

// parseRun reads `lockd run`'s flags and arguments; a usage error (or
// --help) is an *exitError.
func parseRun(args []string, getenv func(string) string, stderr io.Writer) (runOptions, error) {
	cf := newClientFlags("run", "[--shared] [--ttl 30s] [--wait 60s] [--owner NAME] [--min-hold D] [--grace 10s] [--retry 30s] [--on-request SIGNAL] KEY -- COMMAND [ARGS...]\n"+
		"       lockd run --key KEY --key KEY [--key KEY...] [--shared] [--ttl 30s] [--wait 60s] [--owner NAME] [--grace 10s] [--retry 30s] -- COMMAND [ARGS...]\n"+
		"       lockd run --semaphore NAME --limit N [--ttl 30s] [--wait 60s] [--owner NAME] [--grace 10s] [--retry 30s] -- COMMAND [ARGS...]", getenv, stderr)
	o := runOptions{cf: cf}
	cf.fs.DurationVar(&o.ttl, "ttl", cf.env.dur("ttl", 30*time.Second), "lease TTL; renewed every ttl/3 while COMMAND runs")
	cf.fs.DurationVar(&o.wait, "wait", cf.env.dur("wait", 60*time.Second), "how long to wait while the key is held or no permit is free (then exit 1)")
	cf.fs.StringVar(&o.owner, "owner", cf.env.str("owner", ""), "holder's label (default: the server's name for the caller)")
	cf.fs.DurationVar(&o.grace, "grace", cf.env.dur("grace", 10*time.Second), "after a lost lease, how long COMMAND has between SIGTERM and SIGKILL")
	cf.fs.DurationVar(&o.retry, "retry", cf.env.dur("retry", 30*time.Second), "how long to keep retrying the acquire while the server answers 503 or cannot be reached")
	cf.fs.DurationVar(&o.minHold, "min-hold", cf.env.dur("min-hold", 0), minHoldUsage)
	cf.fs.BoolVar(&o.shared, "shared", cf.env.bool("shared", false), "hold KEY together with other shared holders (a read lock); default exclusive")
	semaphore := cf.fs.String("semaphore", cf.env.str("semaphore", ""), "hold a permit of this semaphore instead of a lock (then no KEY); needs --limit")
	cf.fs.IntVar(&o.limit, "limit", cf.env.int("limit", 0), "with --semaphore: the most permits held at once, 1-10000 (every holder must use the same)")
	var setKeys keyList
	cf.fs.Var(&setKeys, "key", "a key of a lock set, repeatable: every --key (and KEY, if given) is held all or nothing with one token (exclusively, or with --shared shared)")
	onRequest := cf.fs.String("on-request", cf.env.str("on_request", ""), "send COMMAND's process group this signal (TERM, INT, HUP, USR1, USR2 or a number) when somebody asks the holder to step aside (lockd request-release); the lease stays held until COMMAND ends")
	if err := parseFlags(cf.fs, args); err != nil {
		return o, err
	}
	if *onRequest != "" {
		sig, ok := signalNamed(*onRequest)
		if !ok {
			return o, usageError("--on-request %q: want a signal such as TERM, INT, HUP, USR1, USR2 or its number", *onRequest)
		}
		o.onRequest = sig
	}
	if cf.env.err != nil {
		return o, usageError("%v", cf.env.err)
	}
	o.sem = *semaphore != ""
	rest := cf.fs.Args()
	if o.sem {
		// The flag package has taken a "--" that came right after the
		// flags; one further on means that a KEY was given too.
		if len(rest) > 1 && rest[1] == "--" {
			cf.fs.Usage()
			return o, usageError("run --semaphore %s takes no KEY (got %q): the semaphore is the flag's value", *semaphore, rest[0])
		}
		o.key, o.argv = *semaphore, rest
		if len(o.argv) == 0 {
			cf.fs.Usage()
			return o, usageError("run --semaphore NAME wants -- COMMAND [ARGS...]")
		}
		switch {
		case o.shared:
			return o, usageError("--shared is for locks: a semaphore's permits have no mode")
		case o.limit == 0:
			return o, usageError("run --semaphore needs --limit N (or LOCKD_LIMIT): the most permits held at once")
		}
	} else if len(setKeys) > 0 {
		if len(rest) > 1 && rest[1] == "--" {
			setKeys, rest = append(setKeys, rest[0]), rest[2:]
		}
		if len(setKeys) < 2 || len(rest) == 0 {
			cf.fs.Usage()
			return o, usageError("run --key KEY --key KEY… wants two or more keys and -- COMMAND [ARGS...]")
		}
		o.key, o.keys, o.argv = setKeys[0], setKeys, rest
		if o.limit != 0 || *onRequest != "" || o.minHold != 0 {
			return o, usageError("a lock set (--key) takes no --limit, --min-hold or --on-request")
		}
	} else {
		if len(rest) > 1 && rest[1] == "--" {
			rest = append(rest[:1:1], rest[2:]...)
		}
		if len(rest) < 2 {
			cf.fs.Usage()
			return o, usageError("run wants KEY -- COMMAND [ARGS...]")
		}
		o.key, o.argv = rest[0], rest[1:]
		if o.limit != 0 {
			return o, usageError("--limit is for --semaphore NAME")
		}
	}
	if o.grace < 0 {
		return o, usageError("--grace must not be negative")
	}
	if o.minHold != 0 && (o.sem || o.shared) {
		return o, usageError("--min-hold is for an exclusive lock: shared holders and permits have no hold window")
	}
	if o.minHold < 0 || o.minHold > o.ttl {
		return o, usageError("--min-hold must be between 0 and --ttl (%v), got %v", o.ttl, o.minHold)
	}
	if o.onRequest != 0 && (o.sem || o.shared) {
		return o, usageError("--on-request is for an exclusive lock: shared holders and permits are not asked to step aside")
	}
	return o, nil
}

// keyList is a repeatable flag's values.
type keyList []string

func (k *keyList) String() string { return strings.Join(*k, " ") }

// Get is the values, as flag.Getter has it.
func (k *keyList) Get() any { return []string(*k) }

func (k *keyList) Set(v string) error {
	*k = append(*k, v)
	return nil
}

// signalNamed reads a signal's name (TERM or SIGTERM, any case) or number.
func signalNamed(s string) (syscall.Signal, bool) {
	if n, err := strconv.Atoi(s); err == nil {
		return syscall.Signal(n), n > 0 && n < 65
	}
	sig, ok := map[string]syscall.Signal{
		"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "TERM": syscall.SIGTERM,
		"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "ALRM": syscall.SIGALRM, "WINCH": syscall.SIGWINCH,
	}[strings.TrimPrefix(strings.ToUpper(s), "SIG")]
	return sig, ok
}

// runHold is the lease `lockd run` holds (or its lock set), what it is
// called in messages, and how to read its key's history.
type runHold struct {
	lease   *client.Lease
	set     *client.LockSet
	what    string
	history func(ctx context.Context, key string, limit int) (api.History, error)
}

func (h runHold) release(ctx context.Context) error {
	if h.set != nil {
		return h.set.Release(ctx)
	}
	return h.lease.Release(ctx)
}

func (h runHold) ttl() time.Duration {
	if h.set != nil {
		return h.set.TTL()
	}
	return h.lease.TTL()
}

func (h runHold) lost() <-chan struct{} {
	if h.set != nil {
		return h.set.Lost()
	}
	return h.lease.Lost()
}

func (h runHold) err() error {
	if h.set != nil {
		return h.set.Err()
	}
	return h.lease.Err()
}

// fence is the fence of key (the lease's own for one key).
func (h runHold) fence(key string) int64 {
	if h.set != nil {
		return h.set.Fence(key)
	}
	return h.lease.Fence()
}

// env is what COMMAND learns of the hold: LOCKD_KEY and LOCKD_FENCE (the
// first key's, for a set), and for a set LOCKD_KEYS and LOCKD_FENCES,
// space-separated in the order given.
func (h runHold) env(key string) []string {
	env := []string{"LOCKD_KEY=" + key, "LOCKD_FENCE=" + strconv.FormatInt(h.fence(key), 10)}
	if h.set != nil {
		var keys, fences []string
		for _, l := range h.set.Leases() {
			keys, fences = append(keys, l.Key), append(fences, strconv.FormatInt(l.Fence, 10))
		}
		env = append(env, "LOCKD_KEYS="+strings.Join(keys, " "), "LOCKD_FENCES="+strings.Join(fences, " "))
	}
	return env
}

// acquire takes the lock, the semaphore's permit or the leadership. A lock
// or permit that is taken is tried once first, so that a person sees why
// nothing happens yet: "lockd: waiting for KEY (held by X, 19s left)…" on
// stderr, as consul lock says, and then the wait begins. (An election's
// --wait 0 means as long as it takes: it has no try-once to start with.)
func (o runOptions) acquire(ctx context.Context, c *client.Client, stderr io.Writer) (runHold, error) {
	opts := client.AcquireOptions{Owner: o.owner, TTL: o.ttl, Wait: o.wait, MinHold: o.minHold}
	if !o.elect && o.wait > 0 {
		once := opts
		once.Wait = 0
		h, err := o.take(ctx, c, once)
		line := waitingLine(refusedKey(o.key, err), err)
		if line == "" {
			return h, err
		}
		fmt.Fprintln(stderr, line)
	}
	return o.take(ctx, c, opts)
}

// refusedKey is the key a refusal names (a lock set's: the first key
// not free), or key.
func refusedKey(key string, err error) string {
	var held *client.HeldError
	var queued *client.QueuedError
	switch {
	case errors.As(err, &held) && held.Key != "":
		return held.Key
	case errors.As(err, &queued) && queued.Key != "":
		return queued.Key
	}
	return key
}

// waitingLine says what a refused first try is waiting for, or "" when err
// is no such refusal (a grant, or a failure of another kind).
func waitingLine(key string, err error) string {
	var held *client.HeldError
	var queued *client.QueuedError
	var full *client.NoPermitsError
	var window *client.APIError
	switch {
	case errors.Is(err, client.ErrMinHold) && errors.As(err, &window):
		return fmt.Sprintf("lockd: waiting for %s (released inside its hold window, which ends in %v)…", key, window.RetryAfter)
	case errors.As(err, &held):
		return fmt.Sprintf("lockd: waiting for %s (held by %s, %v left)…", key, held.Holder, held.Remaining.Round(time.Second))
	case errors.As(err, &queued):
		return fmt.Sprintf("lockd: waiting for %s (free, but %d earlier waiter(s) first; next is %s)…", key, queued.Waiters, queued.Next)
	case errors.As(err, &full):
		return fmt.Sprintf("lockd: waiting for a permit of %s (all held; the first ends in %v, %s)…", key, full.Remaining.Round(time.Second), full.Holder)
	}
	return ""
}

// take asks for what o names with opts.
func (o runOptions) take(ctx context.Context, c *client.Client, opts client.AcquireOptions) (runHold, error) {
	if o.elect {
		if o.value != "" {
			opts.Value = json.RawMessage(o.value)
		}
		l, err := c.Campaign(ctx, o.key, opts)
		return runHold{lease: l, what: "the leadership of " + o.key, history: c.ElectionHistory}, err
	}
	if o.sem {
		s := c.Semaphore(o.key, o.limit)
		l, err := s.Acquire(ctx, opts)
		return runHold{lease: l, what: "the permit of semaphore " + o.key,
			history: func(ctx context.Context, _ string, limit int) (api.History, error) { return s.History(ctx, limit) }}, err
	}
	if o.shared {
		opts.Mode = client.Shared
	}
	if len(o.keys) > 0 {
		set, err := c.LockMany(ctx, o.keys, opts)
		return runHold{set: set, what: "the lock set " + strings.Join(o.keys, ", "), history: c.History}, err
	}
	l, err := c.Acquire(ctx, o.key, opts)
	return runHold{lease: l, what: "the lease on " + o.key, history: c.History}, err
}

// supervise runs COMMAND under the lease h and waits for it to end,
// passing signals on to its process group. When the lease is lost it
// stops the group: SIGTERM, then SIGKILL after the grace period, and then
// whatever is left of the group. It returns COMMAND's exit status and
// the lease's loss, if any; err is COMMAND not starting (an *exitError).
func (o runOptions) supervise(ctx context.Context, h runHold, stdout, stderr io.Writer) (status int, lostErr, err error) {
	// Listen before starting COMMAND so that no signal falls in between.
	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigc)

	cmd := exec.Command(o.argv[0], o.argv[1:]...)
	cmd.Env = append(childEnv(os.Environ()), h.env(o.key)...)
	if o.elect {
		cmd.Env = append(cmd.Env, "LOCKD_TERM="+strconv.FormatInt(h.fence(o.key), 10))
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// If COMMAND leaves children holding its output open, do not wait for
	// them forever once COMMAND itself has exited.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return 0, nil, &exitError{code: exitNoCommand, msg: fmt.Sprintf("run: %v", err)}
	}
	pgid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()

	lost := h.lost()
	var asked <-chan struct{}
	if o.onRequest != 0 {
		asked = h.lease.ReleaseRequested()
	}
	var kill <-chan time.Time
	for {
		select {
		case sig := <-sigc:
			_ = syscall.Kill(-pgid, sig.(syscall.Signal))
			continue
		case <-asked:
			// Once: COMMAND decides, and lockd run releases when it ends.
			asked = nil
			rq, _ := h.lease.ReleaseRequest()
			fmt.Fprintf(stderr, "lockd: %s asks for %s (%q); sending %s %v\n", rq.By, o.key, rq.Reason, o.argv[0], o.onRequest)
			_ = syscall.Kill(-pgid, o.onRequest)
			continue
		case <-lost:
			lostErr = h.err()
			lost = nil
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			kill = time.After(o.grace)
			fmt.Fprintf(stderr, "lockd: %s%s\nlockd: stopping %s: SIGTERM now, SIGKILL in %v\n",
				trimLockd(lostErr), why(ctx, h.history, o.key, h.fence(o.key)), o.argv[0], o.grace)
			continue
		case <-kill:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			continue
		case <-exited:
		}
		break
	}
	if lostErr != nil {
		// Whatever is left in the group must not outlive the lease either.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	return exitStatus(cmd.ProcessState), lostErr, nil
}

// why looks in the key's history for what ended the lease with fence, to
// tell the user more than "no live lease" (who broke it, and why).
func why(ctx context.Context, history func(context.Context, string, int) (api.History, error), key string, fence int64) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	h, err := history(ctx, key, 20)
	if err != nil {
		return ""
	}
	for _, e := range h.Events {
		if e.Fence != fence {
			continue
		}
		switch e.Type {
		case api.ForceReleased:
			msg := fmt.Sprintf(" (force-released by %s at %s", e.Actor, clock(e.At))
			if e.Reason != "" {
				msg += ": " + strconv.Quote(e.Reason)
			}
			return msg + ")"
		case api.Expired:
			return fmt.Sprintf(" (expired at %s)", clock(e.At))
		}
		return ""
	}
	return ""
}

// exitStatus is COMMAND's exit code, or 128+N when signal N killed it, as
// a shell reports it.
func exitStatus(ps *os.ProcessState) int {
	if ps == nil {
		return exitNoCommand
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func trimLockd(err error) string {
	return strings.TrimPrefix(err.Error(), "lockd: ")
}

// secretEnv are the variables that lockd run reads and COMMAND must not
// inherit: COMMAND (a build script, a third-party tool) has no use for
// lockd's credential, which may be an admin key, nor for a lease token.
var secretEnv = []string{"LOCKD_API_KEY", "LOCKD_TOKEN"}

// childEnv is env without secretEnv.
func childEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(secretEnv, name) {
			out = append(out, kv)
		}
	}
	return out
}
