package lock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
)

// Both engines offer the whole Service. What Redlock cannot do it answers
// with the error that says so (errors.Is ErrUnsupported), never with an
// empty page, a nil error or a zero; one Redis does all of it.
func TestServiceCapabilities(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		open    func(t *testing.T) lock.Service
		redlock bool
	}{
		{"one redis", func(t *testing.T) lock.Service { return newEngine(t, redistest.Start(t).Client(t)) }, false},
		{"redlock", func(t *testing.T) lock.Service { return redlockOn(t, threeMasters(t), lock.Options{}) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.open(t)
			// unsupported checks err: the named error under Redlock, none on
			// one Redis.
			unsupported := func(what string, err, want error) {
				t.Helper()
				switch {
				case tc.redlock && (!errors.Is(err, lock.ErrUnsupported) || !errors.Is(err, want)):
					t.Errorf("%s: %v, want %v", what, err, want)
				case !tc.redlock && err != nil:
					t.Errorf("%s: %v", what, err)
				}
			}

			page, err := e.List(ctx, lock.KindSemaphore, "", 10, "")
			unsupported("ListSemaphores", err, lock.ErrNoSemaphores)
			if !tc.redlock && page.Locks == nil {
				t.Error("ListSemaphores: a nil page")
			}
			_, err = e.Acquire(ctx, lock.Semaphore("cap:s"), lock.AcquireRequest{Owner: "o", TTL: time.Minute, Limit: 2})
			unsupported("a permit", err, lock.ErrUnsupported)
			_, err = e.Acquire(ctx, lock.Lock("cap:shared"), lock.AcquireRequest{Owner: "o", TTL: time.Minute, Mode: lock.Shared})
			unsupported("a shared hold", err, lock.ErrUnsupported)
			set, err := e.AcquireSet(ctx, lock.SetRequest{Keys: []string{"cap:set:1", "cap:set:2"}, Owner: "o", TTL: time.Minute})
			unsupported("a lock set", err, lock.ErrNoLockSets)
			if !tc.redlock && len(set.Leases) != 2 {
				t.Errorf("a lock set: %+v", set)
			}
			sub, err := e.Subscribe(ctx, "")
			unsupported("Subscribe", err, lock.ErrNoEventStream)
			if sub != nil {
				sub.Close()
			}
			src, err := e.EventSource()
			unsupported("EventSource", err, lock.ErrNoEventStream)
			if !tc.redlock && (src.Client == nil || src.Stream == "") {
				t.Errorf("EventSource: %+v", src)
			}
			n, err := e.MissedAcks()
			unsupported("MissedAcks", err, lock.ErrNoReplicaAcks)
			if n != 0 {
				t.Errorf("MissedAcks = %d with no replica acks asked for", n)
			}

			// What both do.
			topo := e.Topology(ctx)
			wantKind, wantNodes := "redis", 1
			if tc.redlock {
				wantKind, wantNodes = "redlock", 3
			}
			if topo.Kind != wantKind || len(topo.Nodes) != wantNodes {
				t.Errorf("Topology = %+v, want %s with %d nodes", topo, wantKind, wantNodes)
			}
			for _, node := range topo.Nodes {
				if !node.Up || node.Role != "master" {
					t.Errorf("node %+v, want an up master", node)
				}
			}
			var mu sync.Mutex
			var lapsed []string
			e.OnLapse(func(res lock.Resource, _, _ time.Time, _ time.Duration) {
				key := res.Name
				mu.Lock()
				defer mu.Unlock()
				lapsed = append(lapsed, key)
			})
			mustAcquire(t, e, lock.Lock("cap:lapse"), lock.AcquireRequest{Owner: "o", TTL: time.Second})
			waitFor(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(lapsed) > 0
			})
			mu.Lock()
			defer mu.Unlock()
			if len(lapsed) != 1 || lapsed[0] != "cap:lapse" {
				t.Errorf("lapses heard: %v, want cap:lapse once", lapsed)
			}
		})
	}
}
