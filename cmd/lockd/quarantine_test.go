package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
)

// N23: `lockd quarantine end --reason TEXT` ends the restart quarantine
// that a live 1 h lease started when Redis lost its data (a lease of a
// lockd that died, which nobody can put back); keys are granted again at
// once.
func TestCLIQuarantineEnd(t *testing.T) {
	opts := lock.Options{EpochRefresh: 100 * time.Millisecond}
	ld := lockdtest.Start(t, lockdtest.Options{Engine: opts})
	dead := lockdtest.Start(t, lockdtest.Options{Redis: ld.Redis, Engine: opts})
	c, err := client.New(ld.URL, client.WithRetry(0))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"LOCKD_SERVER": ld.URL}
	ctx := context.Background()
	if _, err := dead.Engine.Acquire(ctx, lock.Lock("cli:q:long"), lock.AcquireRequest{Owner: "o", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := cli(t, env, "quarantine", "end"); code != exitUsage || !strings.Contains(stderr, "--reason") {
		t.Fatalf("quarantine end without --reason: exit %d, %s", code, stderr)
	}
	if code, out, _ := cli(t, env, "quarantine", "end", "--reason", "nothing on"); code != exitOK || !strings.Contains(out, "no restart quarantine") {
		t.Fatalf("quarantine end with none on: exit %d, %s", code, out)
	}
	time.Sleep(300 * time.Millisecond) // both lockds read the marker: ld learns dead's lease
	_ = dead.Engine.Close()
	ld.Redis.Restart()
	restarted := time.Now()
	// Past the two refreshes in which a lockd that lives would have put its
	// leases back, the quarantine is the dead lockd's.
	lockdtest.Eventually(t, func() bool {
		_, err := c.Acquire(ctx, "cli:q:k", client.AcquireOptions{TTL: time.Second, NoAutoRenew: true})
		var pe *client.APIError
		return errors.As(err, &pe) && pe.Problem.Code == api.ProblemCodeBackendRecovering && time.Since(restarted) > time.Second
	}, 10*time.Second, "the quarantine after the loss")
	code, out, stderr := cli(t, env, "quarantine", "end", "--reason", "the holder was stopped")
	if code != exitOK || !strings.Contains(out, "ended the restart quarantine") {
		t.Fatalf("quarantine end: exit %d, %s%s", code, out, stderr)
	}
	if _, err := c.Acquire(ctx, "cli:q:k", client.AcquireOptions{TTL: time.Second, NoAutoRenew: true}); err != nil {
		t.Fatalf("acquire after the end: %v", err)
	}
}
