package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/authlimit"
	"github.com/lockd/lockd/internal/embedded"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lock/store"
	"github.com/lockd/lockd/internal/mcp"
	"github.com/lockd/lockd/internal/server"
	"github.com/lockd/lockd/internal/tracing"
	"github.com/lockd/lockd/internal/web"
	"github.com/lockd/lockd/internal/webhook"
)

// serveConfig is lockd serve's configuration, from flags and LOCKD_* variables.
type serveConfig struct {
	listen           string
	redisURL         string
	authFile         string
	authYAML         string // LOCKD_AUTH_YAML: the auth file's content
	leaseSecretFile  string
	proofs           leaseProofs // the lease proofs' signer and where its secret came from
	keys             *auth.Keyring
	tlsCert, tlsKey  string
	creds            credentials // LOCKD_REDIS_* and LOCKD_SENTINEL_*
	metricsAuth      bool
	maxWaiters       int
	maxWaitersPerKey int
	maxHoldersPerKey int
	insecureNoAuth   bool
	strictPrefixes   bool
	defaultTTL       time.Duration
	maxTTL           time.Duration
	maxWait          time.Duration
	maxHolds         int
	maxConns         int
	keyMaxHolds      int
	keyMaxWaiters    int
	historyMax       int
	historyRetention time.Duration
	logFormat        string
	logLevel         string
	shutdownTimeout  time.Duration
	allowedHosts     []string
	replicaAcks      int
	replicaAckWait   time.Duration
	quarantine       bool
	redlock          string
	lockDelay        time.Duration

	// Events, webhooks and contention metrics.
	eventsMax        int
	eventsResumeMax  int
	maxEventStreams  int
	keyMaxEvents     int
	keyMaxEventReads int

	// What API keys keep in Redis (server.Config.MaxGrants and the rest).
	maxGrants, maxValueBytes, maxSessions          int
	keyMaxGrants, keyMaxValueBytes, keyMaxSessions int
	keyMaxTTL                                      time.Duration
	webhooksFile                                   string
	webhooks                                       []webhook.Hook
	metricsPrefixDepth                             int
	metricsMaxPrefixes                             int

	// otlpEndpoint is where spans are exported (OTLP/HTTP); empty: none.
	otlpEndpoint string

	// allowExamples starts lockd with exampleKeys and exampleSecret,
	// the secrets lockd's own files show, which it otherwise refuses.
	allowExamples bool
	exampleKeys   []string // the API keys' names
	exampleSecret bool     // LOCKD_SESSION_SECRET
	exampleRedis  []string // LOCKD_REDIS_PASSWORD, LOCKD_SENTINEL_PASSWORD
}

