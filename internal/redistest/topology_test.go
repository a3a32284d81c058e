package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// The two topologies are formed once each, by two tests that run side by
// side; their steps run in order as subtests on the same processes, as a
// package sharing a topology from TestMain would use it.

func TestKeySlot(t *testing.T) {
	// Reference values from the Redis Cluster specification and
	// CLUSTER KEYSLOT; the cluster test checks more against the server.
	for key, want := range map[string]int{
		"":                      0,
		"123456789":             0x31C3 % 16384,
		"foo":                   12182,
		"{user1000}.following":  KeySlot("user1000"),
		"a{b}c{d}":              KeySlot("b"),
		"lockd:{tenant-1}:lock": KeySlot("tenant-1"),
	} {
		if got := KeySlot(key); got != want {
			t.Errorf("KeySlot(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	s := StartSentinel(t)
	t.Logf("sentinel topology formed in %v", time.Since(start).Round(time.Millisecond))

	c := s.Client()
	defer c.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%v\n%s", err, s.Logs())
		}
	}
	// replicated writes key through the Sentinels and waits until the
	// replica has it, so that a failover cannot lose it.
	replicated := func(key string) {
		t.Helper()
		must(c.Set(ctx, key, "v", 0).Err())
		n, err := c.Wait(ctx, 1, 2*time.Second).Result()
		must(err)
		if n != 1 {
			t.Fatalf("WAIT 1 = %d", n)
		}
	}

	t.Run("Forms", func(t *testing.T) {
		master, err := s.MasterAddr(ctx)
		must(err)
		replica, err := s.ReplicaAddr(ctx)
		must(err)
		if master == replica {
			t.Fatalf("master and replica are both %s", master)
		}
		want := "redis-sentinel://" + strings.Join(s.SentinelAddrs(), ",") + "/lockd"
		if s.URL() != want || len(s.SentinelAddrs()) != 3 || s.MasterName() != "lockd" {
			t.Fatalf("URL %s, want %s", s.URL(), want)
		}
		replicated("formed")
	})

	t.Run("PauseReplica", func(t *testing.T) {
		must(c.Set(ctx, "paused", "v", 0).Err())
		must(s.PauseReplica())
		n, err := c.Wait(ctx, 1, 200*time.Millisecond).Result()
		must(err)
		must(s.ResumeReplica())
		if n != 0 {
			t.Fatalf("WAIT 1 with the replica paused = %d, want 0", n)
		}
		replicated("resumed")
	})

	t.Run("Failover", func(t *testing.T) {
		replicated("before-failover")
		old, err := s.MasterAddr(ctx)
		must(err)
		began := time.Now()
		took, err := s.Failover(ctx)
		must(err)
		t.Logf("SENTINEL FAILOVER: new master named and serving in %v; ready again in %v",
			took.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
		now, err := s.MasterAddr(ctx)
		must(err)
		replica, err := s.ReplicaAddr(ctx)
		must(err)
		if now == old || replica != old {
			t.Fatalf("after failover master %s, replica %s; before, master %s", now, replica, old)
		}
		if v, err := c.Get(ctx, "before-failover").Result(); err != nil || v != "v" {
			t.Fatalf("key after failover: %q, %v", v, err)
		}
		replicated("after-failover")
	})

	t.Run("SwitchMaster and Demote", func(t *testing.T) {
		replicated("before-switch")
		old, took, err := s.SwitchMaster(ctx)
		must(err)
		t.Logf("SENTINEL FAILOVER, old master left alone: new master named and serving in %v", took.Round(time.Millisecond))
		now, err := s.MasterAddr(ctx)
		must(err)
		if now == old {
			t.Fatalf("master still %s", old)
		}
		// As Sentinel leaves it: a second master, whose subscribers hear
		// nothing published on the new one.
		oc := s.NodeClient(old)
		defer oc.Close()
		must(checkRole(ctx, oc, "master", ""))
		ps := oc.Subscribe(ctx, "switch")
		defer ps.Close()
		_, err = ps.Receive(ctx)
		must(err)
		nc := s.NodeClient(now)
		defer nc.Close()
		n, err := nc.Publish(ctx, "switch", "m").Result()
		must(err)
		if n != 0 {
			t.Fatalf("a publish on the new master reached %d subscribers of the old one", n)
		}
		must(s.Demote(ctx, old))
		// Demote closed the old master's client connections, as Sentinel does.
		if _, err := ps.ReceiveTimeout(ctx, 2*time.Second); err == nil {
			t.Fatal("the old master's subscriber was not disconnected")
		}
		replica, err := s.ReplicaAddr(ctx)
		must(err)
		if replica != old {
			t.Fatalf("replica %s, want the old master %s", replica, old)
		}
		replicated("after-demote")
	})

	t.Run("KillMaster", func(t *testing.T) {
		replicated("before-kill")
		old, err := s.MasterAddr(ctx)
		must(err)
		began := time.Now()
		took, err := s.KillMaster(ctx)
		must(err)
		t.Logf("kill -9 master: replica promoted in %v; old master back as replica, ready in %v",
			took.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
		// KillMaster saw the replica promoted. Under load the Sentinels may
		// then fail over once more, back to the restarted node (they marked
		// the new master down when it missed a second of pings): one master
		// and one replica either way.
		now, err := s.MasterAddr(ctx)
		must(err)
		replica, err := s.ReplicaAddr(ctx)
		must(err)
		if now == replica || (now != old && replica != old) {
			t.Fatalf("after kill master %s, replica %s; before, master %s", now, replica, old)
		}
		if now == old {
			t.Logf("the Sentinels failed over again, back to the restarted %s", old)
		}
		if v, err := c.Get(ctx, "before-kill").Result(); err != nil || v != "v" {
			t.Fatalf("key after kill: %q, %v", v, err)
		}
		replicated("after-kill") // the restarted node replicates again
	})
}

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	cl := StartCluster(t)
	t.Logf("cluster formed in %v", time.Since(start).Round(time.Millisecond))

	c := cl.Client()
	defer c.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%v\n%s", err, cl.Logs())
		}
	}
	// replicated writes key on its master and waits until the master's
	// replica has it, so that a failover cannot lose it.
	replicated := func(key string) {
		t.Helper()
		master, err := cl.MasterForSlot(ctx, KeySlot(key))
		must(err)
		mc := cl.NodeClient(master)
		defer mc.Close()
		must(mc.Set(ctx, key, "v", 0).Err())
		n, err := mc.Wait(ctx, 1, 2*time.Second).Result()
		must(err)
		if n != 1 {
			t.Fatalf("WAIT 1 on %s = %d", master, n)
		}
	}
	const key = "{harness}k" // every step works on this key's slot
	slot := KeySlot(key)

	t.Run("Forms", func(t *testing.T) {
		if len(cl.Addrs()) != 6 || cl.URL() != "redis-cluster://"+strings.Join(cl.Addrs(), ",") {
			t.Fatalf("Addrs %v, URL %s", cl.Addrs(), cl.URL())
		}
		masters := map[string]bool{}
		for _, s := range []int{0, 8000, 16383} {
			m, err := cl.MasterForSlot(ctx, s)
			must(err)
			masters[m] = true
		}
		if len(masters) != 3 {
			t.Fatalf("slots 0, 8000, 16383 are served by %v, want 3 masters", masters)
		}
		for _, k := range []string{"foo", key, "{user1000}.following", "a{b}c{d}", "foo{}{bar}", "foo{{bar}}zap", "{bar", "}{x}", ""} {
			want, err := c.ClusterKeySlot(ctx, k).Result()
			must(err)
			if got := KeySlot(k); int64(got) != want {
				t.Errorf("KeySlot(%q) = %d, CLUSTER KEYSLOT = %d", k, got, want)
			}
		}
		replicated(key)
	})

	t.Run("PauseReplica", func(t *testing.T) {
		master, err := cl.MasterForSlot(ctx, slot)
		must(err)
		mc := cl.NodeClient(master)
		defer mc.Close()
		must(cl.PauseReplicaOf(master))
		must(mc.Set(ctx, key, "paused", 0).Err())
		n, err := mc.Wait(ctx, 1, 200*time.Millisecond).Result()
		must(err)
		must(cl.ResumeReplicaOf(master))
		if n != 0 {
			t.Fatalf("WAIT 1 with the replica paused = %d, want 0", n)
		}
		replicated(key)
	})

	t.Run("MigrateSlot", func(t *testing.T) {
		from, err := cl.MasterForSlot(ctx, slot)
		must(err)
		// Some keys of the slot, more than one GETKEYSINSLOT batch.
		keys := []string{key}
		for i := range 150 {
			k := fmt.Sprintf("{harness}%d", i)
			must(c.Set(ctx, k, i, 0).Err())
			keys = append(keys, k)
		}
		to, err := cl.MasterForSlot(ctx, (slot+8000)%16384)
		must(err)
		if to == from {
			t.Fatalf("slots %d and %d on the same master", slot, (slot+8000)%16384)
		}
		began := time.Now()
		must(cl.MigrateSlot(ctx, slot, to))
		t.Logf("slot %d with %d keys migrated in %v", slot, len(keys), time.Since(began).Round(time.Millisecond))
		if now, err := cl.MasterForSlot(ctx, slot); err != nil || now != to {
			t.Fatalf("slot %d served by %s (%v), want %s", slot, now, err, to)
		}
		tc := cl.NodeClient(to)
		defer tc.Close()
		n, err := tc.Exists(ctx, keys...).Result()
		must(err)
		if n != int64(len(keys)) {
			t.Fatalf("%d of %d keys on the new master", n, len(keys))
		}
		fc := cl.NodeClient(from)
		defer fc.Close()
		if n, err := fc.ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || n != 0 {
			t.Fatalf("%d keys left on the old master (%v)", n, err)
		}
		must(cl.MigrateSlot(ctx, slot, to)) // to its own master: nothing to do
		replicated(key)
	})

	t.Run("Failover", func(t *testing.T) {
		replicated(key)
		old, err := cl.MasterForSlot(ctx, slot)
		must(err)
		began := time.Now()
		took, err := cl.Failover(ctx, old)
		must(err)
		t.Logf("CLUSTER FAILOVER: all nodes agree on the new master in %v; ready again in %v",
			took.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
		now, err := cl.MasterForSlot(ctx, slot)
		must(err)
		if now == old {
			t.Fatalf("slot %d still on %s", slot, old)
		}
		if v, err := c.Get(ctx, key).Result(); err != nil || v != "v" {
			t.Fatalf("key after failover: %q, %v", v, err)
		}
		replicated(key)
		assertReplicaOf(ctx, t, cl, old, now)
	})

	t.Run("KillMaster", func(t *testing.T) {
		replicated(key)
		old, err := cl.MasterForSlot(ctx, slot)
		must(err)
		began := time.Now()
		took, err := cl.KillMaster(ctx, old)
		must(err)
		t.Logf("kill -9 master: replica promoted, cluster_state ok everywhere in %v; old master rejoined as replica, ready in %v",
			took.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
		now, err := cl.MasterForSlot(ctx, slot)
		must(err)
		if now == old {
			t.Fatalf("slot %d still on %s", slot, old)
		}
		if v, err := c.Get(ctx, key).Result(); err != nil || v != "v" {
			t.Fatalf("key after kill: %q, %v", v, err)
		}
		replicated(key) // the rejoined node replicates again
		assertReplicaOf(ctx, t, cl, old, now)
	})
}

// assertReplicaOf checks with the node's own INFO that it replicates master.
func assertReplicaOf(ctx context.Context, t *testing.T, cl *Cluster, replica, master string) {
	t.Helper()
	rc := cl.NodeClient(replica)
	defer rc.Close()
	info, err := rc.Info(ctx, "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	got := net.JoinHostPort(infoField(info, "master_host"), infoField(info, "master_port"))
	if infoField(info, "role") != "slave" || got != master {
		t.Fatalf("%s: role %s of %s, want replica of %s", replica, infoField(info, "role"), got, master)
	}
}

func TestFreePortsWithBus(t *testing.T) {
	ports, err := freePorts(6, true)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] || p+10000 > 65535 {
			t.Fatalf("ports %v", ports)
		}
		seen[p] = true
	}
}

// A port found free can be taken before redis-server binds it. What
// answers on it then is another process, which the harness must not take
// for its own: CI once formed a cluster with another package's Redis in it.
func TestTakenPortIsNoticed(t *testing.T) {
	other := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("node", func(t *testing.T) {
		n, err := newNode(t.TempDir(), other.port, "redis.log")
		if err != nil {
			t.Fatal(err)
		}
		defer n.kill()
		err = n.start(ctx, dataNodeArgs(n, ""))
		if !errors.Is(err, errPortTaken) {
			t.Fatalf("start on a taken port: %v, want errPortTaken", err)
		}
	})
	t.Run("server", func(t *testing.T) {
		s := &Server{port: other.port, Addr: other.Addr, dir: t.TempDir(), tb: t,
			listen: other.listen, ping: defaultPing}
		defer s.Stop()
		if err := s.start(); !errors.Is(err, errPortTaken) {
			t.Fatalf("start on a taken port: %v, want errPortTaken", err)
		}
	})
	if err := defaultPing(other.Addr); err != nil {
		t.Fatalf("the Redis that held the port is hurt: %v", err)
	}
}

func TestOnFreshPortsRetriesOnlyTakenPorts(t *testing.T) {
	for _, tc := range []struct {
		errs      []error
		wantCalls int
		wantErr   error
	}{
		{errs: []error{nil}, wantCalls: 1},
		{errs: []error{errPortTaken, nil}, wantCalls: 2},
		{errs: []error{errPortTaken, errPortTaken, errPortTaken}, wantCalls: portAttempts, wantErr: errPortTaken},
		{errs: []error{errNoRedis}, wantCalls: 1, wantErr: errNoRedis},
	} {
		calls := 0
		_, err := onFreshPorts(func() (int, error) {
			calls++
			if err := tc.errs[calls-1]; err != nil {
				return 0, fmt.Errorf("form: %w", err)
			}
			return calls, nil
		})
		if calls != tc.wantCalls || !errors.Is(err, tc.wantErr) {
			t.Errorf("errors %v: %d calls, err %v; want %d calls, err %v", tc.errs, calls, err, tc.wantCalls, tc.wantErr)
		}
	}
}
