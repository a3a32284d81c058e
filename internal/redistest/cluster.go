package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of three masters, each with one replica
// (cluster-node-timeout 2000 ms, no persistence), on free loopback ports
// and owned by the harness. Masters and replicas trade places with
// Failover and KillMaster. Its methods are not safe for concurrent use.
type Cluster struct {
	nodes  []*node // in the order of Addrs
	cs     clients
	paused map[string]*node // replicas stopped by PauseReplicaOf, by their master's address
	// replaced is when each master, by address, was last replaced by its
	// replica through Failover or KillMaster (see Failover).
	replaced map[string]time.Time

	closeOnce sync.Once
}

// StartCluster forms a Cluster in the test's temporary directory and closes
// it when the test ends. It fails the test if that fails.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	c, err := NewCluster(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// NewCluster forms a Cluster with its files under dir, for a TestMain that
// shares one cluster between a package's tests; the caller must Close it.
// It returns when Ready would.
func NewCluster(dir string) (*Cluster, error) {
	if err := checkRedisServer(); err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, fmt.Errorf("redis-cli is not on PATH; it forms the cluster (Debian: apt-get install -y redis-tools)")
	}
	return onFreshPorts(func() (*Cluster, error) { return formCluster(dir) })
}

func formCluster(dir string) (*Cluster, error) {
	// Each node also listens on its cluster bus port, port+10000.
	ports, err := freePorts(6, true)
	if err != nil {
		return nil, err
	}
	c := &Cluster{paused: map[string]*node{}, replaced: map[string]time.Time{}}
	for _, p := range ports {
		n, err := newNode(filepath.Join(dir, fmt.Sprintf("cluster-%d", p)), p, "redis.log")
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), formTimeout)
	defer cancel()
	if err := c.form(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) form(ctx context.Context) error {
	for _, n := range c.nodes {
		if err := n.start(ctx, clusterNodeArgs(n)); err != nil {
			return err
		}
	}
	// redis-cli assigns the slots, pairs replicas with masters and waits
	// until the nodes have met (it polls once a second).
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redis-cli --cluster create: %v\n%s\n%s", err, out, c.Logs())
	}
	return c.Ready(ctx)
}

// clusterNodeArgs are a node's arguments. Its nodes.conf, in its own
// directory, lets a killed node rejoin with its identity; without
// persistence it rejoins empty. No diskless-sync delay: a replica is in sync
// within milliseconds rather than 5 s.
func clusterNodeArgs(n *node) []string {
	return []string{"--port", strconv.Itoa(n.port), "--bind", "127.0.0.1",
		"--dir", n.dir, "--logfile", n.logfile,
		"--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0",
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "2000"}
}

// Close kills every node. It may be called more than once.
func (c *Cluster) Close() {
	c.closeOnce.Do(func() {
		for _, n := range c.nodes {
			n.kill()
		}
		c.cs.close()
	})
}

// Addrs are the host:port addresses of all six nodes, masters and replicas,
// usable as seeds.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.addr
	}
	return addrs
}

// URL is the cluster's redis-cluster:// address for lockd, with every node
// as a seed: redis-cluster://127.0.0.1:p1,127.0.0.1:p2,…
func (c *Cluster) URL() string {
	return "redis-cluster://" + strings.Join(c.Addrs(), ",")
}

// Client returns a go-redis cluster client seeded with every node; the
// caller closes it.
func (c *Cluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
}

// NodeClient returns a plain client of one node, by address; the caller
// closes it.
func (c *Cluster) NodeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr})
}

// Logs is the end of every node's log, for a failing test to print.
func (c *Cluster) Logs() string {
	var b strings.Builder
	for _, n := range c.nodes {
		b.WriteString(n.tail())
	}
	return b.String()
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id     string
	addr   string // host:port, without the bus port
	flags  []string
	master string   // the master's ID for a replica, "-" for a master
	slots  []string // "a-b" or "a"; "[s->-id]" and "[s-<-id]" mark a migration
}

func (n clusterNode) is(flag string) bool { return slices.Contains(n.flags, flag) }

func (n clusterNode) owns(slot int) bool {
	for _, r := range n.slots {
		if strings.HasPrefix(r, "[") {
			continue
		}
		lo, hi, found := strings.Cut(r, "-")
		if !found {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 == nil && err2 == nil && a <= slot && slot <= b {
			return true
		}
	}
	return false
}

func parseClusterNodes(text string) ([]clusterNode, error) {
	var out []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("cluster nodes: bad line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		out = append(out, clusterNode{id: f[0], addr: addr, flags: strings.Split(f[2], ","), master: f[3], slots: f[8:]})
	}
	return out, nil
}

// view is one node's CLUSTER NODES, parsed.
func (c *Cluster) view(ctx context.Context, n *node) ([]clusterNode, error) {
	text, err := c.cs.get(n.addr).ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("%s: cluster nodes: %w", n.addr, err)
	}
	return parseClusterNodes(text)
}

