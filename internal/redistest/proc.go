package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// errNoRedis is what the topology constructors return when redis-server is
// missing: the tests need a real Redis and fail rather than skip.
var errNoRedis = errors.New("redis-server is not on PATH; the tests need a real Redis. " +
	"Install it with `apt-get install -y redis-server` (Debian/Ubuntu) or `brew install redis`, " +
	"or run `make test`, which installs it when it can")

// formTimeout bounds the forming of a topology by a constructor, which has
// no context of its own. Formation takes 2–4 s when the machine is quiet.
const formTimeout = 60 * time.Second

// node is one redis-server (or sentinel) process owned by a topology
// harness. It is started with exec.Command, never --daemonize, so that the
// harness holds the pid and can kill, stop and continue it.
type node struct {
	port    int
	addr    string
	dir     string
	logfile string // where the process logs once it has read its config

	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has exited and been reaped
	paused bool          // SIGSTOPped: skipped by the harness's own checks

	password string // requirepass of the process, "" for none
}

// errPortTaken is returned when a node's port turned out to be in use by
// the time redis-server bound it: free ports are found by listening and
// closing, and another test process (go test runs packages in parallel) or
// an outgoing connection can take one in between. Constructors retry on
// fresh ports.
var errPortTaken = errors.New("port taken by another process")

func newNode(dir string, port int, logName string) (*node, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &node{
		port:    port,
		addr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		dir:     dir,
		logfile: filepath.Join(dir, logName),
	}, nil
}

// start runs redis-server with args and waits until it answers PING. Its
// stdout and stderr go to a file next to its log because a bad argument is
// reported there, before the log file is opened.
func (n *node) start(ctx context.Context, args []string) error {
	out, err := os.OpenFile(filepath.Join(n.dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command("redis-server", args...)
	cmd.Dir = n.dir
	cmd.Stdout, cmd.Stderr = out, out
	killWithParent(cmd)
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start redis-server on %s: %w", n.addr, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(exited)
	}()
	n.cmd, n.exited, n.paused = cmd, exited, false

	c := newAuthClient(n.addr, n.password)
	defer c.Close()
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			// Something answers on the port: it must be this process and
			// not another test's Redis that holds the port, in which case
			// this one fails to bind and exits.
			return n.owns(ctx, c, cmd.Process.Pid)
		}
		select {
		case <-exited:
			if strings.Contains(n.tail(), "Address already in use") {
				return fmt.Errorf("redis-server on %s: %w", n.addr, errPortTaken)
			}
			return fmt.Errorf("redis-server on %s exited while starting\n%s", n.addr, n.tail())
		case <-ctx.Done():
			return fmt.Errorf("redis-server on %s did not answer PING: %v\n%s", n.addr, err, n.tail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// owns checks that the server answering c is the process with pid. If it
// is another, the port is taken: the process is killed and errPortTaken
// returned.
func (n *node) owns(ctx context.Context, c *redis.Client, pid int) error {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("redis-server on %s: INFO server: %w", n.addr, err)
	}
	if got := infoField(info, "process_id"); got != strconv.Itoa(pid) {
		n.kill()
		return fmt.Errorf("redis-server on %s: process %s answers, not %d: %w", n.addr, got, pid, errPortTaken)
	}
	return nil
}

// live reports whether the process is up and answering: the harness's own
// checks skip the others, which could not reply.
func (n *node) live() bool { return n.cmd != nil && !n.paused }

// kill ends the process with SIGKILL (as kill -9, so no clean shutdown),
// which also ends a stopped process, and waits until it is reaped.
func (n *node) kill() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	<-n.exited
	n.cmd, n.paused = nil, false
}

// pause stops the process with SIGSTOP: its sockets stay open and nothing
// answers, as when a server stalls.
func (n *node) pause() error {
	if n.cmd == nil {
		return fmt.Errorf("pause %s: not running", n.addr)
	}
	if err := n.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pause %s: %w", n.addr, err)
	}
	n.paused = true
	return nil
}

// resume continues a paused process with SIGCONT.
func (n *node) resume() error {
	if n.cmd == nil {
		return fmt.Errorf("resume %s: not running", n.addr)
	}
	if err := n.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("resume %s: %w", n.addr, err)
	}
	n.paused = false
	return nil
}

// tail is the end of the node's log (and of its stdout), for error messages.
func (n *node) tail() string {
	var b strings.Builder
	for _, f := range []string{filepath.Join(n.dir, "stdout.log"), n.logfile} {
		data, err := os.ReadFile(f)
		if err != nil || len(bytes.TrimSpace(data)) == 0 {
			continue
		}
		fmt.Fprintf(&b, "--- %s (%s), last lines:\n%s\n", n.addr, filepath.Base(f), lastLines(data, 15))
	}
	return b.String()
}

func lastLines(data []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// newClient is a client for the harness's own commands: short timeouts and
// no retries, so that a dead or paused node answers an error within a
// second instead of holding up a wait loop; no CLIENT SETINFO or
// maintenance notifications, which only add round trips here.
func newClient(addr string) *redis.Client { return newAuthClient(addr, "") }

// newAuthClient is newClient with a password.
func newAuthClient(addr, password string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                     addr,
		Password:                 password,
		DialTimeout:              time.Second,
		ReadTimeout:              time.Second,
		WriteTimeout:             time.Second,
		MaxRetries:               -1,
		PoolSize:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// clients caches one harness client per address; a node restarted on the
// same address is reached again by the same client.
type clients struct {
	mu sync.Mutex
	m  map[string]*redis.Client
}

func (cs *clients) get(addr string) *redis.Client {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.m == nil {
		cs.m = map[string]*redis.Client{}
	}
	c, ok := cs.m[addr]
	if !ok {
		c = newClient(addr)
		cs.m[addr] = c
	}
	return c
}

func (cs *clients) close() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, c := range cs.m {
		_ = c.Close()
	}
	cs.m = nil
}

// waitFor calls check every interval until it returns nil, and returns its
// last error, prefixed with what, when ctx ends first.
func waitFor(ctx context.Context, what string, interval time.Duration, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}

// freePorts returns n distinct free loopback ports. With bus set, port+10000
// (a Redis Cluster node's bus port) is free as well. Each port is found by
// listening on :0; the listeners stay open until all are found so that the
// kernel cannot hand out the same port twice.
func freePorts(n int, bus bool) ([]int, error) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("no %d free ports (bus ports: %v)", n, bus)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		held = append(held, l)
		p := l.Addr().(*net.TCPAddr).Port
		if !bus {
			ports = append(ports, p)
			continue
		}
		if p+10000 > 65535 {
			continue
		}
		lb, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+10000)))
		if err != nil {
			continue // the bus port is taken: keep p held so :0 moves on
		}
		held = append(held, lb)
		ports = append(ports, p)
	}
	return ports, nil
}

// portAttempts is how many times a topology is formed, on fresh ports each
// time, before a taken port fails the test.
const portAttempts = 3

// onFreshPorts calls form until it succeeds, fails other than with
// errPortTaken, or has been tried portAttempts times. form picks its own
// ports and cleans up after itself when it fails.
func onFreshPorts[T any](form func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		t, err := form()
		if err == nil || !errors.Is(err, errPortTaken) || attempt == portAttempts {
			return t, err
		}
	}
}

// infoField returns one field of an INFO section, "" when absent.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

func checkRedisServer() error {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return errNoRedis
	}
	return nil
}
