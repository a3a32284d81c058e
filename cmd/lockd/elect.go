package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// electCmd is `lockd elect`: wait to lead the election NAME, run COMMAND
// while this process leads, resign when it exits and exit with its status.
// Leadership lost while COMMAND runs stops it at once (SIGTERM, SIGKILL
// after --grace) and exits 3, as lockd run does for a lost lease.
func electCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cf := newClientFlags("elect", "[--owner NAME] [--ttl 30s] [--wait 0] [--value JSON] [--grace 10s] [--retry 30s] NAME -- COMMAND [ARGS...]", getenv, stderr)
	o := runOptions{cf: cf, elect: true}
	cf.fs.DurationVar(&o.ttl, "ttl", cf.env.dur("ttl", 30*time.Second), "leadership TTL; renewed every ttl/3 while COMMAND runs")
	cf.fs.DurationVar(&o.wait, "wait", cf.env.dur("wait", 0), "how long to wait in line to lead (0: as long as it takes)")
	cf.fs.StringVar(&o.owner, "owner", cf.env.str("owner", ""), "the candidate's name, shown as the leader (default: the server's name for the caller)")
	cf.fs.StringVar(&o.value, "value", cf.env.str("value", ""), "the leader's value, JSON (e.g. where to reach it)")
	cf.fs.DurationVar(&o.grace, "grace", cf.env.dur("grace", 10*time.Second), "after leadership is lost, how long COMMAND has between SIGTERM and SIGKILL")
	cf.fs.DurationVar(&o.retry, "retry", cf.env.dur("retry", 30*time.Second), "how long to keep retrying while the server answers 503 or cannot be reached")
	if err := parseFlags(cf.fs, args); err != nil {
		return err
	}
	if cf.env.err != nil {
		return usageError("%v", cf.env.err)
	}
	rest := cf.fs.Args()
	if len(rest) > 1 && rest[1] == "--" {
		rest = append(rest[:1:1], rest[2:]...)
	}
	if len(rest) < 2 {
		cf.fs.Usage()
		return usageError("elect wants NAME -- COMMAND [ARGS...]")
	}
	o.key, o.argv = rest[0], rest[1:]
	switch {
	case o.value != "" && !json.Valid([]byte(o.value)):
		return usageError("--value must be JSON, e.g. '{\"addr\":\"10.0.0.7:8080\"}' or '\"host-a\"'")
	case o.grace < 0:
		return usageError("--grace must not be negative")
	case o.wait < 0:
		return usageError("--wait must not be negative")
	}
	for o.wait == 0 {
		// "As long as it takes": one campaign whose wait never ends in
		// practice. The client sends it in rounds of the server's longest
		// wait (--max-wait), with one Idempotency-Key, so the candidate
		// keeps its place in line and its waiting-since across rounds.
		err := runUnder(ctx, withWait(o, foreverWait), stdout, stderr)
		var ee *exitError
		if errors.As(err, &ee) && ee.code == exitHeld && ctx.Err() == nil {
			continue
		}
		return err
	}
	return runUnder(ctx, o, stdout, stderr)
}

// foreverWait is "as long as it takes": a century.
const foreverWait = 100 * 365 * 24 * time.Hour

func withWait(o runOptions, wait time.Duration) runOptions {
	o.wait = wait
	return o
}

// leaderCmd is `lockd leader`: print who leads NAME, its value and term;
// with --watch, every change as it happens, until interrupted.
func leaderCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cf := newClientFlags("leader", "[--watch] [--json] NAME", getenv, stderr)
	cf.jsonFlag()
	watch := cf.fs.Bool("watch", cf.env.bool("watch", false), "follow the leadership: print every change (leader, proclaimed, vacant)")
	pos, err := cf.parse(args, "NAME")
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	if !*watch {
		st, err := c.Leader(ctx, pos[0])
		if err != nil {
			return failed(err)
		}
		if cf.json {
			return printJSON(stdout, st)
		}
		fmt.Fprintf(stdout, "%s\tterm %d\t%s\n", deref(st.Leader), deref(st.Term), valueText(st.Value))
		return nil
	}
	events, err := c.Observe(ctx, pos[0])
	if err != nil {
		return failed(err)
	}
	for ev := range events {
		if cf.json {
			if err := printJSON(stdout, map[string]any{"event": ev.Event, "data": ev.Change}); err != nil {
				return err
			}
			continue
		}
		switch ev.Event {
		case "vacant":
			fmt.Fprintf(stdout, "vacant\tafter term %d\n", ev.Change.Term)
		default:
			fmt.Fprintf(stdout, "%s\t%s\tterm %d\t%s\n", ev.Event, deref(ev.Change.Leader), ev.Change.Term, valueText(ev.Change.Value))
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return &exitError{code: exitUnreachable, msg: "leader --watch: the stream ended; run it again to go on"}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// valueText is a value as one line: its compact JSON, or "-" for none.
func valueText(v *json.RawMessage) string {
	if v == nil {
		return "-"
	}
	return string(*v) // compact JSON: one line
}