// parseServe reads flags; each flag's default comes from LOCKD_<FLAG>.
func parseServe(args []string, getenv func(string) string, stderr io.Writer) (serveConfig, error) {
	var c serveConfig
	fs := flag.NewFlagSet("lockd serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := envDefaults{getenv: getenv}
	fs.StringVar(&c.listen, "listen", env.str("listen", "127.0.0.1:8080"), "address to listen on")
	fs.StringVar(&c.redisURL, "redis", env.str("redis", ""), "Redis URL: redis://[user:pass@]host:6379/0 (rediss:// for TLS), redis-sentinel://host:26379[,host:port…]/MASTER[/DB], redis-cluster://host:7000[,host:port…]; empty: the embedded in-process store")
	fs.StringVar(&c.authFile, "auth-file", env.str("auth-file", ""), "YAML file of API keys (see README); LOCKD_AUTH_YAML may hold the same YAML instead")
	fs.StringVar(&c.leaseSecretFile, "lease-secret-file", env.str("lease-secret-file", ""), "file with the secret that signs lease proofs, shared by every replica (32 bytes or more; a second line: the previous secret, during a rotation); default: one derived from the auth file, else a random one of this process")
	fs.BoolVar(&c.insecureNoAuth, "insecure-no-auth", env.bool("insecure-no-auth", false), "allow listening on a non-loopback address without API keys")
	fs.BoolVar(&c.allowExamples, "allow-example-credentials", env.bool("allow-example-credentials", false), "start even though an API key, LOCKD_SESSION_SECRET or a Redis password is one that lockd's repository shows (deploy/, docs/) or starts with change-me, which lockd otherwise refuses; it warns on every start. For a demo on a trusted machine only")
	fs.BoolVar(&c.strictPrefixes, "strict-prefixes", env.bool("strict-prefixes", false), "refuse to start when an API key's prefix does not end in a separator (: / . - _ @), which would also cover longer names (a:1 covers a:10)")
	fs.StringVar(&c.tlsCert, "tls-cert", env.str("tls-cert", ""), "PEM certificate: serve HTTPS (with --tls-key)")
	fs.StringVar(&c.tlsKey, "tls-key", env.str("tls-key", ""), "PEM private key of --tls-cert")
	fs.BoolVar(&c.metricsAuth, "metrics-auth", env.bool("metrics-auth", true), "with API keys configured, /metrics needs a key with the read scope and no prefixes; false opens it to anyone (it shows the tenants' key prefixes and their activity)")
	fs.IntVar(&c.maxWaiters, "max-waiters", env.int("max-waiters", 10000), "most requests waiting at once in this process (beyond: 429)")
	fs.IntVar(&c.maxWaitersPerKey, "max-waiters-per-key", env.int("max-waiters-per-key", 1000), "most requests waiting on one key in this process (beyond: 429)")
	fs.IntVar(&c.maxHoldersPerKey, "max-holders-per-key", env.int("max-holders-per-key", lock.MaxLimit), "most live shared holders or permits of one key (beyond: 409 too_many_holders)")
	fs.DurationVar(&c.defaultTTL, "default-ttl", env.dur("default-ttl", 30*time.Second), "lease TTL when a request gives none")
	fs.DurationVar(&c.maxTTL, "max-ttl", env.dur("max-ttl", 24*time.Hour), "longest TTL a request may ask for")
	fs.DurationVar(&c.maxWait, "max-wait", env.dur("max-wait", 60*time.Second), "longest wait a request may ask for")
	fs.DurationVar(&c.lockDelay, "lock-delay", env.dur("lock-delay", 0), "lock-delay of an exclusive acquire that names none (lock_delay_ms): after a lease ends by expiry or force-release, nobody gets the key for this long (0 … 1m; not with --redlock)")
	fs.IntVar(&c.maxHolds, "max-holds", env.int("max-holds", 1000), "most /hold streams open at once")
	fs.IntVar(&c.maxConns, "max-conns", env.int("max-conns", 16384), "most client connections open at once; at the cap a new one takes the slot of the connection idle the longest (or waits while every one is busy); 0: no limit")
	fs.IntVar(&c.keyMaxHolds, "max-holds-per-api-key", env.int("max-holds-per-api-key", 0), "most /hold streams of one API key (auth file max_holds overrides); 0: a tenth of --max-holds")
	fs.IntVar(&c.keyMaxWaiters, "max-waiters-per-api-key", env.int("max-waiters-per-api-key", 0), "most waiting acquires of one API key (auth file max_waiters overrides); 0: a tenth of --max-waiters")
	fs.IntVar(&c.historyMax, "history-max", env.int("history-max", 100), "events kept per key (at least)")
	fs.DurationVar(&c.historyRetention, "history-retention", env.dur("history-retention", 24*time.Hour), "how long a key's history outlives its last event")
	fs.StringVar(&c.logFormat, "log-format", env.str("log-format", "json"), "json or console")
	fs.StringVar(&c.logLevel, "log-level", env.str("log-level", "info"), "debug, info, warn or error")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", env.dur("shutdown-timeout", 10*time.Second), "how long to drain requests on SIGTERM")
	fs.IntVar(&c.replicaAcks, "replica-acks", env.int("replica-acks", 0), "answer a grant, renewal or release only after this many replicas of the key's master acknowledged it (Redis WAIT); a grant that misses them is undone and answered 503")
	fs.DurationVar(&c.replicaAckWait, "replica-ack-timeout", env.dur("replica-ack-timeout", 50*time.Millisecond), "how long a write waits for --replica-acks")
	fs.StringVar(&c.redlock, "redlock", env.str("redlock", ""), "comma-separated redis:// or rediss:// URLs of an odd number (3 or more) of independent Redis masters: grant by majority (Redlock) instead of --redis")
	fs.BoolVar(&c.quarantine, "restart-quarantine", env.bool("restart-quarantine", true), "after Redis lost its data (restart without persistence, failover to an empty replica, flush), grant nothing until every lease it may have forgotten has expired")
	fs.IntVar(&c.eventsMax, "events-max", env.int("events-max", 100_000), "lifecycle events kept in the shared event stream (GET /v1/events resume, webhook backlog)")
	fs.IntVar(&c.eventsResumeMax, "events-resume-max", env.int("events-resume-max", lock.DefaultEventsResumeMax), "most events a Last-Event-ID resume reads; from further back, the stream sends a reset")
	fs.IntVar(&c.maxEventStreams, "max-event-streams", env.int("max-event-streams", 1000), "most GET /v1/events streams open at once (beyond: 429)")
	fs.IntVar(&c.keyMaxEvents, "max-event-streams-per-api-key", env.int("max-event-streams-per-api-key", 0), "most event streams of one API key (auth file max_event_streams overrides); 0: a tenth of --max-event-streams")
	fs.IntVar(&c.keyMaxEventReads, "max-event-reads-per-api-key", env.int("max-event-reads-per-api-key", server.DefaultEventReads), "most events of the event stream one API key's Last-Event-ID resumes may read a minute (auth file max_event_reads overrides); beyond, a resume gets 429")
	fs.IntVar(&c.maxGrants, "max-grants", env.int("max-grants", server.DefaultMaxGrants), "most live grants (leases, shared holds, permits, leaderships) all API keys may keep through this process; each key's default quota is a tenth (beyond: 429)")
	fs.IntVar(&c.keyMaxGrants, "max-grants-per-api-key", env.int("max-grants-per-api-key", 0), "most live grants of one API key through this process (auth file max_grants overrides); 0: a tenth of --max-grants")
	fs.IntVar(&c.maxValueBytes, "max-value-bytes", env.int("max-value-bytes", server.DefaultMaxValueBytes), "most bytes of grant values all API keys may keep through this process; each key's default quota is a tenth (beyond: 429)")
	fs.IntVar(&c.keyMaxValueBytes, "max-value-bytes-per-api-key", env.int("max-value-bytes-per-api-key", 0), "most bytes of values of one API key's live grants through this process (auth file max_value_bytes overrides); 0: a tenth of --max-value-bytes")
	fs.IntVar(&c.maxSessions, "max-sessions", env.int("max-sessions", server.DefaultMaxSessions), "most live sessions all API keys may keep through this process; each key's default quota is a tenth (beyond: 429)")
	fs.IntVar(&c.keyMaxSessions, "max-sessions-per-api-key", env.int("max-sessions-per-api-key", 0), "most live sessions of one API key through this process (auth file max_sessions overrides); 0: a tenth of --max-sessions")
	fs.DurationVar(&c.keyMaxTTL, "max-ttl-per-api-key", env.dur("max-ttl-per-api-key", 0), "longest TTL (lease or session) an API key may ask for (auth file max_ttl overrides); 0: --max-ttl")
	fs.StringVar(&c.webhooksFile, "webhooks-file", env.str("webhooks-file", ""), "YAML file of webhook endpoints (url, secret, events, prefixes, allow_private, concurrency); see docs/operations.md; not with --redlock, which has no event stream")
	fs.IntVar(&c.metricsPrefixDepth, "metrics-prefix-depth", env.int("metrics-prefix-depth", 1), "key segments (split at ':') that label the contention metrics")
	fs.IntVar(&c.metricsMaxPrefixes, "metrics-max-prefixes", env.int("metrics-max-prefixes", 100), "most distinct key-prefix labels; further prefixes count as other")
	fs.StringVar(&c.otlpEndpoint, "otlp-endpoint", env.str("otlp-endpoint", ""), "OTLP/HTTP URL to export OpenTelemetry spans to (each request, its wait in the queue, its Redis calls), e.g. http://otel-collector:4318 (/v1/traces is added to a URL without a path); empty: no spans, trace ids are still logged")
	allowedHosts := fs.String("allowed-hosts", env.str("allowed-hosts", ""), "comma-separated Host names served besides localhost, IP addresses (loopback ones only on a loopback listener) and the --listen name; "+
		"given, every request's Host is checked (with auth off it always is)")
	if err := parseFlags(fs, args); err != nil {
		return c, err
	}
	if env.err != nil {
		return c, usageError("%v", env.err)
	}
	if fs.NArg() > 0 {
		return c, usageError("serve takes no arguments, got %q", fs.Args())
	}
	for _, h := range strings.Split(*allowedHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			c.allowedHosts = append(c.allowedHosts, h)
		}
	}
	c.authYAML = getenv("LOCKD_AUTH_YAML")
	// Secrets come from the environment only: a flag would show in ps.
	c.creds = credentials{
		user: getenv("LOCKD_REDIS_USERNAME"), password: getenv("LOCKD_REDIS_PASSWORD"),
		sentinelUser: getenv("LOCKD_SENTINEL_USERNAME"), sentinelPassword: getenv("LOCKD_SENTINEL_PASSWORD"),
	}
	keys, examples, authData, err := loadKeys(c.authFile, c.authYAML)
	if err != nil {
		return c, err
	}
	c.keys, c.exampleKeys = keys, examples
	if c.proofs, err = loadLeaseProofs(c.leaseSecretFile, authData); err != nil {
		return c, err
	}
	c.exampleSecret = auth.IsExample(getenv("LOCKD_SESSION_SECRET"))
	for _, v := range []string{"LOCKD_REDIS_PASSWORD", "LOCKD_SENTINEL_PASSWORD"} {
		if auth.IsExample(getenv(v)) {
			c.exampleRedis = append(c.exampleRedis, v)
		}
	}
	if c.webhooks, err = loadWebhooks(c.webhooksFile); err != nil {
		return c, err
	}
	return c, c.validate()
}

