package lock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lock/store"
	"github.com/lockd/lockd/internal/redistest"
)

// startReplica starts a replica of master and waits until it is in sync.
func startReplica(t *testing.T, master *redistest.Server) *redistest.Server {
	t.Helper()
	_, port, _ := strings.Cut(master.Addr, ":")
	r := redistest.StartWith(t, nil, []string{"--replicaof", "127.0.0.1", port, "--repl-diskless-sync-delay", "0"})
	rc := r.Client(t)
	waitFor(t, func() bool {
		info, err := rc.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	return r
}

// With --replica-acks 1 a write is answered once the replica has it; with
// the replica stalled, a grant is undone and every write is ErrUnavailable.
func TestReplicaAcks(t *testing.T) {
	// Without a delay, the master sends its first full sync at once.
	master := redistest.StartWith(t, nil, []string{"--repl-diskless-sync-delay", "0"})
	replica := startReplica(t, master)
	// A generous timeout while the replica runs (a loaded test machine can
	// be slow to ack), a short one to measure the stalled case.
	e := lock.New(tunedClient(t, master), lock.Options{ReplicaAcks: 1, ReplicaAckTimeout: 2 * time.Second})
	short := lock.New(tunedClient(t, master), lock.Options{ReplicaAcks: 1, ReplicaAckTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = e.Close(); _ = short.Close() })
	ctx := context.Background()

	l := mustAcquire(t, e, lock.Lock("acks:k"), lock.AcquireRequest{Owner: "a"})
	// The replica has the lease: read it there.
	if got := lock.LeaseToken(ctx, replica.Client(t), "acks:k"); got != l.Token {
		t.Fatalf("replica has token %q, want the lease's", got)
	}
	if _, err := e.Renew(ctx, lock.Lock("acks:k"), lock.RenewRequest{Token: l.Token, TTL: 0, Actor: "a"}); err != nil {
		t.Fatalf("renew with a live replica: %v", err)
	}
	if _, err := e.Release(ctx, lock.Lock("acks:k"), l.Token, "a"); err != nil {
		t.Fatalf("release with a live replica: %v", err)
	}

	replica.Pause()
	defer replica.Resume()
	start := time.Now()
	_, err := short.Acquire(ctx, lock.Lock("acks:k"), lock.AcquireRequest{Owner: "b", TTL: 10 * time.Second})
	if !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("acquire with the replica stalled: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 2*time.Second {
		t.Errorf("the unacknowledged acquire took %v", d)
	}
	if st, err := e.State(ctx, lock.Lock("acks:k")); !errors.Is(err, lock.ErrNotFound) {
		t.Fatalf("the unacknowledged grant was left behind: %+v %v", st, err)
	}
	if n, err := short.MissedAcks(); err != nil || n < 1 {
		t.Fatalf("MissedAcks = %d, %v", n, err)
	}
	replica.Resume()
	waitFor(t, func() bool {
		_, err := e.Acquire(ctx, lock.Lock("acks:k2"), lock.AcquireRequest{Owner: "c", TTL: time.Second})
		return err == nil
	})
}

// BenchmarkReplicaAcks measures acquire latency with --replica-acks 0 and
// 1 on a master with one replica on loopback: p50 and p99 of the acquire
// of an acquire+release cycle.
func BenchmarkReplicaAcks(b *testing.B) {
	master := redistest.StartWith(b, nil, []string{"--repl-diskless-sync-delay", "0"})
	_, port, _ := strings.Cut(master.Addr, ":")
	replica := redistest.StartWith(b, nil, []string{"--replicaof", "127.0.0.1", port})
	rc := replica.Client(b)
	for {
		info, _ := rc.Info(context.Background(), "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, acks := range []int{0, 1} {
		b.Run("acks="+string(rune('0'+acks)), func(b *testing.B) {
			opts := &redis.Options{Addr: master.Addr}
			store.TuneClient(opts)
			rdb := redis.NewClient(opts)
			e := lock.New(rdb, lock.Options{ReplicaAcks: acks, ReplicaAckTimeout: time.Second})
			b.Cleanup(func() { _ = e.Close(); _ = rdb.Close() })
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				l, err := e.Acquire(ctx, lock.Lock("bench:acks"), lock.AcquireRequest{Owner: "b", TTL: 10 * time.Second})
				lat = append(lat, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := e.Release(ctx, lock.Lock("bench:acks"), l.Token, "b"); err != nil {
					b.Fatal(err)
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "acquire-p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "acquire-p99-µs")
		})
	}
}

// A lockd with replica acks that still talks to a master a failover has
// made a replica: an acquire of a held key writes nothing and runs there,
// but its WAIT is refused. That is 503 (ErrUnavailable), as a write's
// READONLY is, never an internal error (TestElectionsUnderFaults on
// Sentinel met it as a 500).
func TestReplicaAcksOnADemotedMaster(t *testing.T) {
	master := redistest.StartWith(t, nil, []string{"--repl-diskless-sync-delay", "0"})
	replica := startReplica(t, master)
	e := newEngine(t, master.Client(t))
	mustAcquire(t, e, lock.Lock("demoted:k"), lock.AcquireRequest{Owner: "holder", TTL: time.Minute})
	on := lock.New(tunedClient(t, replica), lock.Options{ReplicaAcks: 1, ReplicaAckTimeout: time.Second})
	t.Cleanup(func() { _ = on.Close() })
	waitFor(t, func() bool { return lock.LeaseToken(context.Background(), replica.Client(t), "demoted:k") != "" })
	for _, want := range []string{"x", "shared"} {
		req := lock.AcquireRequest{Owner: "b", TTL: time.Second}
		if want == "shared" {
			req.Mode = lock.Shared
		}
		_, err := on.Acquire(context.Background(), lock.Lock("demoted:k"), req)
		if !errors.Is(err, lock.ErrUnavailable) {
			t.Fatalf("acquire (%s) of a held key on a replica with acks: %v, want ErrUnavailable", want, err)
		}
	}
}

// A master made a replica (a failover) while the acquire's WAIT blocks:
// Redis cuts the WAIT short with UNBLOCKED. The grant it may have written
// has no acknowledgement: the answer is ErrUnavailable (503), as for too
// few acks, never the raw error (a 500; TestElectionsUnderFaults met it on
// Sentinel).
func TestReplicaAcksCutByDemotion(t *testing.T) {
	master := redistest.StartWith(t, nil, []string{"--repl-diskless-sync-delay", "0"})
	replica := startReplica(t, master)
	other := redistest.Start(t)
	e := lock.New(tunedClient(t, master), lock.Options{ReplicaAcks: 1, ReplicaAckTimeout: 10 * time.Second})
	t.Cleanup(func() { _ = e.Close() })
	// The script loaded (its first run answers NOSCRIPT and runs again).
	l := mustAcquire(t, e, lock.Lock("cut:warm"), lock.AcquireRequest{Owner: "o", TTL: time.Minute})
	if _, err := e.Release(context.Background(), lock.Lock("cut:warm"), l.Token, "t"); err != nil {
		t.Fatal(err)
	}
	// The replica stops acknowledging: the next WAIT blocks.
	replica.Pause()
	t.Cleanup(replica.Resume)
	done := make(chan error, 1)
	go func() {
		_, err := e.Acquire(context.Background(), lock.Lock("cut:k"), lock.AcquireRequest{Owner: "o", TTL: time.Minute})
		done <- err
	}()
	mc := master.Client(t)
	waitFor(t, func() bool {
		info, err := mc.Info(context.Background(), "clients").Result()
		return err == nil && !strings.Contains(info, "blocked_clients:0")
	})
	host, port, _ := strings.Cut(other.Addr, ":")
	if err := mc.ReplicaOf(context.Background(), host, port).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, lock.ErrUnavailable) || strings.Contains(err.Error(), "UNBLOCKED") {
			t.Fatalf("acquire whose WAIT a demotion cut short: %v, want ErrUnavailable for too few acks", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the acquire did not return after the demotion")
	}
}
