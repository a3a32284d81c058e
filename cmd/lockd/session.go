package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/client"
)

const sessionUsage = `usage: lockd session SUBCOMMAND [flags]

A session is one keep-alive for many grants: acquire with --session ID and
the grant lives as long as the session; end the session and every grant in
it is released at once; stop renewing it and they all lapse with it.

  lockd session create [--ttl 30s] [--owner NAME] [--json]
                           start a session; print its id (a secret) alone on stdout
  lockd session renew  [--json] ID
                           renew the session and every grant in it (every ttl/3)
  lockd session show   [--json] ID
                           the session's expiry and what it holds
  lockd session end    [--json] ID
                           end it: every grant in it is released

  lockd acquire --session ID KEY, lockd sem acquire --session ID ... take a grant in it.

Exit codes: 3 when the session ended or lapsed (or never existed).

Run "lockd session SUBCOMMAND -h" for its flags.`

// sessionCmd is lockd session.
func sessionCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, sessionUsage)
		return usageError("session wants a subcommand")
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, sessionUsage)
		return nil
	case "create":
		return sessionCreate(ctx, rest, getenv, stdout, stderr)
	case "renew", "show", "end":
		return sessionOp(ctx, sub, rest, getenv, stdout, stderr)
	}
	fmt.Fprintln(stderr, sessionUsage)
	return usageError("unknown session subcommand %q", sub)
}

func sessionCreate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cf := newClientFlags("session create", "[--ttl 30s] [--owner NAME] [--json]", getenv, stderr)
	cf.jsonFlag()
	ttl := cf.fs.Duration("ttl", cf.env.dur("ttl", 30*time.Second), "the session's TTL, from each renewal")
	owner := cf.fs.String("owner", cf.env.str("owner", ""), "whose session (default: the server's name for the caller)")
	if _, err := cf.parse(args); err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	s, err := c.CreateSession(ctx, client.SessionOptions{Owner: *owner, TTL: *ttl})
	if err != nil {
		return failed(err)
	}
	if cf.json {
		return printJSON(stdout, s)
	}
	// The id alone on stdout, the rest for people on stderr.
	fmt.Fprintln(stdout, *s.Session)
	fmt.Fprintf(stderr, "lockd: session of %s, ttl %s, expires %s; renew it every %s\n",
		s.Owner, ms(s.TtlMs), clock(s.ExpiresAt), ms(s.TtlMs/3))
	return nil
}

// sessionOp is renew, show and end, which take the session's id.
func sessionOp(ctx context.Context, sub string, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cf := newClientFlags("session "+sub, "[--json] ID", getenv, stderr)
	cf.jsonFlag()
	pos, err := cf.parse(args, "ID")
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var s api.Session
	switch sub {
	case "renew":
		s, err = c.RenewSession(ctx, pos[0])
	case "show":
		s, err = c.GetSession(ctx, pos[0])
	default:
		s, err = c.EndSession(ctx, pos[0])
	}
	if err != nil {
		return failed(err)
	}
	if cf.json {
		return printJSON(stdout, s)
	}
	// An ended session's expires_at is when it ended.
	verb := map[string]string{"renew": "renewed; expires", "show": "expires", "end": "ended at"}[sub]
	fmt.Fprintf(stdout, "session of %s, ttl %s, %s %s\n", s.Owner, ms(s.TtlMs), verb, clock(s.ExpiresAt))
	for _, h := range s.Holds {
		action := "holds"
		if sub == "end" {
			action = "released"
		}
		fmt.Fprintf(stdout, "  %s %s %s\n", action, h.Kind, h.Key)
	}
	return nil
}