// loadWebhooks reads --webhooks-file; none means no webhooks.
func loadWebhooks(path string) ([]webhook.Hook, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError("--webhooks-file: %v", err)
	}
	hooks, err := webhook.Parse(b)
	if err != nil {
		return nil, usageError("--webhooks-file %s: %v", path, err)
	}
	return hooks, nil
}

// loadKeys reads the API keys from --auth-file or LOCKD_AUTH_YAML; neither
// means auth is off. examples names the keys that are examples anyone can
// read (auth.ExampleKeys); data is the auth file's content.
func loadKeys(path, inline string) (keys *auth.Keyring, examples []string, data []byte, err error) {
	switch {
	case path != "" && inline != "":
		return nil, nil, nil, usageError("give --auth-file or LOCKD_AUTH_YAML, not both")
	case path != "":
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, nil, usageError("--auth-file: %v", err)
		}
		data = b
	case inline != "":
		data = []byte(inline)
	default:
		return nil, nil, nil, nil
	}
	keys, err = auth.Parse(data)
	if err != nil {
		return nil, nil, nil, usageError("%v", err)
	}
	return keys, auth.ExampleKeys(data), data, nil
}

// exampleCredentials says which of the configured secrets are examples
// that anyone can read, by the keys' names and the variable's, never by
// the secrets themselves; "" when none is.
func (c serveConfig) exampleCredentials() string {
	var what []string
	if n := len(c.exampleKeys); n > 0 {
		names := make([]string, n)
		for i, k := range c.exampleKeys {
			names[i] = strconv.Quote(k)
		}
		what = append(what, "API keys "+strings.Join(names, ", "))
	}
	if c.exampleSecret {
		what = append(what, "LOCKD_SESSION_SECRET")
	}
	what = append(what, c.exampleRedis...)
	return strings.Join(what, "; ")
}

