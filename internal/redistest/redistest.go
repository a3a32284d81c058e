// Package redistest starts a real redis-server on a free loopback port for
// tests, and stops it when the test ends. It fails the test, never skips it,
// when redis-server is missing.
//
// It also forms the two replicated topologies lockd supports, from the same
// redis-server binary (Sentinel is `redis-server conf --sentinel`):
//
//   - Sentinel: a master, one replica and three Sentinels (quorum 2),
//     formed in about 2.5 s, with Failover, KillMaster and PauseReplica.
//   - Cluster: three masters with one replica each, formed with
//     `redis-cli --cluster create` in about 3.5 s, with Failover,
//     KillMaster, MigrateSlot and PauseReplicaOf.
//
// Each topology is started by StartSentinel or StartCluster for one test, or
// by NewSentinel or NewCluster from a TestMain to share it between a
// package's tests (then Close it). The harness owns every process (no
// --daemonize) and kills them at Close, or, on Linux, when the test binary
// dies. Failover and KillMaster leave the topology whole again (one replica
// per master, links up) so that the next test can rely on it; Ready checks
// that. No node persists data: a killed node comes back empty and resyncs.
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
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server process owned by one test.
type Server struct {
	Addr   string
	port   int
	dir    string
	listen func(n int) []string
	extra  []string
	ping   func(addr string) error
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has exited and been reaped
	tb     testing.TB
}

// Start runs redis-server on a free port until the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return StartWith(tb, nil, nil)
}

// StartWith is Start with extra redis-server arguments. port, when set,
// returns the arguments that make Redis listen on the chosen port (for a
// TLS port, say); by default it is "--port N". Readiness is then the
// caller's business: ping is used to check that the server answers.
func StartWith(tb testing.TB, port func(n int) []string, extra []string, ping ...func(addr string) error) *Server {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Fatal("redis-server is not on PATH; the tests need a real Redis. " +
			"Install it with `apt-get install -y redis-server` (Debian/Ubuntu) or `brew install redis`, " +
			"or run `make test`, which installs it when it can.")
	}
	s := &Server{dir: tb.TempDir(), tb: tb, extra: extra, listen: port, ping: defaultPing}
	if s.listen == nil {
		s.listen = func(n int) []string { return []string{"--port", strconv.Itoa(n)} }
	}
	if len(ping) > 0 {
		s.ping = ping[0]
	}
	// A port found free can be taken before redis-server binds it (see
	// errPortTaken): start again on another.
	for attempt := 1; ; attempt++ {
		s.port = freePort(tb)
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		err := s.start()
		if err == nil {
			break
		}
		if !errors.Is(err, errPortTaken) || attempt == portAttempts {
			tb.Fatal(err)
		}
	}
	tb.Cleanup(s.Stop)
	return s
}

func defaultPing(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	return c.Ping(context.Background()).Err()
}

// start runs redis-server on s.port and waits until it answers.
func (s *Server) start() error {
	args := append([]string{"--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log")}, s.listen(s.port)...)
	s.cmd = exec.Command("redis-server", append(args, s.extra...)...)
	killWithParent(s.cmd)
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	cmd, exited := s.cmd, make(chan struct{})
	s.exited = exited
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.ping(s.Addr)
		if err == nil {
			return s.owned(exited)
		}
		log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
		select {
		case <-exited:
			s.cmd = nil
			if bytes.Contains(log, []byte("Address already in use")) {
				return fmt.Errorf("redis-server on %s: %w", s.Addr, errPortTaken)
			}
			return fmt.Errorf("redis-server on %s exited while starting\n%s", s.Addr, log)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer: %v\n%s", s.Addr, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// owned checks that the server that answered is this one and not another
// test's on the same port, which made this one exit or will. With a ping
// of the caller's (TLS) there is no plain client to ask, and it is enough
// that the process is still running a moment later.
func (s *Server) owned(exited <-chan struct{}) error {
	got := ""
	c := newClient(s.Addr)
	if info, err := c.Info(context.Background(), "server").Result(); err == nil {
		got = infoField(info, "process_id")
	}
	_ = c.Close()
	if got == strconv.Itoa(s.cmd.Process.Pid) {
		return nil
	}
	select {
	case <-exited:
	case <-time.After(200 * time.Millisecond):
		if got == "" {
			return nil
		}
	}
	s.Stop()
	return fmt.Errorf("redis-server on %s: another process answers: %w", s.Addr, errPortTaken)
}

// Stop kills the server; Restart brings it back on the same port.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Pause stops the server's process (SIGSTOP): connections stay open and
// commands queue unanswered, as when Redis stalls. Resume continues it.
func (s *Server) Pause() {
	s.tb.Helper()
	StopProcess(s.tb, s.cmd.Process)
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() {
	s.tb.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		s.tb.Fatalf("resume redis-server: %v", err)
	}
}

// Restart starts a stopped server again, empty, on the same address.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		s.tb.Fatal(err)
	}
}

// Client returns a client of the server that the test closes at its end.
func (s *Server) Client(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// URL is the server's redis:// address.
func (s *Server) URL() string { return fmt.Sprintf("redis://%s/0", s.Addr) }

func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// CPU is the CPU time redis-server has used so far (INFO cpu, user and
// system), or 0 if c cannot tell: benchmarks take the difference.
// CommandTime is how long the server at c has spent executing commands
// (scripts included) since it started: the sum of INFO commandstats'
// usec, without reading requests, writing replies or its event loop.
func CommandTime(c *redis.Client) time.Duration {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return 0
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		_, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
			}
		}
	}
	return time.Duration(total) * time.Microsecond
}

func CPU(c *redis.Client) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		return 0
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// StopProcess stops p (SIGSTOP) and returns once the kernel says it is
// stopped: the signal is delivered asynchronously, and a thread running on
// another core may still send a request or two after kill returns.
func StopProcess(tb testing.TB, p *os.Process) {
	tb.Helper()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		tb.Fatalf("stop process %d: %v", p.Pid, err)
	}
	stat := fmt.Sprintf("/proc/%d/stat", p.Pid)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(stat)
		if err != nil {
			tb.Fatalf("stop process %d: %v", p.Pid, err)
		}
		// The state follows the command name, which is in parentheses.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'T' {
			return
		}
	}
	tb.Fatalf("process %d did not stop in 5 s", p.Pid)
}
