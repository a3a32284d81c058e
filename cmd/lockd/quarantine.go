package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

// quarantineCmd is `lockd quarantine end`: an operator ends the restart
// quarantine early (POST /v1/admin/quarantine/end).
func quarantineCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "end" {
		fmt.Fprintln(stderr, "usage: lockd quarantine end --reason TEXT [--json]")
		return usageError("quarantine wants the subcommand end")
	}
	cf := newClientFlags("quarantine end", "--reason TEXT [--json]", getenv, stderr)
	cf.jsonFlag()
	reason := cf.fs.String("reason", cf.env.str("reason", ""), "why the quarantine ends early (required; the server logs it with the API key's name)")
	if _, err := cf.parse(args[1:]); err != nil {
		return err
	}
	if *reason == "" {
		return usageError("quarantine end: --reason is required")
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	r, err := c.EndQuarantine(ctx, *reason)
	if err != nil {
		return failed(err)
	}
	if cf.json {
		return printJSON(stdout, r)
	}
	if !r.Ended {
		fmt.Fprintln(stdout, "no restart quarantine was on")
		return nil
	}
	fmt.Fprintf(stdout, "ended the restart quarantine, which had %v left: every lockd on this Redis grants again\n",
		(time.Duration(r.RemainingMs) * time.Millisecond).Round(time.Second))
	return nil
}
