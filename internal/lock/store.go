package lock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// store is what the lock semantics (scripts, fences, history, waiting) need
// from Redis: run a script on the node that owns a key, hear wake-ups from
// every master, and walk every master's keys. redisStore implements it for
// one server, Sentinel and Cluster; a quorum of independent masters would be
// another implementation.
type store interface {
	// Run runs the script on the node that owns keys[0] (EVALSHA, EVAL on
	// NOSCRIPT). Calls made at the same time may share one pipeline.
	Run(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error)
	// Pipelined sends fn's commands in as few round trips as the topology
	// allows, each to the node that owns its first key.
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) error
	// Load loads the script on every node, after NOSCRIPT in a pipeline.
	Load(ctx context.Context, s *redis.Script) error
	// Scan runs one SCAN step at pos and says where the walk goes on. A
	// walk visits every master in turn; pos.Node counts them.
	Scan(ctx context.Context, pos scanPos, match string, count int64) ([]string, scanPos, error)
	// RunAcked is Run followed, on the same connection, by WAIT acks
	// timeout: it also says how many replicas acknowledged the write.
	RunAcked(ctx context.Context, s *redis.Script, acks int, timeout time.Duration, keys []string, args ...any) (any, int, error)
	// Cmd runs plain commands, each on the node that owns its key.
	Cmd() redis.Cmdable
	// Subscribe opens this process's wake-up subscription, which tells l
	// what it hears on the channels that names gives keys.
	Subscribe(names channels, l listener) subscription
	// Sharded says whether wake-ups travel by sharded pub/sub (SPUBLISH).
	Sharded() bool
	Ping(ctx context.Context) error
	// Writable checks that every master takes a write.
	Writable(ctx context.Context) error
	// Topology reports the nodes and their roles.
	Topology(ctx context.Context) Topology
	// Close stops what the store runs itself; the client stays open.
	Close()
}

// scanPos is where a walk over every master stands: the master (by its
// place in the sorted list of masters, whose fingerprint is Topo) and
// SCAN's cursor on it.
type scanPos struct {
	Node   int    `json:"n,omitempty"`
	Cursor uint64 `json:"s,omitempty"`
	Topo   string `json:"t,omitempty"`
	Done   bool   `json:"d,omitempty"`
}

// Sentinel names the sentinels that watch a master, so that lockd can
// follow failovers with its wake-up subscription.
type Sentinel struct {
	Addrs      []string
	MasterName string
	Username   string
	Password   string
}

// redisStore is a store over one go-redis client: a *redis.Client (one
// server, or Sentinel's failover client) or a *redis.ClusterClient.
type redisStore struct {
	rdb      redis.UniversalClient
	cluster  *redis.ClusterClient // nil unless Cluster
	sentinel *Sentinel            // nil unless Sentinel
	batch    *batcher
}

func newRedisStore(rdb redis.UniversalClient, sentinel *Sentinel) *redisStore {
	s := &redisStore{rdb: rdb, sentinel: sentinel, batch: newBatcher(rdb)}
	if c, ok := rdb.(*redis.ClusterClient); ok {
		s.cluster = c
	}
	return s
}

func (s *redisStore) Run(ctx context.Context, sc *redis.Script, keys []string, args ...any) (any, error) {
	return s.batch.run(ctx, sc, keys, args)
}

func (s *redisStore) Close() { s.batch.close() }

// RunAcked pipelines the script and WAIT on one connection of the key's
// master: WAIT counts the replicas that acknowledged every write made on
// its connection, so it must follow the script on that same connection.
// Redis refuses WAIT inside a script.
func (s *redisStore) RunAcked(ctx context.Context, sc *redis.Script, acks int, timeout time.Duration, keys []string, args ...any) (any, int, error) {
	if s.cluster == nil {
		return runAcked(ctx, s.rdb, false, sc, acks, timeout, keys, args...)
	}
	// Outside go-redis's cluster routing, a MOVED or ASK (a failover or a
	// slot migration that its slot map has not caught up with) is followed
	// here, to the node it names.
	node, err := s.cluster.MasterForKey(ctx, keys[0])
	if err != nil {
		return nil, 0, err
	}
	asking := false
	for range 3 {
		v, n, err := runAcked(ctx, node, asking, sc, acks, timeout, keys, args...)
		addr, ask, redirected := redirect(err)
		if !redirected {
			return v, n, err
		}
		s.cluster.ReloadState(ctx)
		if node, err = clusterNode(ctx, s.cluster, addr); err != nil {
			return nil, 0, err
		}
		asking = ask
	}
	return nil, 0, fmt.Errorf("lock: too many redirections for %s", keys[0])
}

