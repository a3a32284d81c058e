// Package lockdtest starts an in-process lockd for tests: the real engine,
// server and router on a real redis-server (internal/redistest), behind an
// httptest server that checks every exchange against api/openapi.yaml
// (ValidateSpec). It also holds the small helpers that tests of several
// packages share.
package lockdtest

import (
	"bytes"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lock/store"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
)

// Lockd is a running in-process lockd.
type Lockd struct {
	URL    string
	Engine *lock.Engine
	Server *server.Server
	Redis  *redistest.Server
	HTTP   *httptest.Server
	// Logs holds everything the server logged (JSON lines).
	Logs *Buffer
}

// Options change what Start builds. The zero value is lockd's defaults.
type Options struct {
	// Configure edits the server's Config before it is built.
	Configure func(*server.Config)
	// Dashboard, when set, builds the web UI to mount.
	Dashboard func(*lock.Engine, zerolog.Logger) server.Dashboard
	// Redis is the server to use; nil starts a new one.
	Redis *redistest.Server
	// RedisAddr, when set, is where lockd dials Redis instead of Redis's
	// own address: a fault-injecting proxy in front of it, say.
	RedisAddr string
	// Client, when set, is the Redis client lockd runs on (a Sentinel's
	// or a Cluster's), closed when the test ends; Redis and RedisAddr are
	// then not used.
	Client redis.UniversalClient
	// Engine is the engine's options (replica acks, say). Without
	// Proofs, the engine signs with Signer's secret.
	Engine lock.Options
}

// LeaseSecret is the secret of Signer: a test's own, known to anyone.
const LeaseSecret = "lockdtest lease-proof secret, not a secret at all"

// Signer signs and verifies lease proofs as every lockd Start runs does
// unless told otherwise, so that a test reads what a proof vouches for.
func Signer() *lock.Signer {
	s, err := lock.NewSigner([]byte(LeaseSecret))
	if err != nil {
		panic(err)
	}
	return s
}

// Start runs lockd until the test ends. Its Redis client is configured as
// lockd serve's, with shorter timeouts so that a stopped Redis answers 503
// quickly.
func Start(tb testing.TB, opts Options) *Lockd {
	tb.Helper()
	rs, rdb := opts.Redis, opts.Client
	if rdb == nil {
		if rs == nil {
			rs = redistest.Start(tb)
		}
		addr := rs.Addr
		if opts.RedisAddr != "" {
			addr = opts.RedisAddr
		}
		ro := &redis.Options{Addr: addr}
		store.TuneClient(ro)
		ro.DialTimeout, ro.ReadTimeout, ro.WriteTimeout = 300*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
		rdb = redis.NewClient(ro)
	}
	if opts.Engine.Proofs == nil {
		// As lockd serve, which always signs proofs.
		opts.Engine.Proofs = Signer()
	}
	engine := lock.New(rdb, opts.Engine)
	logs := &Buffer{}
	log := zerolog.New(logs)
	cfg := server.DefaultConfig()
	if opts.Configure != nil {
		opts.Configure(&cfg)
	}
	reg := prometheus.NewRegistry()
	srv := server.New(engine, log, cfg, reg)
	var dash server.Dashboard
	if opts.Dashboard != nil {
		dash = opts.Dashboard(engine, log)
	}
	// Every exchange is checked against api/openapi.yaml, so a test that
	// makes the server drift from its contract fails.
	ts := httptest.NewServer(ValidateSpec(srv.Handler(reg, dash), tb.Errorf))
	tb.Cleanup(func() {
		srv.Shutdown()
		_ = engine.Close()
		ts.Close()
		_ = rdb.Close()
	})
	return &Lockd{URL: ts.URL, Engine: engine, Server: srv, Redis: rs, HTTP: ts, Logs: logs}
}

// Buffer is a bytes.Buffer that goroutines (a server, a child process and
// the test) may write and read at once.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