func (c serveConfig) validate() error {
	switch {
	case c.defaultTTL < 100*time.Millisecond || c.maxTTL < c.defaultTTL:
		return usageError("need 100ms <= --default-ttl (%v) <= --max-ttl (%v)", c.defaultTTL, c.maxTTL)
	case c.maxWait <= 0:
		// 0 used to fall back to 60 s in the server while the write
		// timeout followed 0: a waiter granted after 15 s never got its
		// lease. Every request may say wait_ms 0 instead.
		return usageError("--max-wait must be positive (it caps wait_ms; requests that do not want to wait send wait_ms 0)")
	case c.keyMaxHolds < 0 || c.keyMaxWaiters < 0:
		return usageError("--max-holds-per-api-key and --max-waiters-per-api-key must not be negative (0: a tenth of the process-wide cap)")
	case c.maxConns < 0:
		return usageError("--max-conns must not be negative (0: no limit)")
	case c.maxHolds < 1:
		return usageError("--max-holds must be at least 1")
	case c.maxWaiters < 1 || c.maxWaitersPerKey < 1:
		return usageError("--max-waiters and --max-waiters-per-key must be at least 1")
	case c.maxHoldersPerKey < 1 || c.maxHoldersPerKey > lock.MaxLimit:
		return usageError("--max-holders-per-key must be within 1…%d", lock.MaxLimit)
	case (c.tlsCert == "") != (c.tlsKey == ""):
		return usageError("--tls-cert and --tls-key go together")
	case c.historyMax < 1:
		return usageError("--history-max must be at least 1")
	case c.historyRetention < time.Minute:
		return usageError("--history-retention must be at least 1m")
	case c.replicaAcks < 0:
		return usageError("--replica-acks must not be negative (0: do not wait for replicas)")
	case c.replicaAcks > 0 && (c.replicaAckWait < time.Millisecond || c.replicaAckWait > 10*time.Second):
		return usageError("--replica-ack-timeout must be between 1ms and 10s")
	case c.lockDelay < 0 || c.lockDelay > lock.MaxLockDelay:
		return usageError("--lock-delay must be between 0 and %v, got %v", lock.MaxLockDelay, c.lockDelay)
	case c.redlock != "" && c.lockDelay > 0:
		return usageError("--lock-delay does not work with --redlock: each master sees a lapse apart, so none can hold the key off for all")
	case c.redlock != "" && c.redisURL != "":
		return usageError("--redis and --redlock exclude each other: give one")
	case c.redlock != "" && c.replicaAcks > 0:
		return usageError("--replica-acks does not apply to --redlock's independent masters")
	case c.redlock != "" && c.webhooksFile != "":
		// Delivering from one master's stream would send grants that no
		// majority made and miss events that master did not take part in.
		return usageError("--webhooks-file (LOCKD_WEBHOOKS_FILE) does not work with --redlock: Redlock has no event stream " +
			"(each master records only the events it took part in); webhooks need --redis")
	case c.replicaAcks > 0 && c.redisURL == "":
		return usageError("--replica-acks needs --redis: the embedded store has no replicas")
	case c.eventsMax < 100:
		return usageError("--events-max must be at least 100")
	case c.eventsResumeMax < 1:
		return usageError("--events-resume-max must be at least 1")
	case c.maxGrants < 1 || c.maxValueBytes < 1 || c.maxSessions < 1:
		return usageError("--max-grants, --max-value-bytes and --max-sessions must be at least 1")
	case c.keyMaxGrants < 0 || c.keyMaxValueBytes < 0 || c.keyMaxSessions < 0 || c.keyMaxTTL < 0:
		return usageError("--max-grants-per-api-key, --max-value-bytes-per-api-key, --max-sessions-per-api-key and --max-ttl-per-api-key must not be negative (0: the default)")
	case c.keyMaxEventReads < 1:
		return usageError("--max-event-reads-per-api-key must be at least 1")
	case c.maxEventStreams < 1 || c.keyMaxEvents < 0:
		return usageError("--max-event-streams must be at least 1, --max-event-streams-per-api-key not negative (0: a tenth of --max-event-streams)")
	case c.metricsPrefixDepth < 1 || c.metricsMaxPrefixes < 1:
		return usageError("--metrics-prefix-depth and --metrics-max-prefixes must be at least 1")
	case c.logFormat != "json" && c.logFormat != "console":
		return usageError("--log-format must be json or console, not %q", c.logFormat)
	}
	if c.otlpEndpoint != "" {
		if _, err := tracing.EndpointURL(c.otlpEndpoint); err != nil {
			return usageError("--otlp-endpoint: %v", err)
		}
	}
	if _, err := zerolog.ParseLevel(c.logLevel); err != nil || c.logLevel == "" {
		return usageError("--log-level must be debug, info, warn or error, not %q", c.logLevel)
	}
	if open := c.keys.PrefixesWithoutSeparator(); c.strictPrefixes && len(open) > 0 {
		return usageError("--strict-prefixes: API key %s's prefix %q does not end in a separator (%s), so it also covers longer names; end it with one",
			open[0].Key, open[0].Prefix, auth.Separators)
	}
	if ex := c.exampleCredentials(); ex != "" && !c.allowExamples {
		return usageError("refusing to start with example credentials (%s): lockd's repository shows them (deploy/, docs/) "+
			"or they start with %q, so anyone can use them. Generate each secret with `openssl rand -hex 32` (store an API key "+
			"as its hash if you like: printf %%s \"$KEY\" | sha256sum, under sha256:); --allow-example-credentials starts anyway, "+
			"for a demo on a trusted machine", ex, auth.ExamplePrefix)
	}
	host, _, err := net.SplitHostPort(c.listen)
	if err != nil {
		return usageError("--listen %q: %v", c.listen, err)
	}
	if !isLoopback(host) && !c.keys.Enabled() && !c.insecureNoAuth {
		return usageError("refusing to listen on %s without API keys: anyone who reaches it could break any lock. "+
			"Listen on 127.0.0.1, or pass --insecure-no-auth if the network is trusted", c.listen)
	}
	return nil
}

