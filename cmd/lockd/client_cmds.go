package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/client"
)

// noun is what a client subcommand acts on: a lock (lockd acquire …) or a
// semaphore (lockd sem acquire …). Both have the same subcommands, shapes
// and exit codes.
type noun struct {
	sem bool
}

var (
	lockNoun = noun{}
	semNoun  = noun{sem: true}
)

// name is the subcommand's name as typed after lockd ("acquire", "sem acquire").
func (n noun) name(sub string) string {
	if n.sem {
		return "sem " + sub
	}
	return sub
}

// arg is the positional argument's name in usage lines.
func (n noun) arg() string {
	if n.sem {
		return "NAME"
	}
	return "KEY"
}

// keyOps are the calls that act on one lock or semaphore.
type keyOps struct {
	key          string // the lock key or the semaphore's name
	renew        func(ctx context.Context, token, proof string, ttl time.Duration) (api.Lease, error)
	release      func(ctx context.Context, token, proof string) (api.ReleaseResult, error)
	forceRelease func(ctx context.Context, fence int64, reason string) (api.ForceReleaseResult, error)
	state        func(ctx context.Context) (api.LockState, error)
	history      func(ctx context.Context, limit int) (api.History, error)
	renewals     func(ctx context.Context, limit int) (api.History, error)
}

func (n noun) ops(c *client.Client, key string) keyOps {
	if n.sem {
		s := c.Semaphore(key, 0)
		return keyOps{
			key:   key,
			renew: s.RenewWithProof, release: s.ReleaseWithProof, forceRelease: s.ForceReleaseFence,
			state: s.State, history: s.History, renewals: s.Renewals,
		}
	}
	return keyOps{
		key: key,
		renew: func(ctx context.Context, token, proof string, ttl time.Duration) (api.Lease, error) {
			return c.RenewWithProof(ctx, key, token, proof, ttl)
		},
		release: func(ctx context.Context, token, proof string) (api.ReleaseResult, error) {
			return c.ReleaseWithProof(ctx, key, token, proof)
		},
		forceRelease: func(ctx context.Context, fence int64, reason string) (api.ForceReleaseResult, error) {
			return c.ForceReleaseFence(ctx, key, fence, reason)
		},
		state:    func(ctx context.Context) (api.LockState, error) { return c.State(ctx, key) },
		history:  func(ctx context.Context, limit int) (api.History, error) { return c.History(ctx, key, limit) },
		renewals: func(ctx context.Context, limit int) (api.History, error) { return c.Renewals(ctx, key, limit) },
	}
}

// keyCommand is the start of every command on one key but acquire: parse
// args (the key, as n names it), check the flags (check: nil, or a usage
// error) and connect. It answers the key's calls.
func (cf *clientFlags) keyCommand(args []string, n noun, check func() error) (keyOps, error) {
	pos, err := cf.parse(args, n.arg())
	if err != nil {
		return keyOps{}, err
	}
	if check != nil {
		if err := check(); err != nil {
			return keyOps{}, err
		}
	}
	c, err := cf.client()
	if err != nil {
		return keyOps{}, err
	}
	return n.ops(c, pos[0]), nil
}

// proofFlag is --proof (LOCKD_PROOF) of renew and release: the lease's
// latest proof, as `acquire --json` or `renew --json` printed it. Sent
// beside the token, it lets any lockd restore the lease should Redis
// have lost it.
func proofFlag(cf *clientFlags) *string {
	return cf.fs.String("proof", cf.env.str("proof", ""), "the lease's latest proof (the \"proof\" of acquire --json or renew --json; prefer LOCKD_PROOF: flags show in ps)")
}

// needToken is the check of a command that needs the lease's token.
func needToken(token *string, n noun, sub string) func() error {
	return func() error {
		if *token == "" {
			return usageError("%s needs --token (or LOCKD_TOKEN): the token that acquire printed", n.name(sub))
		}
		return nil
	}
}

// acquireCmd takes a lease and prints its token, so that a script can
// renew and release it: `tok=$(lockd acquire KEY)`.
func acquireCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return acquire(ctx, lockNoun, args, getenv, stdout, stderr)
}

