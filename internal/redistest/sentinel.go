package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// sentinelMaster is the name under which the Sentinels monitor the master.
const sentinelMaster = "lockd"

// Sentinel is a Redis master with one replica, monitored by three Sentinels
// (quorum 2, down-after-milliseconds 1000, failover-timeout 5000), all on
// free loopback ports and owned by the harness. Which of the two data
// nodes is the master changes with Failover and KillMaster. Its methods
// are not safe for concurrent use.
type Sentinel struct {
	data      [2]*node // the master and the replica, in no fixed order
	sentinels [3]*node
	cs        clients
	paused    *node // the replica stopped by PauseReplica

	// password is the Sentinels' requirepass ("": none). The data nodes
	// have none.
	password string

	mu  sync.Mutex
	scs map[string]*redis.SentinelClient

	closeOnce sync.Once
}

// StartSentinel forms a Sentinel topology in the test's temporary directory
// and closes it when the test ends. It fails the test if that fails.
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	s, err := NewSentinel(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// StartSentinelWithPassword is StartSentinel with requirepass on the
// three Sentinels: a client must authenticate to ask them anything (the
// Sentinels use it with each other too). The data nodes need no password.
func StartSentinelWithPassword(tb testing.TB, password string) *Sentinel {
	tb.Helper()
	s, err := newSentinel(tb.TempDir(), password)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// NewSentinel forms a Sentinel topology with its files under dir, for a
// TestMain that shares one topology between a package's tests; the caller
// must Close it. It returns when Ready would.
func NewSentinel(dir string) (*Sentinel, error) {
	return newSentinel(dir, "")
}

func newSentinel(dir, password string) (*Sentinel, error) {
	if err := checkRedisServer(); err != nil {
		return nil, err
	}
	return onFreshPorts(func() (*Sentinel, error) { return formSentinel(dir, password) })
}

func formSentinel(dir, password string) (*Sentinel, error) {
	ports, err := freePorts(5, false)
	if err != nil {
		return nil, err
	}
	s := &Sentinel{password: password}
	for i := range s.data {
		if s.data[i], err = newNode(filepath.Join(dir, fmt.Sprintf("redis-%d", ports[i])), ports[i], "redis.log"); err != nil {
			return nil, err
		}
	}
	for i := range s.sentinels {
		p := ports[2+i]
		if s.sentinels[i], err = newNode(filepath.Join(dir, fmt.Sprintf("sentinel-%d", p)), p, "sentinel.log"); err != nil {
			return nil, err
		}
		s.sentinels[i].password = password
	}
	ctx, cancel := context.WithTimeout(context.Background(), formTimeout)
	defer cancel()
	if err := s.form(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Sentinel) form(ctx context.Context) error {
	if err := s.data[0].start(ctx, dataNodeArgs(s.data[0], "")); err != nil {
		return err
	}
	if err := s.data[1].start(ctx, dataNodeArgs(s.data[1], s.data[0].addr)); err != nil {
		return err
	}
	for _, sn := range s.sentinels {
		// Sentinel rewrites its config file (it records the other
		// Sentinels, the replicas and each failover), so each one has its
		// own writable copy.
		conf := filepath.Join(sn.dir, "sentinel.conf")
		text := fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
logfile %s
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %s 1000
sentinel failover-timeout %s 5000
sentinel parallel-syncs %s 1
`, sn.port, sn.dir, sn.logfile, sentinelMaster, s.data[0].port,
			sentinelMaster, sentinelMaster, sentinelMaster)
		if s.password != "" {
			text += fmt.Sprintf("requirepass %q\n", s.password)
		}
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return err
		}
		if err := sn.start(ctx, []string{conf, "--sentinel"}); err != nil {
			return err
		}
	}
	return s.Ready(ctx)
}

// dataNodeArgs are the arguments of a master (replicaOf "") or a replica:
// no persistence, so a killed node comes back empty, and no diskless-sync
// delay, so a replica is in sync within milliseconds rather than 5 s.
func dataNodeArgs(n *node, replicaOf string) []string {
	args := []string{"--port", strconv.Itoa(n.port), "--bind", "127.0.0.1",
		"--dir", n.dir, "--logfile", n.logfile,
		"--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0"}
	if replicaOf != "" {
		host, port, _ := net.SplitHostPort(replicaOf)
		args = append(args, "--replicaof", host, port)
	}
	return args
}

// Close kills every process of the topology. It may be called more than once.
func (s *Sentinel) Close() {
	s.closeOnce.Do(func() {
		// The Sentinels go first, so that none reacts to the others' end.
		for _, n := range s.sentinels {
			if n != nil {
				n.kill()
			}
		}
		for _, n := range s.data {
			if n != nil {
				n.kill()
			}
		}
		s.cs.close()
		s.mu.Lock()
		for _, c := range s.scs {
			_ = c.Close()
		}
		s.scs = nil
		s.mu.Unlock()
	})
}

// MasterName is the name the Sentinels know the master by: "lockd".
func (s *Sentinel) MasterName() string { return sentinelMaster }

// SentinelAddrs are the host:port addresses of the three Sentinels.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, n := range s.sentinels {
		addrs[i] = n.addr
	}
	return addrs
}

// URL is the topology's redis-sentinel:// address for lockd:
// redis-sentinel://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3/lockd.
func (s *Sentinel) URL() string {
	return "redis-sentinel://" + strings.Join(s.SentinelAddrs(), ",") + "/" + sentinelMaster
}

// Client returns a go-redis failover client of the master through the
// Sentinels; the caller closes it.
func (s *Sentinel) Client() *redis.Client {
	return redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:       sentinelMaster,
		SentinelAddrs:    s.SentinelAddrs(),
		SentinelPassword: s.password,
	})
}

// NodeClient returns a plain client of one data node (the master or the
// replica, by address); the caller closes it.
func (s *Sentinel) NodeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr})
}

// Logs is the end of every process's log, for a failing test to print.
func (s *Sentinel) Logs() string {
	var b strings.Builder
	for _, n := range s.data {
		b.WriteString(n.tail())
	}
	for _, n := range s.sentinels {
		b.WriteString(n.tail())
	}
	return b.String()
}

func (s *Sentinel) sentinelClient(addr string) *redis.SentinelClient {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.scs == nil {
		s.scs = map[string]*redis.SentinelClient{}
	}
	c, ok := s.scs[addr]
	if !ok {
		c = redis.NewSentinelClient(&redis.Options{
			Addr: addr, Password: s.password, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
			MaxRetries: -1, PoolSize: 2, DisableIdentity: true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		})
		s.scs[addr] = c
	}
	return c
}

// masterFrom asks one Sentinel for the master's address.
func (s *Sentinel) masterFrom(ctx context.Context, sentinel *node) (string, error) {
	hp, err := s.sentinelClient(sentinel.addr).GetMasterAddrByName(ctx, sentinelMaster).Result()
	if err != nil {
		return "", fmt.Errorf("sentinel %s: get-master-addr-by-name: %w", sentinel.addr, err)
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("sentinel %s: get-master-addr-by-name: %q", sentinel.addr, hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// MasterAddr asks the Sentinels, in turn until one answers, for the
// master's host:port.
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	var errs []string
	for _, sn := range s.sentinels {
		addr, err := s.masterFrom(ctx, sn)
		if err == nil {
			return addr, nil
		}
		errs = append(errs, err.Error())
	}
	return "", fmt.Errorf("no sentinel answered: %s", strings.Join(errs, "; "))
}

// ReplicaAddr is the host:port of the data node that the Sentinels do not
// name as master.
func (s *Sentinel) ReplicaAddr(ctx context.Context) (string, error) {
	_, replica, err := s.roles(ctx)
	if err != nil {
		return "", err
	}
	return replica.addr, nil
}

// roles returns the data node the Sentinels name as master and the other.
func (s *Sentinel) roles(ctx context.Context) (master, replica *node, err error) {
	addr, err := s.MasterAddr(ctx)
	if err != nil {
		return nil, nil, err
	}
	switch addr {
	case s.data[0].addr:
		return s.data[0], s.data[1], nil
	case s.data[1].addr:
		return s.data[1], s.data[0], nil
	}
	return nil, nil, fmt.Errorf("sentinels name %s as master, not one of %s, %s", addr, s.data[0].addr, s.data[1].addr)
}

// agreedMaster checks that every Sentinel names the same master and
// returns it.
func (s *Sentinel) agreedMaster(ctx context.Context) (string, error) {
	var first string
	for i, sn := range s.sentinels {
		addr, err := s.masterFrom(ctx, sn)
		if err != nil {
			return "", err
		}
		if i == 0 {
			first = addr
		} else if addr != first {
			return "", fmt.Errorf("sentinels disagree: %s names %s, %s names %s", s.sentinels[0].addr, first, sn.addr, addr)
		}
	}
	return first, nil
}

// Ready waits until the topology is whole: every Sentinel names the same
// master, which answers role master; the other node replicates it with
// master_link_status:up; and each Sentinel sees that one healthy replica
// and the two other Sentinels. It expects no node to be paused.
func (s *Sentinel) Ready(ctx context.Context) error {
	err := waitFor(ctx, "sentinel topology not ready", 50*time.Millisecond, func() error {
		return s.readyNow(ctx)
	})
	if err != nil {
		return fmt.Errorf("%w\n%s", err, s.Logs())
	}
	return nil
}

func (s *Sentinel) readyNow(ctx context.Context) error {
	addr, err := s.agreedMaster(ctx)
	if err != nil {
		return err
	}
	master, replica, err := s.roles(ctx)
	if err != nil {
		return err
	}
	if master.addr != addr {
		return fmt.Errorf("master moved during the check")
	}
	if err := checkRole(ctx, s.cs.get(master.addr), "master", ""); err != nil {
		return err
	}
	if err := checkRole(ctx, s.cs.get(replica.addr), "slave", master.addr); err != nil {
		return err
	}
	for _, sn := range s.sentinels {
		c := s.sentinelClient(sn.addr)
		m, err := c.Master(ctx, sentinelMaster).Result()
		if err != nil {
			return fmt.Errorf("sentinel %s: sentinel master: %w", sn.addr, err)
		}
		if m["flags"] != "master" || m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
			return fmt.Errorf("sentinel %s sees master flags=%s num-slaves=%s num-other-sentinels=%s",
				sn.addr, m["flags"], m["num-slaves"], m["num-other-sentinels"])
		}
		reps, err := c.Replicas(ctx, sentinelMaster).Result()
		if err != nil {
			return fmt.Errorf("sentinel %s: sentinel replicas: %w", sn.addr, err)
		}
		if len(reps) != 1 || reps[0]["name"] != replica.addr || reps[0]["flags"] != "slave" {
			return fmt.Errorf("sentinel %s sees replicas %v, want %s healthy", sn.addr, reps, replica.addr)
		}
	}
	return nil
}

// checkRole checks a data node's INFO replication: its role, and for a
// replica its master and an up link (so that WAIT counts it).
func checkRole(ctx context.Context, c *redis.Client, role, masterAddr string) error {
	addr := c.Options().Addr
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("%s: info replication: %w", addr, err)
	}
	if got := infoField(info, "role"); got != role {
		return fmt.Errorf("%s has role %s, want %s", addr, got, role)
	}
	if role != "slave" {
		return nil
	}
	if got := net.JoinHostPort(infoField(info, "master_host"), infoField(info, "master_port")); got != masterAddr {
		return fmt.Errorf("%s replicates %s, want %s", addr, got, masterAddr)
	}
	if got := infoField(info, "master_link_status"); got != "up" {
		return fmt.Errorf("%s: master_link_status:%s", addr, got)
	}
	return nil
}

// Failover makes the replica the master with SENTINEL FAILOVER and waits
// until every Sentinel names it and it answers role master; it returns how
// long that took. Sentinel itself would demote the old master only about
// 10 s later (until then it is a second master, taking writes that will be
// lost); Failover does it at once with REPLICAOF, as Sentinel would, and
// returns once Ready, so that the next test again finds one master and one
// replica.
func (s *Sentinel) Failover(ctx context.Context) (time.Duration, error) {
	old, took, err := s.SwitchMaster(ctx)
	if err != nil {
		return took, err
	}
	if err := s.cs.get(old).ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(s.other(old).port)).Err(); err != nil {
		return took, fmt.Errorf("demote old master %s: %w", old, err)
	}
	return took, s.Ready(ctx)
}

// SwitchMaster makes the replica the master with SENTINEL FAILOVER and
// waits until every Sentinel names it and it answers role master, as
// Failover does, but leaves the old master as Sentinel leaves it: a
// writable master for about 10 s, with its clients and their
// subscriptions, which hear nothing published on the new master. It
// returns the old master's address and how long the switch took. Demote
// ends that state as Sentinel would.
func (s *Sentinel) SwitchMaster(ctx context.Context) (old string, took time.Duration, err error) {
	start := time.Now()
	prev, next, err := s.roles(ctx)
	if err != nil {
		return "", 0, err
	}
	// NOGOODSLAVE means a Sentinel has not yet an up-to-date view of the
	// replica; INPROG, that its previous failover has not ended. Both pass.
	err = waitFor(ctx, "SENTINEL FAILOVER", 100*time.Millisecond, func() error {
		return s.sentinelClient(s.sentinels[0].addr).Failover(ctx, sentinelMaster).Err()
	})
	if err != nil {
		return "", 0, fmt.Errorf("%w\n%s", err, s.Logs())
	}
	if err := s.waitPromoted(ctx, next); err != nil {
		return "", 0, err
	}
	return prev.addr, time.Since(start), nil
}

// Demote does to the old master of SwitchMaster what Sentinel does about
// 10 s after a failover: in one MULTI, REPLICAOF the new master and CLIENT
// KILL of its normal and pub/sub clients (measured on 7.0: the old master's
// subscribers are disconnected as it turns replica). It returns once Ready.
// If Sentinel demoted the node already, it only drops the clients that
// connected since.
func (s *Sentinel) Demote(ctx context.Context, old string) error {
	next := s.other(old)
	if next == nil {
		return fmt.Errorf("%s is not a data node of the topology", old)
	}
	_, err := s.cs.get(old).TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(next.port))
		p.ClientKillByFilter(ctx, "TYPE", "normal")
		p.ClientKillByFilter(ctx, "TYPE", "pubsub")
		return nil
	})
	if err != nil {
		return fmt.Errorf("demote old master %s: %w", old, err)
	}
	return s.Ready(ctx)
}

// other is the data node that is not at addr (nil if addr is neither).
func (s *Sentinel) other(addr string) *node {
	switch addr {
	case s.data[0].addr:
		return s.data[1]
	case s.data[1].addr:
		return s.data[0]
	}
	return nil
}

// waitPromoted waits until every Sentinel names n as master and n answers
// role master.
func (s *Sentinel) waitPromoted(ctx context.Context, n *node) error {
	err := waitFor(ctx, "replica "+n.addr+" not promoted", 50*time.Millisecond, func() error {
		addr, err := s.agreedMaster(ctx)
		if err != nil {
			return err
		}
		if addr != n.addr {
			return fmt.Errorf("sentinels name %s as master", addr)
		}
		return checkRole(ctx, s.cs.get(n.addr), "master", "")
	})
	if err != nil {
		return fmt.Errorf("%w\n%s", err, s.Logs())
	}
	return nil
}

// KillMaster kills the master with SIGKILL and waits until the Sentinels
// have promoted the replica; it returns how long that took (about 2 s:
// down-after-milliseconds, then the Sentinels' vote). It then restarts the
// killed node, empty, as a replica of the new master and returns once
// Ready, so that the next test again finds one master and one replica.
//
// Back-to-back calls are slower (measured: the third KillMaster in a row
// took 11 s to promote, or 2 s to promote and then 12 s until Ready): a
// Sentinel that voted in a failover starts none for the same master within
// 2 × failover-timeout (10 s), and after quick successive failovers the
// Sentinels may list the restarted replica as disconnected for about 10 s,
// during which they could not fail over to it, so Ready waits.
func (s *Sentinel) KillMaster(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	old, next, err := s.roles(ctx)
	if err != nil {
		return 0, err
	}
	old.kill()
	if err := s.waitPromoted(ctx, next); err != nil {
		return 0, err
	}
	took := time.Since(start)
	// With --replicaof the node is a replica from its first moment; without
	// it, it would come back as a second master until Sentinel demotes it.
	if err := old.start(ctx, dataNodeArgs(old, next.addr)); err != nil {
		return took, err
	}
	return took, s.Ready(ctx)
}

// PauseReplica stops the replica's process (SIGSTOP), so that WAIT on the
// master counts no replica, until ResumeReplica. If it stays paused for more
// than a second the Sentinels mark it down, which is harmless.
func (s *Sentinel) PauseReplica() error {
	if s.paused != nil {
		return fmt.Errorf("replica %s is already paused", s.paused.addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, replica, err := s.roles(ctx)
	if err != nil {
		return err
	}
	if err := replica.pause(); err != nil {
		return err
	}
	s.paused = replica
	return nil
}

// ResumeReplica continues the replica paused by PauseReplica (SIGCONT).
func (s *Sentinel) ResumeReplica() error {
	if s.paused == nil {
		return fmt.Errorf("no replica is paused")
	}
	if err := s.paused.resume(); err != nil {
		return err
	}
	s.paused = nil
	return nil
}
