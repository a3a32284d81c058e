package lock_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lock/store"
	"github.com/lockd/lockd/internal/redistest"
)

// BenchmarkRedisCostPerOp measures what each operation costs Redis: the
// commands its script runs inside Redis and the µs of Redis CPU, from INFO
// commandstats (reset before each operation kind), so that a script change
// is judged by its Redis-side cost too. Run with -benchtime Nx.
func BenchmarkRedisCostPerOp(b *testing.B) {
	srv := redistest.Start(b)
	opts := &redis.Options{Addr: srv.Addr}
	store.TuneClient(opts)
	rdb := redis.NewClient(opts)
	admin := srv.Client(b)
	e := lock.New(rdb, lock.Options{})
	b.Cleanup(func() { _ = e.Close(); _ = rdb.Close() })
	ctx := context.Background()

	n := b.N
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "cost:" + strconv.Itoa(i)
	}
	leases := make([]lock.Lease, n)
	// measure runs ops operations through run and reports their cost.
	measureAll := func(name string, ops int, run func() error) {
		if err := admin.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		cpu0 := redistest.CPU(admin)
		if err := run(); err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		cpu := redistest.CPU(admin) - cpu0
		calls, usec, evals, per := redisCost(b, admin)
		// usec is wall time inside Redis, which a busy machine stretches;
		// the CPU time of redis-server (INFO cpu, all of it: the network
		// too) is the sturdier figure.
		b.ReportMetric(float64(cpu.Microseconds())/float64(ops), name+"-redis-cpu-µs/op")
		b.Logf("%s: %.1f commands/op: %s", name, float64(calls)/float64(ops), per)
		b.ReportMetric(float64(calls)/float64(ops), name+"-redis-cmds/op")
		b.ReportMetric(float64(usec)/float64(ops), name+"-redis-µs/op")
		b.ReportMetric(float64(evals)/float64(ops), name+"-round-trips/op")
	}
	measure := func(name string, op func(i int) error) {
		measureAll(name, n, func() error {
			for i := range n {
				if err := op(i); err != nil {
					return err
				}
			}
			return nil
		})
	}
	b.ResetTimer()
	measure("acquire", func(i int) (err error) {
		leases[i], err = e.Acquire(ctx, lock.Lock(keys[i]), lock.AcquireRequest{Owner: "b", TTL: time.Minute})
		return err
	})
	measure("renew", func(i int) error {
		_, err := e.Renew(ctx, lock.Lock(keys[i]), lock.RenewRequest{Token: leases[i].Token, TTL: 0, Actor: "b"})
		return err
	})
	measure("release", func(i int) error {
		_, err := e.Release(ctx, lock.Lock(keys[i]), leases[i].Token, "b")
		return err
	})
	// What a busy key costs: acquire and release of one key, again and
	// again (its history and fence exist), as in make bench.
	measure("cycle", func(i int) error {
		l, err := e.Acquire(ctx, lock.Lock("cost:cycle"), lock.AcquireRequest{Owner: "b", TTL: time.Minute})
		if err != nil {
			return err
		}
		_, err = e.Release(ctx, lock.Lock("cost:cycle"), l.Token, "b")
		return err
	})
	// A lock set of 4 keys, acquired uncontended, against 4 lone acquires
	// of as many keys (issue 31: at most twice their Redis cost): each op
	// takes 4 keys and gives them back, the give-back not measured.
	four := func(prefix string, i int) []string {
		return []string{prefix + strconv.Itoa(4*i), prefix + strconv.Itoa(4*i+1), prefix + strconv.Itoa(4*i+2), prefix + strconv.Itoa(4*i+3)}
	}
	var sets []lock.SetLease
	measure("4-acquires", func(i int) error {
		for _, k := range four("cost:four:", i) {
			l, err := e.Acquire(ctx, lock.Lock(k), lock.AcquireRequest{Owner: "b", TTL: time.Minute})
			if err != nil {
				return err
			}
			leases[i] = l
		}
		return nil
	})
	measure("set-4-acquire", func(i int) error {
		s, err := e.AcquireSet(ctx, lock.SetRequest{Keys: four("cost:set:", i), Owner: "b", TTL: time.Minute})
		sets = append(sets, s)
		return err
	})
	for _, s := range sets {
		if _, err := e.ReleaseSet(ctx, s.Token, "b"); err != nil {
			b.Fatal(err)
		}
	}
	// The same cycle from 32 callers at once, each on its own key, as in
	// make bench: their scripts share pipelines (store/batch.go), so this is what
	// a cycle costs Redis under load, with the network's share spread.
	const callers = 32
	per := max(1, n/callers)
	measureAll("cycle-32", per*callers, func() error {
		var g errgroup.Group
		for c := range callers {
			g.Go(func() error {
				key := "cost:par:" + strconv.Itoa(c)
				for range per {
					l, err := e.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "b", TTL: time.Minute})
					if err != nil {
						return err
					}
					if _, err := e.Release(ctx, lock.Lock(key), l.Token, "b"); err != nil {
						return err
					}
				}
				return nil
			})
		}
		return g.Wait()
	})
}