func acquire(ctx context.Context, n noun, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	synopsis := "[--shared] [--ttl 30s | --session ID] [--wait 0s] [--owner NAME] [--value JSON] [--lock-delay D] [--min-hold D] [--idempotency-key K] [--json] KEY"
	if n.sem {
		synopsis = "--limit N [--ttl 30s | --session ID] [--wait 0s] [--owner NAME] [--value JSON] [--idempotency-key K] [--json] NAME"
	}
	cf := newClientFlags(n.name("acquire"), synopsis, getenv, stderr)
	cf.jsonFlag()
	ttl := cf.fs.Duration("ttl", cf.env.dur("ttl", 30*time.Second), "lease TTL")
	wait := cf.fs.Duration("wait", cf.env.dur("wait", 0), "how long to wait while the key is held (0: try once)")
	owner := cf.fs.String("owner", cf.env.str("owner", ""), "holder's label (default: the server's name for the caller)")
	idem := cf.fs.String("idempotency-key", cf.env.str("idempotency-key", ""), "a retry with the same value gets the same lease back (e.g. a delivery ID)")
	value := cf.fs.String("value", cf.env.str("value", ""), "a JSON value on the grant, shown in the state (e.g. where to reach the holder; never a secret)")
	session := cf.fs.String("session", cf.env.str("session", ""), "take the grant in this session (lockd session create): it lives as long as the session, and --ttl is not used")
	var shared *bool
	var limit *int
	var lockDelay, minHold *time.Duration
	if n.sem {
		limit = cf.fs.Int("limit", cf.env.int("limit", 0), "the most permits held at once, 1-10000 (required; every holder must use the same)")
	} else {
		shared = cf.fs.Bool("shared", cf.env.bool("shared", false), "hold the key together with other shared holders (a read lock); default exclusive")
		lockDelay = cf.fs.Duration("lock-delay", cf.env.dur("lock-delay", 0), "after this lease ends by expiry or force-release, nobody gets the key for this long (0: the server's default)")
		minHold = cf.fs.Duration("min-hold", cf.env.dur("min-hold", 0), minHoldUsage)
	}
	pos, err := cf.parse(args, n.arg())
	if err != nil {
		return err
	}
	if n.sem && *limit == 0 {
		cf.fs.Usage()
		return usageError("sem acquire needs --limit N (or LOCKD_LIMIT): the most permits held at once")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	if *value != "" && !json.Valid([]byte(*value)) {
		return usageError("--value must be JSON, e.g. '{\"addr\":\"10.0.0.7:8080\"}'")
	}
	opts := client.AcquireOptions{Owner: *owner, TTL: *ttl, Wait: *wait, IdempotencyKey: *idem, NoAutoRenew: true, SessionID: *session}
	if *value != "" {
		opts.Value = json.RawMessage(*value)
	}
	if lockDelay != nil {
		opts.LockDelay, opts.MinHold = *lockDelay, *minHold
	}
	var l *client.Lease
	if n.sem {
		l, err = c.Semaphore(pos[0], *limit).Acquire(ctx, opts)
	} else {
		if *shared {
			opts.Mode = client.Shared
		}
		l, err = c.Acquire(ctx, pos[0], opts)
	}
	if err != nil {
		return failed(err)
	}
	info := l.Info()
	if cf.json {
		return printJSON(stdout, info)
	}
	// The token alone on stdout, the rest for people on stderr.
	fmt.Fprintln(stdout, info.Token)
	var what string
	switch {
	case n.sem:
		what = fmt.Sprintf("a permit of %s (limit %d, ", info.Key, l.Limit())
	case l.Mode() == client.Shared:
		what = info.Key + " shared ("
	default:
		what = info.Key + " ("
	}
	fmt.Fprintf(stderr, "lockd: acquired %sowner %s, fence %d, ttl %s, expires %s)\n",
		what, info.Owner, info.Fence, ms(info.TtlMs), clock(info.ExpiresAt))
	return nil
}

func renewCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return renew(ctx, lockNoun, args, getenv, stdout, stderr)
}

func renew(ctx context.Context, n noun, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cf := newClientFlags(n.name("renew"), "--token T [--proof P] [--ttl D] [--json] "+n.arg(), getenv, stderr)
	cf.jsonFlag()
	ttl := cf.fs.Duration("ttl", cf.env.dur("ttl", 0), "new TTL from now (default: the lease's own)")
	token := cf.fs.String("token", cf.env.str("token", ""), "the lease's token (prefer LOCKD_TOKEN: flags show in ps)")
	proof := proofFlag(cf)
	ops, err := cf.keyCommand(args, n, needToken(token, n, "renew"))
	if err != nil {
		return err
	}
	l, err := ops.renew(ctx, *token, *proof, *ttl)
	if err != nil {
		return failed(err)
	}
	if cf.json {
		return printJSON(stdout, l)
	}
	fmt.Fprintf(stdout, "renewed %s (fence %d, ttl %s, expires %s)\n", l.Key, l.Fence, ms(l.TtlMs), clock(l.ExpiresAt))
	return nil
}

func releaseCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return release(ctx, lockNoun, args, getenv, stdout, stderr)
}

func release(ctx context.Context, n noun, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cf := newClientFlags(n.name("release"), "--token T [--proof P] [--json] "+n.arg(), getenv, stderr)
	cf.jsonFlag()
	token := cf.fs.String("token", cf.env.str("token", ""), "the lease's token (prefer LOCKD_TOKEN: flags show in ps)")
	proof := proofFlag(cf)
	ops, err := cf.keyCommand(args, n, needToken(token, n, "release"))
	if err != nil {
		return err
	}
	r, err := ops.release(ctx, *token, *proof)
	if errors.Is(err, client.ErrLeaseLost) {
		// The server's words are for a holder that renews ("stop the
		// protected work"); a release has nothing left to do.
		return &exitError{code: exitLeaseLost, msg: fmt.Sprintf("%s %s: nothing to release: the lease was already released or has expired, or the token is not its token", n.name("release"), ops.key)}
	}
	if err != nil {
		return failed(err)
	}
	if cf.json {
		return printJSON(stdout, r)
	}
	if r.Released {
		fmt.Fprintf(stdout, "released %s\n", r.Key)
	} else {
		fmt.Fprintf(stdout, "released one level of %s; still held, count %d\n", r.Key, r.Count)
	}
	return nil
}

func statusCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return status(ctx, lockNoun, args, getenv, stdout, stderr)
}

func status(ctx context.Context, n noun, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cf := newClientFlags(n.name("status"), "[--json] "+n.arg(), getenv, stderr)
	cf.jsonFlag()
	ops, err := cf.keyCommand(args, n, nil)
	if err != nil {
		return err
	}
	st, err := ops.state(ctx)
	if err != nil {
		// Exit 3 (not found) when the key is free.
		return failed(err)
	}
	if cf.json {
		return printJSON(stdout, st)
	}
	return printState(stdout, st)
}

func lsCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return list(ctx, lockNoun, "ls", args, getenv, stdout, stderr)
}

// list prints every live lock (lockd ls) or semaphore (lockd sem list).
func list(ctx context.Context, n noun, sub string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cf := newClientFlags(n.name(sub), "[--prefix P] [--json]", getenv, stderr)
	cf.jsonFlag()
	prefix := cf.fs.String("prefix", cf.env.str("prefix", ""), "only the "+map[bool]string{false: "keys", true: "names"}[n.sem]+" that start with this")
	if _, err := cf.parse(args); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	// Every page, so that the output is the whole list.
	var all []api.LockState
	cursor := ""
	for {
		var page []api.LockState
		var next *string
		if n.sem {
			p, err := c.ListSemaphores(ctx, *prefix, 1000, cursor)
			if err != nil {
				return failed(err)
			}
			page, next = p.Semaphores, p.NextCursor
		} else {
			p, err := c.List(ctx, *prefix, 1000, cursor)
			if err != nil {
				return failed(err)
			}
			page, next = p.Locks, p.NextCursor
		}
		all = append(all, page...)
		if next == nil || *next == "" {
			break
		}
		cursor = *next
	}
	if all == nil {
		all = []api.LockState{}
	}
	if cf.json {
		if n.sem {
			return printJSON(stdout, api.SemaphoreList{Semaphores: all})
		}
		return printJSON(stdout, api.LockList{Locks: all})
	}
	if len(all) == 0 {
		if n.sem {
			fmt.Fprintln(stderr, "lockd: no semaphore has a permit held")
		} else {
			fmt.Fprintln(stderr, "lockd: no live locks")
		}
		return nil
	}
	if n.sem {
		return printSemaphores(stdout, all)
	}
	return printLocks(stdout, all)
}

func historyCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return history(ctx, lockNoun, args, getenv, stdout, stderr)
}

