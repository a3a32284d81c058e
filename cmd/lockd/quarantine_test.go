package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/lockdtest"
)

// N23: `lockd quarantine end --reason TEXT` ends the restart quarantine
// that a live 1 h lease started when Redis lost its data; keys are
// granted again at once.
func TestCLIQuarantineEnd(t *testing.T) {
	ls := startCLIServer(t)
	env := map[string]string{"LOCKD_SERVER": ls.url}
	ctx := context.Background()
	if _, err := ls.c.Acquire(ctx, "cli:q:long", client.AcquireOptions{TTL: time.Hour, NoAutoRenew: true}); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := cli(t, env, "quarantine", "end"); code != exitUsage || !strings.Contains(stderr, "--reason") {
		t.Fatalf("quarantine end without --reason: exit %d, %s", code, stderr)
	}
	if code, out, _ := cli(t, env, "quarantine", "end", "--reason", "nothing on"); code != exitOK || !strings.Contains(out, "no restart quarantine") {
		t.Fatalf("quarantine end with none on: exit %d, %s", code, out)
	}
	ls.redis.Restart()
	lockdtest.Eventually(t, func() bool {
		_, err := ls.c.Acquire(ctx, "cli:q:k", client.AcquireOptions{TTL: time.Second, NoAutoRenew: true})
		var pe *client.APIError
		return errors.As(err, &pe) && pe.Problem.Code == api.ProblemCodeBackendRecovering
	}, 10*time.Second, "the quarantine after the loss")
	code, out, stderr := cli(t, env, "quarantine", "end", "--reason", "the holder was stopped")
	if code != exitOK || !strings.Contains(out, "ended the restart quarantine") {
		t.Fatalf("quarantine end: exit %d, %s%s", code, out, stderr)
	}
	if _, err := ls.c.Acquire(ctx, "cli:q:k", client.AcquireOptions{TTL: time.Second, NoAutoRenew: true}); err != nil {
		t.Fatalf("acquire after the end: %v", err)
	}
}
