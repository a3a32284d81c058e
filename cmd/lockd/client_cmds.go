package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/client"
)

// acquireCmd takes a lease and prints its token, so that a script can
// renew and release it: `tok=$(lockd acquire KEY)`.
func acquireCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cf := newClientFlags("acquire", "[--ttl 30s] [--wait 0s] [--owner NAME] [--idempotency-key K] [--json] KEY", getenv, stderr)
	cf.jsonFlag()
	ttl := cf.fs.Duration("ttl", cf.env.dur("ttl", 30*time.Second), "lease TTL")
	wait := cf.fs.Duration("wait", cf.env.dur("wait", 0), "how long to wait while the key is held (0: try once)")
	owner := cf.fs.String("owner", cf.env.str("owner", ""), "holder's label (default: the server's name for the caller)")
	idem := cf.fs.String("idempotency-key", cf.env.str("idempotency-key", ""), "a retry with the same value gets the same lease back (e.g. a delivery ID)")
	pos, err := cf.parse(args, "KEY")
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	l, err := c.Acquire(ctx, pos[0], client.AcquireOptions{
		Owner: *owner, TTL: *ttl, Wait: *wait, IdempotencyKey: *idem, NoAutoRenew: true,
	})
	if err != nil {
		return failed(err)
	}
	info := l.Info()
	if cf.json {
		return printJSON(stdout, info)
	}
	// The token alone on stdout, the rest for people on stderr.
	fmt.Fprintln(stdout, info.Token)
	fmt.Fprintf(stderr, "lockd: acquired %s (owner %s, fence %d, ttl %s, expires %s)\n",
		info.Key, info.Owner, info.Fence, ms(info.TtlMs), clock(info.ExpiresAt))
	return nil
}

func renewCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cf := newClientFlags("renew", "--token T [--ttl D] [--json] KEY", getenv, stderr)
	cf.jsonFlag()
	ttl := cf.fs.Duration("ttl", cf.env.dur("ttl", 0), "new TTL from now (default: the lease's own)")
	token := cf.fs.String("token", cf.env.str("token", ""), "the lease's token (prefer LOCKD_TOKEN: flags show in ps)")
	pos, err := cf.parse(args, "KEY")
	if err != nil {
		return err
	}
	if *token == "" {
		return usageError("renew needs --token (or LOCKD_TOKEN): the token that acquire printed")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	l, err := c.Renew(ctx, pos[0], *token, *ttl)
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
	cf := newClientFlags("release", "--token T [--json] KEY", getenv, stderr)
	cf.jsonFlag()
	token := cf.fs.String("token", cf.env.str("token", ""), "the lease's token (prefer LOCKD_TOKEN: flags show in ps)")
	pos, err := cf.parse(args, "KEY")
	if err != nil {
		return err
	}
	if *token == "" {
		return usageError("release needs --token (or LOCKD_TOKEN): the token that acquire printed")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	r, err := c.Release(ctx, pos[0], *token)
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
	cf := newClientFlags("status", "[--json] KEY", getenv, stderr)
	cf.jsonFlag()
	pos, err := cf.parse(args, "KEY")
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	st, err := c.State(ctx, pos[0])
	if err != nil {
		// Exit 3 (not found) when the key is free.
		return failed(err)
	}
	if cf.json {
		return printJSON(stdout, st)
	}
	return printStates(stdout, []api.LockState{st})
}

func lsCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cf := newClientFlags("ls", "[--prefix P] [--json]", getenv, stderr)
	cf.jsonFlag()
	prefix := cf.fs.String("prefix", cf.env.str("prefix", ""), "only keys that start with this")
	if _, err := cf.parse(args); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	// Every page, so that the output is the whole list.
	all := api.LockList{Locks: []api.LockState{}}
	cursor := ""
	for {
		page, err := c.List(ctx, *prefix, 1000, cursor)
		if err != nil {
			return failed(err)
		}
		all.Locks = append(all.Locks, page.Locks...)
		if page.NextCursor == nil || *page.NextCursor == "" {
			break
		}
		cursor = *page.NextCursor
	}
	if cf.json {
		return printJSON(stdout, all)
	}
	if len(all.Locks) == 0 {
		fmt.Fprintln(stderr, "lockd: no live locks")
		return nil
	}
	return printStates(stdout, all.Locks)
}

func historyCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cf := newClientFlags("history", "[--limit N] [--renewals] [--json] KEY", getenv, stderr)
	cf.jsonFlag()
	limit := cf.fs.Int("limit", cf.env.int("limit", 50), "most events to show, newest first (1-1000)")
	renewals := cf.fs.Bool("renewals", cf.env.bool("renewals", false), "show the lease's renewals (kept apart from its lifecycle) instead")
	pos, err := cf.parse(args, "KEY")
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	history := c.History
	if *renewals {
		history = c.Renewals
	}
	h, err := history(ctx, pos[0], *limit)
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
	cf := newClientFlags("force-release", "[--reason TEXT] [--json] KEY", getenv, stderr)
	cf.jsonFlag()
	reason := cf.fs.String("reason", cf.env.str("reason", ""), "why, recorded in the key's history")
	pos, err := cf.parse(args, "KEY")
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	r, err := c.ForceRelease(ctx, pos[0], *reason)
	if err != nil {
		return failed(err)
	}
	if cf.json {
		return printJSON(stdout, r)
	}
	fmt.Fprintf(stdout, "broke the lease on %s (held by %s, fence %d)\n", r.Key, r.Owner, r.Fence)
	return nil
}

// printStates is the table of status and ls.
func printStates(w io.Writer, states []api.LockState) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tOWNER\tFENCE\tCOUNT\tTTL\tREMAINING\tRENEWALS\tWAITERS\tACQUIRED")
	for _, s := range states {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%d\t%d\t%s\n",
			s.Key, s.Owner, s.Fence, s.Count, ms(s.TtlMs), ms(s.RemainingMs), s.Renewals, s.Waiters, clock(s.AcquiredAt))
	}
	return tw.Flush()
}
