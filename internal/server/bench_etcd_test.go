package server_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// etcdMutex is the other yardstick of BenchmarkHTTPVersusBare: etcd's
// concurrency.Mutex over gRPC, the lock a team that runs etcd already
// has. Each client keeps one session (one lease, kept alive) and takes
// and releases a mutex on its own key, as each of lockd's clients cycles
// on its own key. An etcd binary on PATH (Debian: etcd-server) is started
// on free ports in a temporary directory; without one the benchmark runs
// without it and says so.
type etcdMutex struct {
	cli *clientv3.Client
	mu  sync.Mutex
	// sessions is one session per client key, made on first use.
	sessions map[string]*concurrency.Session
}

func startEtcd(b *testing.B) *etcdMutex {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		b.Log("etcd: no etcd binary on PATH (Debian: apt-get install etcd-server): its mutex is left out")
		return nil
	}
	var cli *clientv3.Client
	for attempt := 1; ; attempt++ {
		// A port found free can be taken before etcd binds it: try again.
		client, peer := freeTCPPort(b), freeTCPPort(b)
		dir := b.TempDir()
		cmd := exec.Command(bin, "--name", "bench", "--data-dir", filepath.Join(dir, "data"),
			"--listen-client-urls", "http://127.0.0.1:"+strconv.Itoa(client),
			"--advertise-client-urls", "http://127.0.0.1:"+strconv.Itoa(client),
			"--listen-peer-urls", "http://127.0.0.1:"+strconv.Itoa(peer),
			"--initial-advertise-peer-urls", "http://127.0.0.1:"+strconv.Itoa(peer),
			"--initial-cluster", "bench=http://127.0.0.1:"+strconv.Itoa(peer),
			// As lockd's Redis in the benchmark: no fsync wait on the
			// machine's disk skewing one side.
			"--unsafe-no-fsync")
		logf, err := os.Create(filepath.Join(dir, "etcd.log"))
		if err != nil {
			b.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			b.Fatalf("etcd: %v", err)
		}
		b.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			_ = logf.Close()
		})
		cli, err = clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:" + strconv.Itoa(client)}, DialTimeout: 5 * time.Second})
		if err != nil {
			b.Fatalf("etcd client: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err = cli.Put(ctx, "bench:ready", "1")
		cancel()
		if err == nil {
			break
		}
		_ = cli.Close()
		log, _ := os.ReadFile(filepath.Join(dir, "etcd.log"))
		if attempt == 3 {
			b.Fatalf("etcd did not start: %v\n%s", err, log)
		}
	}
	e := &etcdMutex{cli: cli, sessions: map[string]*concurrency.Session{}}
	b.Cleanup(func() {
		for _, s := range e.sessions {
			_ = s.Close()
		}
		_ = cli.Close()
	})
	return e
}

// cycle takes and releases the mutex on key.
func (e *etcdMutex) cycle(key string) error {
	e.mu.Lock()
	s, ok := e.sessions[key]
	if !ok {
		var err error
		if s, err = concurrency.NewSession(e.cli, concurrency.WithTTL(30)); err != nil {
			e.mu.Unlock()
			return fmt.Errorf("session: %w", err)
		}
		e.sessions[key] = s
	}
	e.mu.Unlock()
	m := concurrency.NewMutex(s, "/bench/"+key)
	ctx := context.Background()
	if err := m.Lock(ctx); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if err := m.Unlock(ctx); err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	return nil
}

func freeTCPPort(b *testing.B) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
