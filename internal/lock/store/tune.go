package store

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// The client settings the engine is built for:
//
//   - bounded dial, read, write and pool timeouts, so that a call answers
//     ErrUnavailable within about 2 s when Redis is down, never hangs;
//   - no retries: a retried acquire whose first attempt did reach Redis
//     would find its own lease and call it held, and a retried release or
//     re-entry would count twice;
//   - RESP2: lockd uses no RESP3 feature, and go-redis checks for RESP3
//     push notifications before every command (about 3% of lockd's CPU);
//   - no CLIENT SETINFO on connect (DisableIdentity): under latency a
//     timed-out connection is redialled, and that handshake would cost one
//     more round trip per new connection;
//   - context deadlines honoured, so the engine's one deadline per call
//     (Options.CallTimeout) bounds pool wait, dial and round trip together.
const (
	dialTimeout = 700 * time.Millisecond
	ioTimeout   = time.Second
	poolTimeout = time.Second
)

// Tune sets the settings above on opts, for any topology: make the client
// from opts.Simple() (one server), opts.Failover() (Sentinel) or
// opts.Cluster(). On a Cluster, MOVED and ASK redirections are still
// followed (MaxRedirects): the script did not run on the node that
// answered them.
func Tune(opts *redis.UniversalOptions) {
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout = dialTimeout, ioTimeout, ioTimeout, poolTimeout
	opts.MaxRetries = -1
	opts.Protocol = 2
	opts.DisableIdentity = true
	opts.ContextTimeoutEnabled = true
}

// TuneClient is Tune for the options of one server that UniversalOptions
// cannot carry whole: those redis.ParseURL reads, whose Network may be a
// unix socket. It sets what Tune sets (TestTuneClientIsTune).
func TuneClient(opts *redis.Options) {
	u := redis.UniversalOptions{Addrs: []string{opts.Addr}}
	Tune(&u)
	t := u.Simple()
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout = t.DialTimeout, t.ReadTimeout, t.WriteTimeout, t.PoolTimeout
	opts.MaxRetries, opts.Protocol = t.MaxRetries, t.Protocol
	opts.DisableIdentity, opts.ContextTimeoutEnabled = t.DisableIdentity, t.ContextTimeoutEnabled
}