func history(ctx context.Context, n noun, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cf := newClientFlags(n.name("history"), "[--limit N] [--renewals] [--json] "+n.arg(), getenv, stderr)
	cf.jsonFlag()
	limit := cf.fs.Int("limit", cf.env.int("limit", 50), "most events to show, newest first (1-1000)")
	renewals := cf.fs.Bool("renewals", cf.env.bool("renewals", false), "show the lease's renewals (kept apart from its lifecycle) instead")
	ops, err := cf.keyCommand(args, n, nil)
	if err != nil {
		return err
	}
	read := ops.history
	if *renewals {
		read = ops.renewals
	}
	h, err := read(ctx, *limit)
	if err != nil {
		return failed(err)
	}
	if cf.json {
		return printJSON(stdout, h)
	}
	if len(h.Events) == 0 {
		fmt.Fprintf(stderr, "lockd: no events for %s\n", h.Key)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tEVENT\tOWNER\tFENCE\tCOUNT\tTTL\tACTOR\tREASON")
	for _, e := range h.Events {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n",
			e.At.Local().Format(time.RFC3339Nano), e.Type, e.Owner, e.Fence, e.Count, ms(e.TtlMs), e.Actor, e.Reason)
	}
	return tw.Flush()
}

func forceReleaseCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return forceRelease(ctx, lockNoun, args, getenv, stdout, stderr)
}

func forceRelease(ctx context.Context, n noun, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cf := newClientFlags(n.name("force-release"), "[--fence N] [--reason TEXT] [--json] "+n.arg(), getenv, stderr)
	cf.jsonFlag()
	reason := cf.fs.String("reason", cf.env.str("reason", ""), "why, recorded in the history")
	// Not read from LOCKD_FENCE: that is what lockd run hands its command
	// (the fence of its own lease), not a choice of what to break.
	fence := cf.fs.Int64("fence", 0, "break only the holder with this fence (see status); default every holder. Not read from LOCKD_FENCE, which lockd run gives its command")
	ops, err := cf.keyCommand(args, n, func() error {
		if *fence < 0 {
			return usageError("--fence must be positive")
		}
		return nil
	})
	if err != nil {
		return err
	}
	r, err := ops.forceRelease(ctx, *fence, *reason)
	if err != nil {
		return failed(err)
	}
	if cf.json {
		return printJSON(stdout, r)
	}
	if *fence != 0 {
		fmt.Fprintf(stdout, "broke the lease on %s with fence %d (held by %s)\n", r.Key, r.Fence, r.Owner)
	} else {
		fmt.Fprintf(stdout, "broke every lease on %s (among them %s's, fence %d)\n", r.Key, r.Owner, r.Fence)
	}
	return nil
}

// holders are st's holders, or for a server from before shared holds its
// one holder from the top-level fields.
func holders(st api.LockState) []api.Holder {
	if len(st.Holders) > 0 || released(st) {
		return st.Holders
	}
	return []api.Holder{{
		Owner: st.Owner, Mode: st.Mode, Fence: st.Fence, Count: st.Count, TtlMs: st.TtlMs,
		AcquiredAt: st.AcquiredAt, ExpiresAt: st.ExpiresAt, RemainingMs: st.RemainingMs,
	}}
}

// released says whether st is a key that a hold window keeps after its
// holder's release: nobody holds it.
func released(st api.LockState) bool {
	return st.MinHoldUntil != nil && st.Count == 0
}

