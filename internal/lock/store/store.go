// Package store is lockd's Redis transport for one topology: one server,
// Sentinel or Cluster. It runs a script on the node that owns a key
// (following MOVED and ASK where go-redis does not), batches the scripts
// callers run at the same time into pipelines, keeps wake-up subscriptions
// on every master through failovers and slot migrations, walks every
// master's keys, and reports the nodes and their roles.
//
// It imports go-redis and nothing of lockd: it knows no key layout, no
// script and no lock. The names it must build (a wake-up channel per key, a
// key per master for Writable) are given to it. A quorum of independent
// masters (Redlock) is one Store per master, decided on above.
//
// Caveats. A Store does not own its client: Close stops what the store runs
// itself, and the caller closes the client. The client should be tuned as
// Tune says (no retries, bounded timeouts), or a retried script may run
// twice.
package store

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

// ErrClosed answers a call made after the store closed.
var ErrClosed = errors.New("store: closed")

// ScanPos is where a walk over every master stands: the master (by its
// place in the sorted list of masters, whose fingerprint is Topo) and
// SCAN's cursor on it. It travels in lockd's list cursors, as JSON.
type ScanPos struct {
	Node   int    `json:"n,omitempty"`
	Cursor uint64 `json:"s,omitempty"`
	Topo   string `json:"t,omitempty"`
	Done   bool   `json:"d,omitempty"`
}

// Sentinel names the sentinels that watch a master, so that the store's
// wake-up subscription follows a failover at once.
type Sentinel struct {
	Addrs      []string
	MasterName string
	Username   string
	Password   string
}

// Store is the transport over one go-redis client: a *redis.Client (one
// server, or Sentinel's failover client) or a *redis.ClusterClient. It is
// safe for concurrent use.
type Store struct {
	rdb      redis.UniversalClient
	cluster  *redis.ClusterClient // nil unless Cluster
	sentinel *Sentinel            // nil unless Sentinel
	batch    *batcher
	fns      *Functions // nil: every script runs with EVALSHA
}

// New returns a store on rdb and starts its batcher. sentinel names the
// sentinels when rdb is Sentinel's failover client (nil otherwise), so that
// wake-ups follow a failover at once. Close it to stop the batcher.
func New(rdb redis.UniversalClient, sentinel *Sentinel) *Store {
	s := &Store{rdb: rdb, sentinel: sentinel, batch: newBatcher(rdb)}
	if c, ok := rdb.(*redis.ClusterClient); ok {
		s.cluster = c
	}
	return s
}

// Run runs the script on the node that owns keys[0] (EVALSHA, EVAL on
// NOSCRIPT). Calls made at the same time may share one pipeline. After
// Close it answers ErrClosed.
func (s *Store) Run(ctx context.Context, sc *redis.Script, keys []string, args ...any) (any, error) {
	return s.batch.run(ctx, sc, keys, args)
}

// Close stops what the store runs itself; the client stays open.
func (s *Store) Close() { s.batch.close() }

// RunAcked is Run followed, on the same connection, by WAIT acks timeout:
// it also says how many replicas acknowledged the write. WAIT counts the
// replicas that acknowledged every write made on its connection, so it
// must follow the script on that same connection of the key's master;
// Redis refuses WAIT inside a script.
func (s *Store) RunAcked(ctx context.Context, sc *redis.Script, acks int, timeout time.Duration, keys []string, args ...any) (any, int, error) {
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
	return nil, 0, fmt.Errorf("store: too many redirections for %s", keys[0])
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
		if werr := wait.Err(); werr != nil && redis.HasErrorPrefix(werr, "UNBLOCKED") {
			// The master became a replica while WAIT blocked (a failover):
			// the script ran and may have written, and no replica is known
			// to have it. Its reply, with no acknowledgement, lets the
			// caller give a grant back; the error alone lost the reply and
			// answered 500.
			return script.Val(), 0, nil
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
		err = fmt.Errorf("store: no cluster node at %s", addr)
	}
	return found, err
}

// Pipelined sends fn's commands in as few round trips as the topology
// allows, each to the node that owns its first key.
func (s *Store) Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) error {
	_, err := s.rdb.Pipelined(ctx, fn)
	return err
}

// Load loads the script on every node, after NOSCRIPT in a pipeline.
func (s *Store) Load(ctx context.Context, sc *redis.Script) error {
	// A ClusterClient broadcasts SCRIPT LOAD to every shard.
	return sc.Load(ctx, s.rdb).Err()
}

// Cmd runs plain commands, each on the node that owns its key.
func (s *Store) Cmd() redis.Cmdable { return s.rdb }

// Sharded says whether the store is a Cluster: its keys live in slots
// (SlotOf), a script touches the keys of one slot, and wake-ups travel by
// sharded pub/sub (SPUBLISH).
func (s *Store) Sharded() bool { return s.cluster != nil }

// Ping checks that every master answers.
func (s *Store) Ping(ctx context.Context) error {
	if s.cluster != nil {
		return s.cluster.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.Ping(ctx).Err()
		})
	}
	return s.rdb.Ping(ctx).Err()
}

// Scan runs one SCAN step at pos and says where the walk goes on. A walk
// visits every master in turn; pos.Node counts them.
func (s *Store) Scan(ctx context.Context, pos ScanPos, match string, count int64) ([]string, ScanPos, error) {
	if s.cluster == nil {
		keys, next, err := s.rdb.Scan(ctx, pos.Cursor, match, count).Result()
		return keys, ScanPos{Cursor: next, Done: next == 0}, err
	}
	masters, topo, err := s.masters(ctx)
	if err != nil {
		return nil, pos, err
	}
	if pos.Topo != topo {
		// The masters changed since the walk began: SCAN's guarantees hold
		// per node, so the walk starts over on the new set.
		pos = ScanPos{Topo: topo}
	}
	if pos.Node >= len(masters) {
		return nil, ScanPos{Topo: topo, Done: true}, nil
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
func (s *Store) masters(ctx context.Context) ([]*redis.Client, string, error) {
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

// Subscribe opens a wake-up subscription, which tells l what it hears on
// the channels that names gives keys: on one server or Sentinel's master
// (following failovers), or on every Cluster master (following slot
// migrations). Close it before the store.
func (s *Store) Subscribe(names Channels, l Listener) Subscription {
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