// runAcked pipelines the script and WAIT on one connection of c (after
// ASKING when a migrating slot's target must take the command).
func runAcked(ctx context.Context, c redis.Cmdable, asking bool, sc *redis.Script, acks int, timeout time.Duration, keys []string, args ...any) (any, int, error) {
	run := func(load bool) (any, int, error) {
		var script, wait *redis.Cmd
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			if asking {
				p.Do(ctx, "asking")
			}
			if load {
				script = sc.Eval(ctx, p, keys, args...)
			} else {
				script = sc.EvalSha(ctx, p, keys, args...)
			}
			wait = p.Do(ctx, "wait", acks, timeout.Milliseconds())
			return nil
		})
		if err := script.Err(); err != nil {
			return nil, 0, err
		}
		if err != nil {
			return nil, 0, err
		}
		n, err := wait.Int()
		return script.Val(), n, err
	}
	v, n, err := run(false)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		v, n, err = run(true)
	}
	return v, n, err
}

// redirect reads a MOVED or ASK error: the node to go to, and whether it
// was ASK.
func redirect(err error) (addr string, ask, ok bool) {
	if err == nil {
		return "", false, false
	}
	msg := err.Error()
	for _, p := range []string{"MOVED ", "ASK "} {
		if rest, found := strings.CutPrefix(msg, p); found {
			if _, a, found := strings.Cut(rest, " "); found {
				return a, p == "ASK ", true
			}
		}
	}
	return "", false, false
}

// clusterNode is go-redis's client of the cluster node at addr.
func clusterNode(ctx context.Context, c *redis.ClusterClient, addr string) (*redis.Client, error) {
	var found *redis.Client
	var mu sync.Mutex
	err := c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
		if n.Options().Addr == addr {
			mu.Lock()
			found = n
			mu.Unlock()
		}
		return nil
	})
	if err == nil && found == nil {
		err = fmt.Errorf("lock: no cluster node at %s", addr)
	}
	return found, err
}

func (s *redisStore) Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) error {
	_, err := s.rdb.Pipelined(ctx, fn)
	return err
}

func (s *redisStore) Load(ctx context.Context, sc *redis.Script) error {
	// A ClusterClient broadcasts SCRIPT LOAD to every shard.
	return sc.Load(ctx, s.rdb).Err()
}

func (s *redisStore) Cmd() redis.Cmdable { return s.rdb }

func (s *redisStore) Sharded() bool { return s.cluster != nil }

func (s *redisStore) Ping(ctx context.Context) error {
	if s.cluster != nil {
		return s.cluster.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.Ping(ctx).Err()
		})
	}
	return s.rdb.Ping(ctx).Err()
}

func (s *redisStore) Scan(ctx context.Context, pos scanPos, match string, count int64) ([]string, scanPos, error) {
	if s.cluster == nil {
		keys, next, err := s.rdb.Scan(ctx, pos.Cursor, match, count).Result()
		return keys, scanPos{Cursor: next, Done: next == 0}, err
	}
	masters, topo, err := s.masters(ctx)
	if err != nil {
		return nil, pos, err
	}
	if pos.Topo != topo {
		// The masters changed since the walk began: SCAN's guarantees hold
		// per node, so the walk starts over on the new set.
		pos = scanPos{Topo: topo}
	}
	if pos.Node >= len(masters) {
		return nil, scanPos{Topo: topo, Done: true}, nil
	}
	keys, next, err := masters[pos.Node].Scan(ctx, pos.Cursor, match, count).Result()
	if err != nil {
		return nil, pos, err
	}
	pos.Cursor = next
	if next == 0 {
		pos.Node++
	}
	pos.Done = pos.Node >= len(masters)
	return keys, pos, nil
}

// masters are the cluster's masters sorted by address, and a fingerprint
// of that list.
func (s *redisStore) masters(ctx context.Context) ([]*redis.Client, string, error) {
	var mu sync.Mutex
	byAddr := map[string]*redis.Client{}
	err := s.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		byAddr[c.Options().Addr] = c
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	addrs := make([]string, 0, len(byAddr))
	for a := range byAddr {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	out := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		out[i] = byAddr[a]
	}
	return out, strings.Join(addrs, ","), nil
}

func (s *redisStore) Subscribe(names channels, l listener) subscription {
	if s.cluster != nil {
		return newClusterSubscription(s.cluster, names, l)
	}
	if c, ok := s.rdb.(*redis.Client); ok && s.sentinel != nil {
		return newSentinelSubscription(c, s.sentinel, names, l)
	}
	return newNodeSubscription(s.rdb, names, l)
}

// slotOwner is one range of slots and the address of its master.
type slotOwner struct {
	start, end int
	addr       string
}

// slotOwners reads CLUSTER SHARDS: every slot range and its master.
func slotOwners(shards []redis.ClusterShard) []slotOwner {
	var out []slotOwner
	for _, sh := range shards {
		addr := ""
		for _, n := range sh.Nodes {
			if n.Role == "master" && n.Health != "fail" {
				addr = net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
			}
		}
		if addr == "" {
			continue
		}
		for _, r := range sh.Slots {
			out = append(out, slotOwner{int(r.Start), int(r.End), addr})
		}
	}
	return out
}

func isTimeout(err error) bool {
	var nerr net.Error
	return errors.As(err, &nerr) && nerr.Timeout()
}
