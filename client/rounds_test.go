package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/server"
)

// TestWaitLongerThanTheServersGoesInRounds: a wait longer than the
// server's --max-wait (1 s here) is not refused 400: it goes in rounds of
// at most that, all with one Idempotency-Key, keeps its place ahead of a
// waiter that came after it, and is granted first (issue 35, item 2;
// newcomer #3, #4).
func TestWaitLongerThanTheServersGoesInRounds(t *testing.T) {
	// The engine's longest wait is the server's, as lockd serve sets both from --max-wait.
	ld := lockdtest.Start(t, lockdtest.Options{Configure: func(c *server.Config) { c.MaxWait = time.Second },
		Engine: lock.Options{MaxWait: time.Second}})
	c, err := client.New(ld.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := uniqueKey(t)
	holder, err := c.Acquire(ctx, key, client.AcquireOptions{Owner: "holder", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		owner string
		err   error
	}
	granted := make(chan result, 2)
	var releases sync.WaitGroup
	releases.Add(2)
	t.Cleanup(releases.Wait) // before the server stops
	wait := func(owner string) {
		defer releases.Done()
		l, err := c.Acquire(ctx, key, client.AcquireOptions{Owner: owner, TTL: 10 * time.Second, Wait: 10 * time.Second, NoAutoRenew: true})
		// Said before the release, so that the channel has the grants in
		// their order (the next grant comes only after this release).
		granted <- result{owner, err}
		if err == nil {
			if err := l.Release(ctx); err != nil {
				t.Errorf("%s's release: %v", owner, err)
			}
		}
	}
	queue := func() []string {
		st, err := c.State(ctx, key)
		if err != nil {
			return nil
		}
		var owners []string
		for _, q := range st.Queue {
			owners = append(owners, q.Owner)
		}
		return owners
	}
	go wait("first")
	lockdtest.Eventually(t, func() bool { return len(queue()) == 1 }, 5*time.Second, "the first waiter queued")
	go wait("second")
	lockdtest.Eventually(t, func() bool { return len(queue()) == 2 }, 5*time.Second, "the second waiter queued")
	// Past two rounds of the first waiter.
	time.Sleep(2500 * time.Millisecond)
	st, err := c.State(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Queue) != 2 || st.Queue[0].Owner != "first" || st.Queue[1].Owner != "second" ||
		st.Queue[0].WaitingSince.After(st.Queue[1].WaitingSince) {
		t.Fatalf("queue after rounds: %+v, want first (since earlier) then second", st.Queue)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Both are granted, the first first: its place stays queued between
	// two of its rounds, so a release in that moment waits for its next
	// round rather than go to the second (docs/api.md, "Waits longer than
	// --max-wait").
	var order []string
	for range 2 {
		r := <-granted
		if r.err != nil {
			t.Fatalf("%s: %v", r.owner, r.err)
		}
		order = append(order, r.owner)
	}
	if order[0] != "first" {
		t.Fatalf("granted in the order %v, want first, then second", order)
	}
	t.Logf("granted in the order %v", order)
}
