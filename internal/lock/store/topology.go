package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Node is one Redis server of the topology, as /readyz reports it.
type Node struct {
	Addr string
	Role string // "master" or "replica"
	Up   bool
}

// Topology says what the store runs on: "redis" (one server), "sentinel"
// or "cluster", and the nodes it sees.
type Topology struct {
	Kind  string
	Nodes []Node
}

// Topology reports the topology ("redis", "sentinel" or "cluster") and
// every node's role and reachability. A node that does not answer is
// listed as down, or (the sentinels or the cluster not answering) not at
// all.
func (s *Store) Topology(ctx context.Context) Topology {
	switch {
	case s.cluster != nil:
		t := Topology{Kind: "cluster"}
		text, err := s.cluster.ClusterNodes(ctx).Result()
		if err != nil {
			return t
		}
		// <id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> <slots…>
		for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
			f := strings.Fields(line)
			if len(f) < 8 {
				continue
			}
			addr, _, _ := strings.Cut(f[1], "@")
			flags := "," + f[2] + ","
			n := Node{Addr: addr, Role: "replica", Up: f[7] == "connected" && !strings.Contains(flags, ",fail")}
			if strings.Contains(flags, ",master,") {
				n.Role = "master"
			}
			t.Nodes = append(t.Nodes, n)
		}
		sortNodes(t.Nodes)
		return t
	case s.sentinel != nil:
		t := Topology{Kind: "sentinel"}
		master, err := masterAddr(ctx, s.sentinel)
		if err != nil {
			return t
		}
		t.Nodes = append(t.Nodes, Node{Addr: master, Role: "master", Up: s.rdb.Ping(ctx).Err() == nil})
		t.Nodes = append(t.Nodes, replicasOf(ctx, s.rdb)...)
		return t
	default:
		t := Topology{Kind: "redis"}
		addr := ""
		if c, ok := s.rdb.(*redis.Client); ok {
			addr = c.Options().Addr
		}
		n := Node{Addr: addr, Role: "master"}
		if role, err := s.rdb.Do(ctx, "ROLE").Slice(); err == nil && len(role) > 0 {
			n.Up = true
			if role[0] != "master" {
				n.Role = "replica"
			}
		}
		t.Nodes = append(t.Nodes, n)
		if n.Up && n.Role == "master" {
			t.Nodes = append(t.Nodes, replicasOf(ctx, s.rdb)...)
		}
		return t
	}
}

// replicasOf reads a master's replicas from INFO replication
// ("slave0:ip=…,port=…,state=online,…").
func replicasOf(ctx context.Context, c redis.Cmdable) []Node {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return nil
	}
	var out []Node
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "slave") || !strings.Contains(rest, "ip=") {
			continue
		}
		f := map[string]string{}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		out = append(out, Node{Addr: net.JoinHostPort(f["ip"], f["port"]), Role: "replica", Up: f["state"] == "online"})
	}
	return out
}

func sortNodes(ns []Node) {
	for i := 1; i < len(ns); i++ {
		for j := i; j > 0 && ns[j].Addr < ns[j-1].Addr; j-- {
			ns[j], ns[j-1] = ns[j-1], ns[j]
		}
	}
}

// masterAddr asks the sentinels, one after another, for the master.
func masterAddr(ctx context.Context, s *Sentinel) (string, error) {
	for _, a := range s.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{
			Addr: a, Username: s.Username, Password: s.Password,
			DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, MaxRetries: -1,
		})
		actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		addr, err := sc.GetMasterAddrByName(actx, s.MasterName).Result()
		cancel()
		_ = sc.Close()
		if err == nil && len(addr) == 2 {
			return net.JoinHostPort(addr[0], addr[1]), nil
		}
	}
	return "", fmt.Errorf("store: no sentinel answered for %s", s.MasterName)
}

// Writable checks that every master takes a write: a short-lived key on
// each, named by key from the hash tag of one of its slots (from "" on one
// server).
func (s *Store) Writable(ctx context.Context, key func(tag string) string) error {
	if s.cluster == nil {
		return s.rdb.Set(ctx, key(""), "1", 10*time.Second).Err()
	}
	shards, err := s.cluster.ClusterShards(ctx).Result()
	if err != nil {
		return err
	}
	owners := slotOwners(shards)
	if len(owners) == 0 {
		return errors.New("store: the cluster serves no slots")
	}
	seen := map[string]bool{}
	for _, o := range owners {
		if seen[o.addr] {
			continue
		}
		seen[o.addr] = true
		if err := s.cluster.Set(ctx, key(SlotTags()[o.start]), "1", 10*time.Second).Err(); err != nil {
			return fmt.Errorf("master %s: %w", o.addr, err)
		}
	}
	return nil
}

// Master is one master and the slots it owns.
type Master struct {
	Addr  string
	Node  redis.Scripter
	Slots []SlotRange // none: one server, which holds every key
}

// SlotRange is the Cluster slots from Start to End, both included.
type SlotRange struct{ Start, End int }

// Masters are the masters: the one server (or Sentinel's master) with no
// slots, or each Cluster master with the slot ranges it owns (CLUSTER
// SHARDS) and a client of it alone.
func (s *Store) Masters(ctx context.Context) ([]Master, error) {
	if s.cluster == nil {
		return []Master{{Node: s.rdb}}, nil
	}
	shards, err := s.cluster.ClusterShards(ctx).Result()
	if err != nil {
		return nil, err
	}
	nodes := map[string]*redis.Client{}
	var mu sync.Mutex
	err = s.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		nodes[c.Options().Addr] = c
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	byAddr := map[string]*Master{}
	var out []*Master
	for _, o := range slotOwners(shards) {
		c := nodes[o.addr]
		if c == nil {
			continue
		}
		m := byAddr[o.addr]
		if m == nil {
			m = &Master{Addr: o.addr, Node: c}
			byAddr[o.addr] = m
			out = append(out, m)
		}
		m.Slots = append(m.Slots, SlotRange{o.start, o.end})
	}
	masters := make([]Master, len(out))
	for i, m := range out {
		masters[i] = *m
	}
	return masters, nil
}
