package main

import (
	"context"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/server"
)

// lockd elect behind a leader, and lockd run --wait 10s behind a holder,
// on a server whose --max-wait is 1 s: neither is refused (the CLI used to
// send the whole wait, "got 599999" for 10 m), and the candidate waits in
// rounds that keep its place and its waiting-since, ahead of one that
// came after it (issue 35, item 2; newcomer #3, #4).
func TestWaitsOutlastTheServersLongest(t *testing.T) {
	ld := lockdtest.Start(t, lockdtest.Options{Configure: func(c *server.Config) { c.MaxWait = time.Second }})
	c, err := client.New(ld.URL, client.WithRetry(0))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"LOCKD_SERVER": ld.URL}
	ctx := context.Background()
	start := func(out, errb *lockdtest.Buffer, args ...string) <-chan int {
		done := make(chan int, 1)
		go func() {
			err := run(ctx, append([]string{"lockd"}, args...), func(k string) string { return env[k] }, out, errb)
			done <- exitCode(err, errb)
		}()
		return done
	}

	leader, err := c.Campaign(ctx, "rounds", client.CampaignOptions{Owner: "leader", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var outB, errB, outC, errC lockdtest.Buffer
	b := start(&outB, &errB, "elect", "--owner", "host-b", "rounds", "--", "true")
	candidates := func() []string {
		st, err := c.Leader(ctx, "rounds")
		if err != nil {
			return nil
		}
		var names []string
		for _, w := range st.Candidates {
			names = append(names, w.Candidate)
		}
		return names
	}
	lockdtest.Eventually(t, func() bool { return len(candidates()) == 1 }, 5*time.Second, "host-b in line")
	st, _ := c.Leader(ctx, "rounds")
	since := st.Candidates[0].WaitingSince
	cc := start(&outC, &errC, "elect", "--owner", "host-c", "rounds", "--", "true")
	lockdtest.Eventually(t, func() bool { return len(candidates()) == 2 }, 5*time.Second, "host-c in line")
	time.Sleep(2500 * time.Millisecond) // two rounds and more
	st, err = c.Leader(ctx, "rounds")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Candidates) != 2 || st.Candidates[0].Candidate != "host-b" || !st.Candidates[0].WaitingSince.Equal(since) {
		t.Fatalf("candidates after rounds: %+v, want host-b first, waiting since %v", st.Candidates, since)
	}
	if err := leader.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if code := <-b; code != 0 {
		t.Fatalf("host-b: exit %d: %s", code, &errB)
	}
	if code := <-cc; code != 0 {
		t.Fatalf("host-c: exit %d: %s", code, &errC)
	}

	holder, err := c.Acquire(ctx, "rounds:run", client.AcquireOptions{Owner: "holder", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var outR, errR lockdtest.Buffer
	r := start(&outR, &errR, "run", "--wait", "10s", "rounds:run", "--", "true")
	lockdtest.Eventually(t, func() bool {
		st, err := c.State(ctx, "rounds:run")
		return err == nil && len(st.Queue) == 1
	}, 5*time.Second, "lockd run in line")
	time.Sleep(1500 * time.Millisecond) // past one round
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if code := <-r; code != 0 {
		t.Fatalf("lockd run --wait 10s: exit %d: %s", code, &errR)
	}
}
