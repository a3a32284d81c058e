package wire_test

import (
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/wire"
)

var at = time.UnixMilli(1_790_000_000_000).UTC()

// A semaphore's permit shows the semaphore's name, its limit and the
// permit mode; a replayed grant says so.
func TestLeaseOfSemaphore(t *testing.T) {
	l := wire.LeaseOf(lock.Lease{Resource: lock.Semaphore("render:pool"), Owner: "w", Token: "tok", Fence: 3, Count: 1,
		TTL: 30 * time.Second, AcquiredAt: at, ExpiresAt: at.Add(30 * time.Second), Outcome: lock.Replayed, Limit: 4})
	if l.Key != "render:pool" || l.Mode != api.GrantModePermit || l.Limit == nil || *l.Limit != 4 ||
		l.Token != "tok" || l.TtlMs != 30000 || l.Replayed == nil || !*l.Replayed {
		t.Fatalf("LeaseOf = %+v", l)
	}
}

// A lock's lease has no limit, and a fresh grant no replayed flag.
func TestLeaseOfLock(t *testing.T) {
	l := wire.LeaseOf(lock.Lease{Resource: lock.Lock("order:1"), Mode: lock.Shared, Outcome: lock.Granted})
	if l.Key != "order:1" || l.Mode != api.GrantModeShared || l.Limit != nil || l.Replayed != nil {
		t.Fatalf("LeaseOf = %+v", l)
	}
}

// An engine that lists no holders (Redlock) has the one its state
// describes, held exclusively.
func TestStateOfWithoutHolders(t *testing.T) {
	s := wire.StateOf(lock.State{Resource: lock.Lock("k"), Owner: "w", Fence: 9, Count: 2, TTL: time.Second, Remaining: 400 * time.Millisecond,
		AcquiredAt: at, ExpiresAt: at.Add(time.Second), HoldersTotal: 1})
	if s.Key != "k" || s.Mode != api.GrantModeExclusive || s.Limit != nil || s.RemainingMs != 400 || *s.HoldersTotal != 1 {
		t.Fatalf("StateOf = %+v", s)
	}
	if len(s.Holders) != 1 || s.Holders[0].Owner != "w" || s.Holders[0].Fence != 9 || s.Holders[0].RemainingMs != 400 {
		t.Fatalf("holders %+v, want the state's one", s.Holders)
	}
	if s.Queue == nil || len(s.Queue) != 0 {
		t.Fatalf("queue %v, want an empty list", s.Queue)
	}
}

// A semaphore's state lists its holders and queue by permit, under its
// name.
func TestStateOfSemaphore(t *testing.T) {
	s := wire.StateOf(lock.State{Resource: lock.Semaphore("pool"), Limit: 2, HoldersTotal: 2,
		Holders: []lock.Holder{{Owner: "a", Fence: 1}, {Owner: "b", Fence: 2}},
		Queue:   []lock.Queued{{Owner: "c", WaitingSince: at}}})
	if s.Key != "pool" || s.Limit == nil || *s.Limit != 2 || len(s.Holders) != 2 || s.Holders[1].Mode != api.GrantModePermit {
		t.Fatalf("StateOf = %+v", s)
	}
	if len(s.Queue) != 1 || s.Queue[0].Owner != "c" || s.Queue[0].Mode != api.GrantModePermit {
		t.Fatalf("queue %+v", s.Queue)
	}
}

// Events name a semaphore by its name, with kind semaphore.
func TestLockEventOf(t *testing.T) {
	for _, tc := range []struct {
		key  lock.Resource
		name string
		kind api.LockEventKind
	}{
		{lock.Lock("order:1"), "order:1", api.LockEventKindLock},
		{lock.Semaphore("pool"), "pool", api.LockEventKindSemaphore},
	} {
		e := wire.LockEventOf(lock.Change{ID: "1-0", Type: "acquired", Resource: tc.key, At: at, Owner: "w", Fence: 5})
		if e.Key != tc.name || e.Kind != tc.kind || e.Id != "1-0" || e.Type != "acquired" || e.Fence != 5 {
			t.Errorf("LockEventOf(%s) = %+v", tc.key, e)
		}
	}
}

// Only a renewal says how much of the lease was left.
func TestEventOf(t *testing.T) {
	r := wire.EventOf(lock.Event{Type: "renewed", At: at, TTL: time.Second, Left: 250 * time.Millisecond})
	if r.RemainingMs == nil || *r.RemainingMs != 250 || r.TtlMs != 1000 {
		t.Fatalf("renewal %+v", r)
	}
	if a := wire.EventOf(lock.Event{Type: "acquired", At: at}); a.RemainingMs != nil {
		t.Fatalf("acquired %+v has remaining_ms", a)
	}
}
