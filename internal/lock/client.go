package lock

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// TuneClient sets the client options the engine is built for:
//
//   - bounded dial, read, write and pool timeouts, so that a call answers
//     ErrUnavailable within about 2 s when Redis is down, never hangs;
//   - no retries: a retried acquire whose first attempt did reach Redis
//     would find its own lease and call it held;
//   - RESP2: lockd uses no RESP3 feature, and go-redis checks for RESP3
//     push notifications before every command (about 3% of lockd's CPU);
//   - no CLIENT SETINFO on connect (DisableIdentity): under latency a
//     timed-out connection is redialled, and that handshake would cost one
//     more round trip per new connection;
//   - context deadlines honoured, so the engine's one deadline per call
//     (Options.CallTimeout) bounds pool wait, dial and round trip together.
func TuneClient(opts *redis.Options) {
	opts.DialTimeout = 700 * time.Millisecond
	opts.ReadTimeout = time.Second
	opts.WriteTimeout = time.Second
	opts.PoolTimeout = time.Second
	opts.MaxRetries = -1
	opts.Protocol = 2
	opts.DisableIdentity = true
	opts.ContextTimeoutEnabled = true
}
