package lock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Node is one Redis server behind lockd, as /readyz reports it.
type Node struct {
	Addr string
	Role string // "master" or "replica"
	Up   bool
}

// Topology says what lockd runs on: "redis" (one server), "sentinel" or
// "cluster", and the nodes it sees.
type Topology struct {
	Kind  string
	Nodes []Node
}

// Topology reports the topology and every node's role and reachability.
func (e *Engine) Topology(ctx context.Context) Topology {
	ctx, cancel := e.bound(ctx)
	defer cancel()
	return e.st.Topology(ctx)
}

func (s *redisStore) Topology(ctx context.Context) Topology {
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
	return "", fmt.Errorf("lock: no sentinel answered for %s", s.MasterName)
}

// Writable checks that every master takes a write: a short-lived key in a
// slot of each (one key on one server).
func (s *redisStore) Writable(ctx context.Context) error {
	if s.cluster == nil {
		return s.rdb.Set(ctx, readyKey, "1", 10*time.Second).Err()
	}
	shards, err := s.cluster.ClusterShards(ctx).Result()
	if err != nil {
		return err
	}
	owners := slotOwners(shards)
	if len(owners) == 0 {
		return errors.New("lock: the cluster serves no slots")
	}
	seen := map[string]bool{}
	for _, o := range owners {
		if seen[o.addr] {
			continue
		}
		seen[o.addr] = true
		key := keyPrefix + "{" + slotTags()[o.start] + "}:readyz"
		if err := s.cluster.Set(ctx, key, "1", 10*time.Second).Err(); err != nil {
			return fmt.Errorf("master %s: %w", o.addr, err)
		}
	}
	return nil
}