// anyView is the view of the first node that answers.
func (c *Cluster) anyView(ctx context.Context) ([]clusterNode, error) {
	var errs []string
	for _, n := range c.nodes {
		if !n.live() {
			continue
		}
		v, err := c.view(ctx, n)
		if err == nil {
			return v, nil
		}
		errs = append(errs, err.Error())
	}
	return nil, fmt.Errorf("no node answered: %s", strings.Join(errs, "; "))
}

func (c *Cluster) nodeAt(addr string) (*node, error) {
	for _, n := range c.nodes {
		if n.addr == addr {
			return n, nil
		}
	}
	return nil, fmt.Errorf("%s is not a node of this cluster", addr)
}

// waitAgree waits until every running, unpaused node reports
// cluster_state:ok and the CLUSTER NODES of all of them, taken in one
// round, pass check.
func (c *Cluster) waitAgree(ctx context.Context, what string, check func(views map[string][]clusterNode) error) error {
	err := waitFor(ctx, what, 50*time.Millisecond, func() error {
		views := map[string][]clusterNode{}
		for _, n := range c.nodes {
			if !n.live() {
				continue
			}
			info, err := c.cs.get(n.addr).ClusterInfo(ctx).Result()
			if err != nil {
				return fmt.Errorf("%s: cluster info: %w", n.addr, err)
			}
			if st := infoField(info, "cluster_state"); st != "ok" {
				return fmt.Errorf("%s: cluster_state:%s", n.addr, st)
			}
			if views[n.addr], err = c.view(ctx, n); err != nil {
				return err
			}
		}
		return check(views)
	})
	if err != nil {
		return fmt.Errorf("%w\n%s", err, c.Logs())
	}
	return nil
}

