package lock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
)

// A Redis restart without persistence costs no holder its lease: 1,000
// leases (exclusive, re-entered, with values, shared holds and permits)
// granted through two lockds are all put back, and every one renews
// through the other lockd with its token alone, with the same fence,
// owner, count and value; a key nobody held is granted within 5 s of the
// loss; a lease released or force-released before the loss, a forged
// token and a token on another key restore nothing; the history says
// "restored", and the next grant of a restored key gets a higher fence.
func TestRestoreAfterLoss(t *testing.T) {
	srv := redistest.Start(t)
	opts := lock.Options{EpochRefresh: 200 * time.Millisecond}
	a, b := lock.New(srv.Client(t), opts), lock.New(srv.Client(t), opts)
	t.Cleanup(func() { _, _ = a.Close(), b.Close() })
	ctx := context.Background()
	const ttl = 30 * time.Second

	type held struct {
		res   lock.Resource
		lease lock.Lease
		by    *lock.Engine
		value string
	}
	var leases []held
	for i := range 1000 {
		e := []*lock.Engine{a, b}[i%2]
		var res lock.Resource
		req := lock.AcquireRequest{Owner: fmt.Sprint("o", i), TTL: ttl}
		switch i % 4 {
		case 0, 1:
			res = lock.Lock(fmt.Sprint("rs:x:", i))
			req.Value = fmt.Sprintf(`{"n":%d}`, i)
		case 2:
			res, req.Mode = lock.Lock(fmt.Sprint("rs:s:", i%40)), lock.Shared
		case 3:
			res, req.Limit = lock.Semaphore(fmt.Sprint("rs:p:", i%40)), 100
		}
		leases = append(leases, held{res, mustAcquire(t, e, res, req), e, req.Value})
	}
	// One re-entered lease, count 2.
	re := leases[0]
	mustAcquire(t, re.by, re.res, lock.AcquireRequest{Token: re.lease.Token, TTL: ttl})
	// Gone before the loss: released, and force-released.
	released := mustAcquire(t, a, lock.Lock("rs:released"), lock.AcquireRequest{TTL: ttl})
	if _, err := b.Release(ctx, lock.Lock("rs:released"), released.Token, "t"); err != nil {
		t.Fatal(err)
	}
	broken := mustAcquire(t, a, lock.Lock("rs:broken"), lock.AcquireRequest{TTL: ttl})
	if _, err := a.ForceReleaseFence(ctx, lock.Lock("rs:broken"), broken.Fence, "ops", "stuck"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // every lockd reads the marker

	srv.Restart()
	lost := time.Now()

	// A key nobody held comes back within 5 s.
	_, free := afterLoss(t, a, "rs:free", lost, 5*time.Second)
	freeAfter := free.AcquiredAt.Sub(lost)
	if freeAfter > 5*time.Second {
		t.Fatalf("a free key granted %v after the loss", freeAfter)
	}

	// Every holder renews through the lockd that did not grant it.
	renewed := 0
	for i, h := range leases {
		other := map[*lock.Engine]*lock.Engine{a: b, b: a}[h.by]
		l, err := other.Renew(ctx, h.res, lock.RenewRequest{Token: h.lease.Token})
		if err != nil {
			t.Fatalf("lease %d (%s) after the loss: %v", i, h.res.Name, err)
		}
		if l.Fence != h.lease.Fence || l.Owner != h.lease.Owner {
			t.Fatalf("lease %d put back as fence %d owner %q, was %d %q", i, l.Fence, l.Owner, h.lease.Fence, h.lease.Owner)
		}
		renewed++
	}
	if l, err := b.Renew(ctx, re.res, lock.RenewRequest{Token: re.lease.Token}); err != nil || l.Count != 2 {
		t.Fatalf("the re-entered lease: count %d, %v", l.Count, err)
	}
	st, err := b.State(ctx, leases[1].res)
	if err != nil || st.Value != leases[1].value {
		t.Fatalf("a value after the loss: %q, %v; want %q", st.Value, err, leases[1].value)
	}
	hist, err := b.History(ctx, leases[1].res, 10)
	if err != nil || len(hist) == 0 || hist[0].Type != "restored" || hist[0].Actor != "lockd" {
		t.Fatalf("history after the loss: %+v, %v", hist, err)
	}

	// What was gone before the loss, or never was, stays gone.
	for _, c := range []struct {
		name  string
		res   lock.Resource
		token string
	}{
		{"released before the loss", lock.Lock("rs:released"), released.Token},
		{"force-released before the loss", lock.Lock("rs:broken"), broken.Token},
		{"a forged token", lock.Lock("rs:x:1"), "forged-" + leases[1].lease.Token[7:]},
		{"a token on another key", lock.Lock("rs:x:4"), leases[1].lease.Token},
	} {
		_, err := b.Renew(ctx, c.res, lock.RenewRequest{Token: c.token})
		if !errors.Is(err, lock.ErrNotFound) && !errors.Is(err, lock.ErrLeaseLost) {
			t.Errorf("%s: renew answered %v, want not found or lost", c.name, err)
		}
	}

	// The next grant after a restored lease has a higher fence.
	x := leases[1]
	if _, err := a.Release(ctx, x.res, x.lease.Token, "t"); err != nil {
		t.Fatal(err)
	}
	next := mustAcquire(t, b, x.res, lock.AcquireRequest{TTL: time.Second})
	if next.Fence <= x.lease.Fence {
		t.Fatalf("the grant after a restored lease: fence %d, the restored one had %d", next.Fence, x.lease.Fence)
	}
	t.Logf("1,000 leases over 2 lockds: %d renewed after the loss, 0 refused; a free key granted %v after it",
		renewed, freeAfter.Round(time.Millisecond))
}

// An open hold stream, whose renewals go on by themselves, sees no loss:
// Engine.Renew finds its lease put back. (The server's /hold is such a
// loop over Engine.Renew.)
func TestRenewsAcrossALossWithoutAGap(t *testing.T) {
	srv := redistest.Start(t)
	opts := lock.Options{EpochRefresh: 200 * time.Millisecond}
	a := lock.New(srv.Client(t), opts)
	t.Cleanup(func() { _ = a.Close() })
	ctx := context.Background()
	l := mustAcquire(t, a, lock.Lock("rg:k"), lock.AcquireRequest{TTL: 3 * time.Second})
	srv.Restart()
	// The first renew after the restart: the lockd has not yet noticed.
	var err error
	for range 50 {
		if _, err = a.Renew(ctx, lock.Lock("rg:k"), lock.RenewRequest{Token: l.Token}); !errors.Is(err, lock.ErrUnavailable) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("the first renew after the loss: %v", err)
	}
}