// printState is the table of status: a row per holder, then the queue.
// RENEWALS is there only for a key with one holder: the state counts the
// renewals of one lease, the newest, so with several holders the column
// would mean something on one row and nothing on the others.
func printState(w io.Writer, st api.LockState) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	hs := holders(st)
	one := len(hs) == 1 && st.Limit == nil
	if one {
		fmt.Fprintln(tw, "KEY\tMODE\tOWNER\tFENCE\tCOUNT\tTTL\tREMAINING\tRENEWALS\tACQUIRED")
	} else {
		fmt.Fprintln(tw, "KEY\tMODE\tOWNER\tFENCE\tCOUNT\tTTL\tREMAINING\tACQUIRED")
	}
	for _, h := range hs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t", st.Key, orDash(string(h.Mode)), h.Owner, h.Fence, h.Count, ms(h.TtlMs), ms(h.RemainingMs))
		if one {
			fmt.Fprintf(tw, "%d\t", st.Renewals)
		}
		fmt.Fprintf(tw, "%s\n", clock(h.AcquiredAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	held := fmt.Sprintf("%s: %d holder(s)", st.Key, len(hs))
	if st.Limit != nil {
		held = fmt.Sprintf("%s: %d of %d permits held", st.Key, len(hs), *st.Limit)
	}
	fmt.Fprintf(w, "\n%s, %d waiting\n", held, st.Waiters)
	switch {
	case released(st):
		fmt.Fprintf(w, "released by %s inside its hold window: nobody holds it until %s\n", st.Owner, clock(*st.MinHoldUntil))
	case st.MinHoldUntil != nil:
		fmt.Fprintf(w, "hold window until %s: a release before then keeps the key until then\n", clock(*st.MinHoldUntil))
	}
	if len(st.Queue) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tOWNER\tMODE\tWAITING SINCE")
	for i, q := range st.Queue {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", i+1, q.Owner, orDash(string(q.Mode)), clock(q.WaitingSince))
	}
	return tw.Flush()
}

// printLocks is the table of ls: a row per lock, its newest holder's
// details.
func printLocks(w io.Writer, states []api.LockState) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tMODE\tHOLDERS\tOWNER\tFENCE\tCOUNT\tTTL\tREMAINING\tRENEWALS\tWAITERS\tACQUIRED")
	for _, s := range states {
		// As in status: renewals of one lease, so "-" beside several holders.
		renewals := "-"
		if len(holders(s)) == 1 {
			renewals = strconv.FormatInt(s.Renewals, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\t%s\t%d\t%s\n",
			s.Key, orDash(string(s.Mode)), len(holders(s)), s.Owner, s.Fence, s.Count, ms(s.TtlMs), ms(s.RemainingMs), renewals, s.Waiters, clock(s.AcquiredAt))
	}
	return tw.Flush()
}

// printSemaphores is the table of sem list: a row per semaphore, with
// permits used of its limit, and its newest permit's details.
func printSemaphores(w io.Writer, states []api.LockState) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tUSED\tOWNER\tFENCE\tTTL\tREMAINING\tWAITERS\tACQUIRED")
	for _, s := range states {
		used := strconv.Itoa(len(holders(s)))
		if s.Limit != nil {
			used += "/" + strconv.Itoa(*s.Limit)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\n",
			s.Key, used, s.Owner, s.Fence, ms(s.TtlMs), ms(s.RemainingMs), s.Waiters, clock(s.AcquiredAt))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

const semUsage = `usage: lockd sem SUBCOMMAND [flags] NAME

A semaphore lets at most --limit holders hold it at once, each with a permit
of its own (token, fence, TTL), like a lock's lease. A semaphore and a lock
of the same name are unrelated.

  lockd sem acquire --limit N [--ttl 30s] [--wait 0s] [--owner NAME] [--json] NAME
                                take a permit; print its token (alone) on stdout
  lockd sem renew   --token T [--ttl D] [--json] NAME
  lockd sem release --token T [--json] NAME
  lockd sem status  [--json] NAME
                                its limit, a row per permit held, the queue
  lockd sem list    [--prefix P] [--json]
  lockd sem history [--limit N] [--renewals] [--json] NAME
  lockd sem force-release [--fence N] [--reason TEXT] [--json] NAME

  lockd run --semaphore NAME --limit N -- COMMAND [ARGS...]
                                hold a permit while COMMAND runs

Exit codes as for locks: 1 when no permit is free (after --wait), 2 also when
the semaphore is held with another --limit (every holder must use the same).

Run "lockd sem SUBCOMMAND -h" for its flags.`

// semCmd is lockd sem: the lock subcommands, for semaphores.
func semCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, semUsage)
		return usageError("sem wants a subcommand")
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, semUsage)
		return nil
	case "acquire":
		return acquire(ctx, semNoun, rest, getenv, stdout, stderr)
	case "renew":
		return renew(ctx, semNoun, rest, getenv, stdout, stderr)
	case "release":
		return release(ctx, semNoun, rest, getenv, stdout, stderr)
	case "status":
		return status(ctx, semNoun, rest, getenv, stdout, stderr)
	case "list", "ls":
		return list(ctx, semNoun, "list", rest, getenv, stdout, stderr)
	case "history":
		return history(ctx, semNoun, rest, getenv, stdout, stderr)
	case "force-release":
		return forceRelease(ctx, semNoun, rest, getenv, stdout, stderr)
	}
	fmt.Fprintln(stderr, semUsage)
	return usageError("unknown sem subcommand %q", sub)
}