// checkHost says whether requests' Host names are checked: always with
// auth off, where a DNS-rebinding web page visited by anyone who can reach
// lockd would otherwise act under its own name (on a trusted network as on
// loopback); and whenever --allowed-hosts names the expected ones.
func (c serveConfig) checkHost() bool {
	return len(c.allowedHosts) > 0 || !c.keys.Enabled()
}

// hostNames are the Host names served besides loopback ones: those of
// --allowed-hosts, and the listen address's own when it is a name.
func (c serveConfig) hostNames() []string {
	names := slices.Clone(c.allowedHosts)
	if h := hostOf(c.listen); h != "" && net.ParseIP(h) == nil && !isLoopback(h) {
		names = append(names, h)
	}
	return names
}

// ipHosts says whether any IP address is accepted as Host: on a listener
// beyond loopback clients may call lockd by any of the machine's
// addresses, and a rebinding page always sends its own DNS name, never an
// address.
func (c serveConfig) ipHosts() bool {
	return !isLoopback(hostOf(c.listen))
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// newEngine is the lock engine on topo: Redlock over its masters, or one
// engine on its client.
func newEngine(cfg serveConfig, topo topology) (lock.Service, error) {
	opts := lock.Options{
		HistoryMax: cfg.historyMax, Retention: cfg.historyRetention, MaxWait: cfg.maxWait,
		MaxWaiters: cfg.maxWaiters, MaxWaitersPerKey: cfg.maxWaitersPerKey, MaxHoldersPerKey: cfg.maxHoldersPerKey,
		Sentinel: topo.sentinel, ReplicaAcks: cfg.replicaAcks, ReplicaAckTimeout: cfg.replicaAckWait,
		NoQuarantine: !cfg.quarantine, MaxTTL: cfg.maxTTL, EventsMax: cfg.eventsMax,
		EventsResumeMax: cfg.eventsResumeMax, Proofs: cfg.proofs.signer,
	}
	if len(topo.masters) > 0 {
		r, err := lock.NewRedlock(topo.masters, opts)
		if err != nil {
			return nil, usageError("--redlock: %v", err)
		}
		return r, nil
	}
	return lock.New(topo.client, opts), nil
}

func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseServe(args, getenv, stderr)
	if err != nil {
		return err
	}
	log := newLogger(cfg, stdout)
	if ex := cfg.exampleCredentials(); ex != "" {
		log.Warn().Msg("INSECURE: started with example credentials (" + ex + ", --allow-example-credentials): lockd's repository " +
			"shows them, so anyone can use them; generate real ones with `openssl rand -hex 32`")
	}
	for _, p := range cfg.keys.PrefixesWithoutSeparator() {
		log.Warn().Str("api_key", p.Key).Str("prefix", p.Prefix).
			Msg("this API key's prefix does not end in a separator (: / . - _ @), so it also covers longer names " +
				"(a:1 covers a:10 and a:1x); end it with one unless that is meant (--strict-prefixes refuses such prefixes)")
	}

	cfg.proofs.log(log)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), newBuildInfo())

	tracer, err := startTracing(ctx, cfg, log)
	if err != nil {
		return err
	}
	// Deferred first, so run last: the spans of the drained requests are
	// sent too.
	defer stopTracing(tracer, log)
	topo, closeStore, err := openRedis(cfg, log, reg, tracer)
	if err != nil {
		return err
	}
	defer closeStore()

	engine, err := newEngine(cfg, topo)
	if err != nil {
		return err
	}
	// One limit on unknown keys per client address, shared by the API and
	// the dashboard's sign-in: alternating between them buys no guesses.
	unknownKeys := authlimit.New(authlimit.DefaultBurst, authlimit.DefaultRefill)
	srv := server.New(engine, log, server.Config{
		DefaultTTL: cfg.defaultTTL, MaxTTL: cfg.maxTTL, MaxWait: cfg.maxWait, LockDelay: cfg.lockDelay, MaxHolds: cfg.maxHolds,
		Keys: cfg.keys, MetricsAuth: cfg.metricsAuth, UnknownKeys: unknownKeys,
		CheckHost: cfg.checkHost(), AllowedHosts: cfg.hostNames(), AllowIPHosts: cfg.ipHosts(),
		MaxHoldsPerAPIKey: cfg.keyMaxHolds, MaxWaitersPerAPIKey: cmp.Or(cfg.keyMaxWaiters, server.DefaultShare(cfg.maxWaiters)),
		MaxEventStreams: cfg.maxEventStreams, MaxEventStreamsPerAPIKey: cfg.keyMaxEvents, MaxEventReadsPerAPIKey: cfg.keyMaxEventReads,
		MaxGrants: cfg.maxGrants, MaxValueBytes: cfg.maxValueBytes, MaxSessions: cfg.maxSessions,
		MaxGrantsPerAPIKey: cfg.keyMaxGrants, MaxValueBytesPerAPIKey: cfg.keyMaxValueBytes, MaxSessionsPerAPIKey: cfg.keyMaxSessions,
		MaxTTLPerAPIKey: cfg.keyMaxTTL,
		Contention:      server.ContentionConfig{PrefixDepth: cfg.metricsPrefixDepth, MaxPrefixes: cfg.metricsMaxPrefixes},
		Tracer:          tracer,
	}, reg)
	stopHooks, err := startWebhooks(cfg, engine, log, reg)
	if err != nil {
		_ = engine.Close()
		return err
	}
	defer stopHooks()

	dash, err := dashboard(cfg, getenv, engine, unknownKeys, log)
	if err != nil {
		_ = engine.Close()
		return err
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		_ = engine.Close()
		return fmt.Errorf("listen on %s: %w", cfg.listen, err)
	}
	// The write timeout follows the longest wait the server really allows,
	// so that a late grant is always delivered.
	// AI agents' MCP endpoint, /mcp: its claims last while an agent's MCP
	// session does, and at most the default TTL after it vanishes.
	version, _ := buildVersion()
	agents := mcp.NewHTTP(context.Background(), mcp.Options{TTL: cfg.defaultTTL, Version: version})
	defer agents.Close()
	httpSrv := newHTTPServer(srv.Handler(reg, withMCP{dash, agents, srv.RequireKey}), srv.MaxWait(), httpTimeouts)
	if cfg.maxConns > 0 {
		ln = limitConns(ln, httpSrv, cfg.maxConns, reg)
	}
	logAuth(cfg, ln, log)
	log.Info().Str("addr", ln.Addr().String()).Bool("tls", cfg.tlsCert != "").Msg("listening")
	// At a stop the agents' sessions end first, while the router and the
	// engine still serve the releases of their claims.
	serving, stopServing := context.WithCancel(context.Background())
	defer stopServing()
	go func() {
		select {
		case <-ctx.Done():
			agents.Close()
			stopServing()
		case <-serving.Done():
		}
	}()
	return serveUntilDone(serving, cfg, httpSrv, ln, srv, engine, log)
}

