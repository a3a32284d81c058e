package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/lockdtest"
)

// TestRunSaysWhatItWaitsFor: lockd run on a taken key or semaphore says on
// stderr what it waits for, who holds it and for how long, then waits and
// runs COMMAND (newcomer #14: 20 s of silence, then the output).
func TestRunSaysWhatItWaitsFor(t *testing.T) {
	ls := startCLIServer(t)
	ctx := context.Background()
	env := map[string]string{"LOCKD_SERVER": ls.url}
	for _, c := range []struct {
		name string
		args []string
		hold func() (release func())
		want string
	}{
		{"lock", []string{"run", "--wait", "20s", "wt:lock", "--", "true"}, func() func() {
			l, err := ls.c.Acquire(ctx, "wt:lock", client.AcquireOptions{Owner: "deployer", TTL: time.Minute, NoAutoRenew: true})
			if err != nil {
				t.Fatal(err)
			}
			return func() { _ = l.Release(ctx) }
		}, "lockd: waiting for wt:lock (held by deployer, "},
		{"permit", []string{"run", "--semaphore", "wt:pool", "--limit", "1", "--wait", "20s", "--", "true"}, func() func() {
			l, err := ls.c.Semaphore("wt:pool", 1).Acquire(ctx, client.AcquireOptions{Owner: "render-1", TTL: time.Minute, NoAutoRenew: true})
			if err != nil {
				t.Fatal(err)
			}
			return func() { _ = l.Release(ctx) }
		}, "lockd: waiting for a permit of wt:pool (all held; the first ends in "},
	} {
		t.Run(c.name, func(t *testing.T) {
			release := c.hold()
			var out, errb lockdtest.Buffer
			done := make(chan int, 1)
			go func() {
				err := run(ctx, append([]string{"lockd"}, c.args...), func(k string) string { return env[k] }, &out, &errb)
				done <- exitCode(err, &errb)
			}()
			lockdtest.Eventually(t, func() bool { return strings.Contains(errb.String(), c.want) }, 10*time.Second, "the waiting line "+c.want)
			release()
			select {
			case code := <-done:
				if code != exitOK {
					t.Fatalf("exit %d\n%s", code, &errb)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("lockd run did not get the key after its release")
			}
		})
	}
	// A free key: no waiting line.
	if code, _, stderr := cli(t, env, "run", "--wait", "5s", "wt:free", "--", "true"); code != exitOK || strings.Contains(stderr, "waiting") {
		t.Fatalf("a free key: exit %d\n%s", code, stderr)
	}
}