// BenchmarkCyclesOnRedis runs acquire+release cycles of the engine, one
// after another, on the Redis at $LOCKD_BENCH_REDIS (skipped without it):
// scripts/redis-instructions runs it against a redis-server under
// callgrind, which counts Redis's instructions per cycle the same
// whatever else the machine is doing. With $LOCKD_BENCH_CALLGRIND (the
// redis-server's pid) it turns callgrind's counting on for the cycles
// alone, after the engine's start and a warm-up (loading the functions,
// the first epoch read, each key's history), and dumps the count; then it
// counts an idle stretch as long as the cycles took, with the engine
// still running, and dumps that too: what Redis does every second
// whatever the load (its cron, the engine's epoch refresh and sweeps),
// which under callgrind's 50-fold slowdown would otherwise weigh on each
// cycle 50 times what it does at full speed.
func BenchmarkCyclesOnRedis(b *testing.B) {
	addr := os.Getenv("LOCKD_BENCH_REDIS")
	if addr == "" {
		b.Skip("LOCKD_BENCH_REDIS is not set")
	}
	opts := &redis.Options{Addr: addr}
	store.TuneClient(opts)
	// Under valgrind Redis runs some 50 times slower.
	opts.ReadTimeout, opts.WriteTimeout = 30*time.Second, 30*time.Second
	rdb := redis.NewClient(opts)
	e := lock.New(rdb, lock.Options{CallTimeout: time.Minute})
	b.Cleanup(func() { _ = e.Close(); _ = rdb.Close() })
	ctx := context.Background()
	cycle := func(i int) {
		key := "cost:cg:" + strconv.Itoa(i%32)
		l, err := e.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "b", TTL: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.Release(ctx, lock.Lock(key), l.Token, "b"); err != nil {
			b.Fatal(err)
		}
	}
	pid := os.Getenv("LOCKD_BENCH_CALLGRIND")
	if pid == "" {
		for i := range b.N {
			cycle(i)
		}
		return
	}
	for i := range 64 {
		cycle(i)
	}
	callgrind(b, "-i", "on", pid)
	start := time.Now()
	for i := range b.N {
		cycle(i)
	}
	took := time.Since(start)
	callgrind(b, "-i", "off", pid)
	callgrind(b, "-d", "cycles", pid)
	callgrind(b, "-i", "on", pid)
	time.Sleep(took)
	callgrind(b, "-i", "off", pid)
	callgrind(b, "-d", "idle", pid)
}

// callgrind runs callgrind_control with args.
func callgrind(b *testing.B, args ...string) {
	b.Helper()
	if out, err := exec.Command("callgrind_control", args...).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control %v: %v: %s", args, err, out)
	}
}

// redisCost sums INFO commandstats: the commands Redis ran inside the
// scripts, the µs of the EVAL/EVALSHA/FCALL calls (their inner commands
// included), and the EVAL/EVALSHA/FCALL calls themselves (the round trips). The
// measurement's own INFO and CONFIG calls are left out.
func redisCost(b *testing.B, admin *redis.Client) (inner, usec, evals int64, per string) {
	b.Helper()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		cmd := strings.TrimPrefix(name, "cmdstat_")
		if cmd == "info" || strings.HasPrefix(cmd, "config") || strings.HasPrefix(cmd, "function") {
			continue
		}
		f := map[string]float64{}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			f[k], _ = strconv.ParseFloat(v, 64)
		}
		if cmd == "evalsha" || cmd == "eval" || cmd == "fcall" {
			evals += int64(f["calls"])
			usec += int64(f["usec"])
		} else {
			inner += int64(f["calls"])
			per += fmt.Sprintf(" %s=%.0f(%.1fµs)", cmd, f["calls"], f["usec_per_call"])
		}
	}
	return inner, usec, evals, per
}

// BenchmarkMemoryPerUsedKey measures what a key locked once leaves in Redis
// after its release, with the default retention: 10,000 acquire+release
// pairs on distinct keys (the per-entity keys such as order:pay:12345 that
// are the common case), then MEMORY USAGE of every per-key Redis key they
// left, divided by the keys locked. The bucket's shared keys (event
// stream, expiry schedule, epoch marker) are reported apart: they are
// capped or emptied, whatever the number of keys.
func BenchmarkMemoryPerUsedKey(b *testing.B) {
	srv := redistest.Start(b)
	opts := &redis.Options{Addr: srv.Addr}
	store.TuneClient(opts)
	rdb := redis.NewClient(opts)
	admin := srv.Client(b)
	e := lock.New(rdb, lock.Options{})
	b.Cleanup(func() { _ = e.Close(); _ = rdb.Close() })
	ctx := context.Background()
	const n = 10000
	// One fill whatever b.N: the figure is per key, not per iteration.
	{
		var g errgroup.Group
		g.SetLimit(32)
		for i := range n {
			g.Go(func() error {
				key := "order:pay:" + strconv.Itoa(100000+i)
				l, err := e.Acquire(ctx, lock.Lock(key), lock.AcquireRequest{Owner: "worker-7", TTL: 30 * time.Second})
				if err != nil {
					return err
				}
				_, err = e.Release(ctx, lock.Lock(key), l.Token, "worker-7")
				return err
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	var perKey, shared, keys int64
	iter := admin.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		used, err := admin.MemoryUsage(ctx, iter.Val(), 0).Result()
		if err != nil {
			b.Fatal(err)
		}
		keys++
		if strings.Contains(iter.Val(), "{order:pay:") {
			perKey += used
		} else {
			shared += used
		}
	}
	if err := iter.Err(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(perKey)/n, "bytes/used-key")
	b.ReportMetric(float64(keys)/n, "redis-keys/used-key")
	b.Logf("%d keys locked once: %d bytes in their own Redis keys (%.0f each), %d in the bucket's shared keys", n, perKey, float64(perKey)/n, shared)
}