// limitConns caps the connections open on ln at maxConns. Each connection
// costs memory and a file descriptor; without a cap, idle keep-alive
// connections alone exhaust them. At the cap a new connection takes the
// slot of the one idle the longest, so that probes and new clients get in
// (connLimiter).
func limitConns(ln net.Listener, httpSrv *http.Server, maxConns int, reg prometheus.Registerer) net.Listener {
	limiter := newConnLimiter(ln, maxConns)
	httpSrv.ConnState = limiter.connState
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "lockd_http_connections", Help: "Client connections open, counted against --max-conns.",
		}, func() float64 { return float64(limiter.Open()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "lockd_http_idle_connections_closed_total",
			Help: "Idle keep-alive connections closed to make room for a new one at --max-conns.",
		}, func() float64 { return float64(limiter.IdleClosed()) }),
	)
	return limiter
}

// logAuth says whether API keys are required, and warns when nothing
// is.
func logAuth(cfg serveConfig, ln net.Listener, log zerolog.Logger) {
	switch {
	case cfg.keys.Enabled():
		log.Info().Int("keys", cfg.keys.Len()).Msg("auth on: API keys required")
	case isLoopback(hostOf(ln.Addr().String())):
		log.Warn().Msg("auth off: no API keys configured; listening on loopback only")
	default:
		log.Warn().Msg("INSECURE: auth off and listening on a non-loopback address; anyone who reaches it can take and break any lock. " +
			"Requests whose Host is not an IP address, localhost, the --listen name or one of --allowed-hosts are refused (DNS rebinding)")
	}
}