// layout is the part of a view all nodes must agree on: each node's role,
// master and slots.
func layout(view []clusterNode) string {
	lines := make([]string, 0, len(view))
	for _, n := range view {
		role := "master"
		if n.is("slave") {
			role = "slave"
		}
		lines = append(lines, fmt.Sprintf("%s %s %s %s %s", n.id, n.addr, role, n.master, strings.Join(n.slots, " ")))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// Ready waits until the cluster is whole: all six nodes answer
// cluster_state:ok and agree on a layout of three masters with one healthy
// replica each, and every replica has master_link_status:up (so that WAIT
// counts it). It expects no node to be stopped or paused.
func (c *Cluster) Ready(ctx context.Context) error {
	for _, n := range c.nodes {
		if !n.live() {
			return fmt.Errorf("cluster not ready: %s is stopped or paused", n.addr)
		}
	}
	return c.waitAgree(ctx, "cluster not ready", func(views map[string][]clusterNode) error {
		var first string
		for from, view := range views {
			if err := checkWhole(view, len(c.nodes)); err != nil {
				return fmt.Errorf("as %s sees it: %w", from, err)
			}
			if l := layout(view); first == "" {
				first = l
			} else if l != first {
				return fmt.Errorf("nodes disagree on the layout:\n%s\nvs\n%s", first, l)
			}
		}
		// All agree; check the replication links from the replicas' side.
		view := views[c.nodes[0].addr]
		addrOf := map[string]string{}
		for _, n := range view {
			addrOf[n.id] = n.addr
		}
		for _, n := range view {
			if n.is("slave") {
				if err := checkRole(ctx, c.cs.get(n.addr), "slave", addrOf[n.master]); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// checkWhole checks one view: every node known and healthy, three masters
// with one replica each.
func checkWhole(view []clusterNode, nodes int) error {
	if len(view) != nodes {
		return fmt.Errorf("%d nodes known, want %d", len(view), nodes)
	}
	replicas := map[string]int{}
	masters := 0
	for _, n := range view {
		for _, bad := range []string{"fail", "fail?", "handshake", "noaddr"} {
			if n.is(bad) {
				return fmt.Errorf("%s flagged %s", n.addr, strings.Join(n.flags, ","))
			}
		}
		if n.is("master") {
			masters++
		} else {
			replicas[n.master]++
		}
	}
	if masters != nodes/2 {
		return fmt.Errorf("%d masters, want %d", masters, nodes/2)
	}
	for _, n := range view {
		if n.is("master") && replicas[n.id] != 1 {
			return fmt.Errorf("master %s has %d replicas, want 1", n.addr, replicas[n.id])
		}
	}
	return nil
}

// MasterForSlot is the address of the master serving slot, as the first
// node that answers sees it.
func (c *Cluster) MasterForSlot(ctx context.Context, slot int) (string, error) {
	view, err := c.anyView(ctx)
	if err != nil {
		return "", err
	}
	for _, n := range view {
		if n.is("master") && n.owns(slot) {
			return n.addr, nil
		}
	}
	return "", fmt.Errorf("no master serves slot %d", slot)
}

// masterAndReplica finds a master by address and its one replica.
func (c *Cluster) masterAndReplica(ctx context.Context, masterAddr string) (m, r clusterNode, err error) {
	view, err := c.anyView(ctx)
	if err != nil {
		return m, r, err
	}
	i := slices.IndexFunc(view, func(n clusterNode) bool { return n.addr == masterAddr })
	if i < 0 || !view[i].is("master") {
		return m, r, fmt.Errorf("%s is not a master of the cluster", masterAddr)
	}
	m = view[i]
	var reps []clusterNode
	for _, n := range view {
		if n.master == m.id && !n.is("fail") {
			reps = append(reps, n)
		}
	}
	if len(reps) != 1 {
		return m, r, fmt.Errorf("master %s has %d live replicas, want 1", masterAddr, len(reps))
	}
	return m, reps[0], nil
}

// ownedSlots is a node's slot ranges without migration marks.
func ownedSlots(n clusterNode) []string {
	var out []string
	for _, s := range n.slots {
		if !strings.HasPrefix(s, "[") {
			out = append(out, s)
		}
	}
	return out
}

// promoted checks that, in every view, r is a healthy master with the
// slots m had.
func promoted(views map[string][]clusterNode, m, r clusterNode) error {
	want := ownedSlots(m)
	for from, view := range views {
		i := slices.IndexFunc(view, func(n clusterNode) bool { return n.id == r.id })
		if i < 0 {
			return fmt.Errorf("%s does not know %s", from, r.addr)
		}
		got := view[i]
		if !got.is("master") || got.is("fail") || got.is("fail?") || !slices.Equal(ownedSlots(got), want) {
			return fmt.Errorf("%s sees %s as %s with slots %v, want master with %v",
				from, r.addr, strings.Join(got.flags, ","), ownedSlots(got), want)
		}
	}
	return nil
}

// Failover makes the replica of the master at masterAddr take its place
// with CLUSTER FAILOVER (a manual failover, coordinated with the master, so
// no write is lost) and waits until every node sees the replica as master
// with cluster_state:ok and the old master as its replica; it returns how
// long that took. It returns once Ready.
//
// Redis spaces elections out: a master does not vote about a master it
// voted to replace less than 2 × cluster-node-timeout (4 s) ago, a replica
// starts no election less than 8 s after its previous one, and a manual
// failover that cannot win within 5 s gives up. So Failover first waits out
// the 4 s when it replaced this master itself, and asks again if a manual
// failover gives up. A failover right after another one in the same shard
// thus takes up to about 8 s (measured 7.7 s) instead of under 1 s.
func (c *Cluster) Failover(ctx context.Context, masterAddr string) (time.Duration, error) {
	start := time.Now()
	m, r, err := c.masterAndReplica(ctx, masterAddr)
	if err != nil {
		return 0, err
	}
	if at, ok := c.replaced[masterAddr]; ok {
		select {
		case <-time.After(time.Until(at.Add(voteDelay))):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	for {
		if err := c.cs.get(r.addr).ClusterFailover(ctx).Err(); err != nil {
			return 0, fmt.Errorf("%s: cluster failover: %w", r.addr, err)
		}
		// A manual failover times out after 5 s; the rest is for gossip.
		attempt, cancel := context.WithTimeout(ctx, 7*time.Second)
		err = c.waitAgree(attempt, "failover of "+masterAddr+" to "+r.addr, func(views map[string][]clusterNode) error {
			if err := promoted(views, m, r); err != nil {
				return err
			}
			for from, view := range views {
				i := slices.IndexFunc(view, func(n clusterNode) bool { return n.id == m.id })
				if i < 0 || view[i].master != r.id {
					return fmt.Errorf("%s does not see %s as a replica of %s yet", from, m.addr, r.addr)
				}
			}
			return nil
		})
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return 0, err
		}
	}
	took := time.Since(start)
	c.replaced[masterAddr] = time.Now()
	return took, c.Ready(ctx)
}

// voteDelay is how long after voting to replace a master the other masters
// refuse to vote about it again: 2 × cluster-node-timeout, and a margin.
const voteDelay = 4*time.Second + 200*time.Millisecond

// KillMaster kills the master at addr with SIGKILL and waits until its
// replica has been promoted and every other node answers cluster_state:ok;
// it returns how long that took (about 3–4 s with cluster-node-timeout
// 2000; longer for a master that replaced another less than 4 s before,
// see Failover). It then restarts the killed node, which rejoins with its
// nodes.conf, empty, as a replica of the new master, and returns once Ready.
func (c *Cluster) KillMaster(ctx context.Context, addr string) (time.Duration, error) {
	start := time.Now()
	m, r, err := c.masterAndReplica(ctx, addr)
	if err != nil {
		return 0, err
	}
	dead, err := c.nodeAt(addr)
	if err != nil {
		return 0, err
	}
	dead.kill()
	err = c.waitAgree(ctx, "promotion of "+r.addr+" after killing "+addr, func(views map[string][]clusterNode) error {
		return promoted(views, m, r)
	})
	if err != nil {
		return 0, err
	}
	took := time.Since(start)
	c.replaced[addr] = time.Now()
	if err := dead.start(ctx, clusterNodeArgs(dead)); err != nil {
		return took, err
	}
	return took, c.Ready(ctx)
}

// MigrateSlot moves slot and its keys to the master at toMasterAddr by the
// standard procedure: CLUSTER SETSLOT IMPORTING on the target and MIGRATING
// on the source, MIGRATE of every key that CLUSTER GETKEYSINSLOT lists, then
// CLUSTER SETSLOT NODE on the target, the source and the other masters. It
// returns once every node sees the target as the slot's owner with
// cluster_state:ok. Moving a slot to its own master does nothing.
func (c *Cluster) MigrateSlot(ctx context.Context, slot int, toMasterAddr string) error {
	view, err := c.anyView(ctx)
	if err != nil {
		return err
	}
	var src, dst clusterNode
	var others []clusterNode
	for _, n := range view {
		switch {
		case !n.is("master"):
		case n.addr == toMasterAddr:
			dst = n
		case n.owns(slot):
			src = n
		default:
			others = append(others, n)
		}
	}
	if dst.id == "" {
		return fmt.Errorf("%s is not a master of the cluster", toMasterAddr)
	}
	if src.id == "" {
		if dst.owns(slot) {
			return nil
		}
		return fmt.Errorf("no master serves slot %d", slot)
	}
	srcC, dstC := c.cs.get(src.addr), c.cs.get(dst.addr)
	if err := dstC.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.id).Err(); err != nil {
		return fmt.Errorf("%s: setslot %d importing: %w", dst.addr, slot, err)
	}
	if err := srcC.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id).Err(); err != nil {
		return fmt.Errorf("%s: setslot %d migrating: %w", src.addr, slot, err)
	}
	host, port, _ := net.SplitHostPort(dst.addr)
	for {
		keys, err := srcC.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			return fmt.Errorf("%s: getkeysinslot %d: %w", src.addr, slot, err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := srcC.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("%s: migrate %d keys of slot %d: %w", src.addr, len(keys), slot, err)
		}
	}
	// The target first: once it owns the slot, the source's redirects
	// point where the keys are.
	for _, n := range append([]clusterNode{dst, src}, others...) {
		if err := c.cs.get(n.addr).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dst.id).Err(); err != nil {
			return fmt.Errorf("%s: setslot %d node: %w", n.addr, slot, err)
		}
	}
	mark := "[" + strconv.Itoa(slot) + "-"
	return c.waitAgree(ctx, fmt.Sprintf("migration of slot %d to %s", slot, dst.addr), func(views map[string][]clusterNode) error {
		for from, view := range views {
			for _, n := range view {
				if n.owns(slot) != (n.id == dst.id) {
					return fmt.Errorf("%s sees slot %d at %s", from, slot, n.addr)
				}
				for _, s := range n.slots {
					if strings.HasPrefix(s, mark) {
						return fmt.Errorf("%s still marks %s at %s", from, s, n.addr)
					}
				}
			}
		}
		return nil
	})
}

// PauseReplicaOf stops the process of the replica of the master at
// masterAddr (SIGSTOP), so that WAIT on that master counts no replica,
// until ResumeReplicaOf. After cluster-node-timeout (2 s) the other nodes
// flag it as failing, which is harmless and clears when it resumes.
func (c *Cluster) PauseReplicaOf(masterAddr string) error {
	if n := c.paused[masterAddr]; n != nil {
		return fmt.Errorf("the replica of %s, %s, is already paused", masterAddr, n.addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, r, err := c.masterAndReplica(ctx, masterAddr)
	if err != nil {
		return err
	}
	n, err := c.nodeAt(r.addr)
	if err != nil {
		return err
	}
	if err := n.pause(); err != nil {
		return err
	}
	c.paused[masterAddr] = n
	return nil
}

// ResumeReplicaOf continues the replica paused by PauseReplicaOf(masterAddr)
// (SIGCONT).
func (c *Cluster) ResumeReplicaOf(masterAddr string) error {
	n := c.paused[masterAddr]
	if n == nil {
		return fmt.Errorf("no replica of %s is paused", masterAddr)
	}
	if err := n.resume(); err != nil {
		return err
	}
	delete(c.paused, masterAddr)
	return nil
}