// serveUntilDone serves on ln until ctx ends, then shuts down: hold
// streams end and release their leases, open waits are answered 503, and
// requests get until --shutdown-timeout to finish.
func serveUntilDone(ctx context.Context, cfg serveConfig, httpSrv *http.Server, ln net.Listener, srv *server.Server, engine lock.Service, log zerolog.Logger) error {
	errc := make(chan error, 1)
	go func() {
		if cfg.tlsCert != "" {
			errc <- httpSrv.ServeTLS(ln, cfg.tlsCert, cfg.tlsKey)
			return
		}
		errc <- httpSrv.Serve(ln)
	}()
	select {
	case err := <-errc:
		_ = engine.Close()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}

	log.Info().Msg("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- httpSrv.Shutdown(sctx) }()
	srv.Shutdown()     // ends hold streams, releasing their leases
	_ = engine.Close() // answers open waits with 503
	if err := <-shut; err != nil {
		log.Warn().Err(err).Msg("requests still open at the shutdown timeout")
	}
	log.Info().Msg("stopped")
	return nil
}

// timeouts bound how long one client may hold a connection's goroutine.
type timeouts struct {
	header, read, idle, writeSlack time.Duration
}

var httpTimeouts = timeouts{header: 5 * time.Second, read: 15 * time.Second, idle: 120 * time.Second, writeSlack: 15 * time.Second}

// newHTTPServer is lockd's http.Server: a slow or silent client is cut off
// by the header, read, write and idle timeouts.
func newHTTPServer(h http.Handler, maxWait time.Duration, t timeouts) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: t.header,
		ReadTimeout:       t.read,
		// Waits answer within --max-wait; /hold streams set their own
		// deadline for each event.
		WriteTimeout:   maxWait + t.writeSlack,
		IdleTimeout:    t.idle,
		MaxHeaderBytes: 64 << 10,
	}
}

// openRedis connects to --redis, or starts the embedded store without it.
func openRedis(cfg serveConfig, log zerolog.Logger, reg prometheus.Registerer, tracer *tracing.Tracer) (topology, func(), error) {
	url := cfg.redisURL
	stop := func() {}
	var t topology
	if url == "" && cfg.redlock == "" {
		emb, err := embedded.Start()
		if err != nil {
			return topology{}, nil, err
		}
		stop = emb.Close
		// No port: the client dials the store over in-memory pipes, so no
		// other process can reach it (an open Redis would bypass API keys).
		opts := &redis.Options{Addr: "embedded", Dialer: emb.Dial}
		store.TuneClient(opts)
		t = topology{kind: "embedded", client: redis.NewClient(opts), addrs: []string{"in-process"}}
		log.Warn().Msg("no --redis given: using the EMBEDDED in-process store. Locks are NOT shared with other " +
			"lockd processes and are LOST when lockd stops. For real use: lockd serve --redis redis://host:6379/0")
	} else if cfg.redlock != "" {
		var err error
		if t, err = openRedlock(cfg.redlock, cfg.creds); err != nil {
			return topology{}, nil, usageError("--redlock: %v", err)
		}
		hook := newRedisHook(reg)
		for _, m := range t.masters {
			m.AddHook(hook)
			if tracer.Enabled() {
				m.AddHook(tracer.RedisHook())
			}
		}
		log.Info().Str("topology", t.kind).Strs("redis", t.addrs).Bool("tls", t.tls).Msg("redis")
		return t, func() {
			for _, m := range t.masters {
				_ = m.Close()
			}
		}, nil
	} else {
		var err error
		if t, err = openTopology(url, cfg.creds); err != nil {
			return topology{}, nil, usageError("--redis: %v", redactURL(err, url))
		}
	}
	t.client.AddHook(newRedisHook(reg))
	if tracer.Enabled() {
		t.client.AddHook(tracer.RedisHook())
	}
	log.Info().Str("topology", t.kind).Strs("redis", t.addrs).Bool("tls", t.tls).Msg("redis")
	return t, func() { _ = t.client.Close(); stop() }, nil
}

// redactURL is the message of err, a --redis URL's parse error, with no
// secret in it. url.Parse's own message quotes the whole URL (escaping " and
// \\, so that a search for the raw password misses it), and its reason may
// quote a piece of it (a password with a "/" reads as a port), so a URL
// that does not parse gets a fixed description. For a URL that parses, any
// password is masked in what go-redis says.
func redactURL(err error, raw string) string {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		reason := "it is malformed"
		switch msg := uerr.Err.Error(); {
		case strings.Contains(msg, "invalid port"):
			reason = "the port is not a number (a password with / : @ or other special characters must be percent-encoded)"
		case strings.Contains(msg, "userinfo"):
			reason = "the user or password has characters that must be percent-encoded"
		case strings.Contains(msg, "host"):
			reason = "the host is malformed"
		}
		return "not a valid URL (redis://[user:password@]host:port/db): " + reason
	}
	msg := err.Error()
	if u, perr := url.Parse(raw); perr == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "<redacted>")
		}
	}
	return msg
}

func hostOf(addr string) string {
	h, _, _ := net.SplitHostPort(addr)
	return h
}

func newLogger(cfg serveConfig, stdout io.Writer) zerolog.Logger {
	level, _ := zerolog.ParseLevel(cfg.logLevel)
	var w io.Writer = stdout
	if cfg.logFormat == "console" {
		// Colour codes only for a person at a terminal: in a file or a
		// pipe they are noise that grep and log shippers keep.
		w = zerolog.ConsoleWriter{Out: stdout, TimeFormat: time.RFC3339, NoColor: !isTerminal(stdout)}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

// isTerminal says whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// envDefaults reads LOCKD_<FLAG> defaults and remembers the first bad one.
type envDefaults struct {
	getenv func(string) string
	err    error
}

func (e *envDefaults) lookup(flag string) string {
	return e.getenv("LOCKD_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_")))
}

func (e *envDefaults) str(flag, def string) string {
	if v := e.lookup(flag); v != "" {
		return v
	}
	return def
}

func (e *envDefaults) dur(flag string, def time.Duration) time.Duration {
	v := e.lookup(flag)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil && e.err == nil {
		e.err = fmt.Errorf("LOCKD_%s=%q: %v", strings.ToUpper(strings.ReplaceAll(flag, "-", "_")), v, err)
	}
	return d
}

func (e *envDefaults) int(flag string, def int) int {
	v := e.lookup(flag)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil && e.err == nil {
		e.err = fmt.Errorf("LOCKD_%s=%q: not a whole number", strings.ToUpper(strings.ReplaceAll(flag, "-", "_")), v)
	}
	return n
}

func (e *envDefaults) bool(flag string, def bool) bool {
	v := e.lookup(flag)
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil && e.err == nil {
		e.err = fmt.Errorf("LOCKD_%s=%q: not true or false", strings.ToUpper(strings.ReplaceAll(flag, "-", "_")), v)
	}
	return b
}

// dashboard is the web UI. With API keys configured it asks for one at
// sign-in; its session cookies (and CSRF tokens) are signed with
// LOCKD_SESSION_SECRET when set, so that replicas behind one load balancer
// accept each other's, else with a random secret that ends sessions at
// restart. The secret is read from the environment only (never a flag,
// which ps would show) and never logged.
func dashboard(cfg serveConfig, getenv func(string) string, engine web.Engine, unknownKeys *authlimit.Limiter, log zerolog.Logger) (server.Dashboard, error) {
	d := web.NewDashboard(engine, log)
	if !cfg.keys.Enabled() {
		return d, nil
	}
	secret := getenv("LOCKD_SESSION_SECRET")
	if secret == "" {
		log.Warn().Msg("LOCKD_SESSION_SECRET is not set: dashboard sessions use a random secret, end when lockd restarts " +
			"and are not shared between replicas")
	}
	if err := d.RequireLogin(web.Login{Keys: cfg.keys, Secret: []byte(secret), UnknownKeys: unknownKeys}); err != nil {
		return nil, usageError("LOCKD_SESSION_SECRET must be at least %d bytes (e.g. openssl rand -hex 32)", web.MinSecretLen)
	}
	return d, nil
}
