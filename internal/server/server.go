package server

import (
	"cmp"
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/authlimit"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/tracing"
)

// Engine is what the server needs from the lock engine.
type Engine interface {
	Acquire(ctx context.Context, res lock.Resource, req lock.AcquireRequest) (lock.Lease, error)
	Renew(ctx context.Context, res lock.Resource, req lock.RenewRequest) (lock.Lease, error)
	Release(ctx context.Context, res lock.Resource, token, actor string) (lock.Released, error)
	// GiveBack is Release of a grant whose caller never had it (it left
	// before the answer): no hold window keeps the key after it.
	GiveBack(ctx context.Context, res lock.Resource, token, actor string) (lock.Released, error)
	ForceReleaseFence(ctx context.Context, res lock.Resource, fence int64, actor, reason string) (lock.Broken, error)
	RequestRelease(ctx context.Context, res lock.Resource, fence int64, by, reason, actor string) (lock.RequestedRelease, error)
	Handover(ctx context.Context, res lock.Resource, token, to, actor string) (lock.Released, error)
	State(ctx context.Context, res lock.Resource) (lock.State, error)
	List(ctx context.Context, kind lock.Kind, prefix string, limit int, cursor string) (lock.Page, error)
	History(ctx context.Context, res lock.Resource, limit int) ([]lock.Event, error)
	Renewals(ctx context.Context, res lock.Resource, limit int) ([]lock.Event, error)
	// Subscribe follows the event stream after the event with ID after ("": from now on).
	Subscribe(ctx context.Context, after string) (*lock.Subscription, error)
	// Ready reports whether Redis can take writes now (/readyz).
	Ready(ctx context.Context) error
	// Topology reports the Redis nodes and their roles (/readyz).
	Topology(ctx context.Context) lock.Topology
	// EndQuarantine ends the restart quarantine for every lockd on the
	// same Redis (POST /v1/admin/quarantine/end).
	EndQuarantine(ctx context.Context) (time.Duration, error)
	Waiters() int
	// MissedAcks counts writes that missed their replica acks; an engine
	// without replica acks answers lock.ErrUnsupported, and the metric is
	// not exported.
	MissedAcks() (int64, error)
	// RestoredLeases counts what this lockd put back after Redis lost its
	// data (the restored metric).
	RestoredLeases() lock.Restored
	HeldKeys(ctx context.Context) (int64, error)
	// OnLapse sets the function told of every lapse (the lapse metrics).
	OnLapse(f lock.LapseFunc)
	// The session operations take the session's scope: sessionScope.
	CreateSession(ctx context.Context, scope, owner string, ttl time.Duration) (lock.Session, error)
	GetSession(ctx context.Context, scope, id string) (lock.Session, error)
	RenewSession(ctx context.Context, scope, id, actor string) (lock.Session, error)
	EndSession(ctx context.Context, scope, id string) (lock.Session, error)
	// Lock sets: several locks all or nothing, by one token.
	AcquireSet(ctx context.Context, req lock.SetRequest) (lock.SetLease, error)
	RenewSet(ctx context.Context, token string, ttl time.Duration, actor string) (lock.SetLease, error)
	ReleaseSet(ctx context.Context, token, actor string) (int, error)
}

// lock.Service offers everything the server needs.
var _ Engine = lock.Service(nil)

// Config holds the server's limits.
type Config struct {
	DefaultTTL time.Duration
	MaxTTL     time.Duration
	MaxWait    time.Duration
	// LockDelay is the lock-delay of an exclusive acquire that names none
	// (lock_delay_ms); zero by default.
	LockDelay time.Duration
	// MaxHolds caps concurrent /hold streams.
	MaxHolds int
	// MaxHoldsPerAPIKey, MaxWaitersPerAPIKey and MaxEventStreamsPerAPIKey
	// cap the hold streams, waiting acquires and event streams of one API
	// key (auth on), unless its entry in the auth file says otherwise
	// (max_holds, max_waiters, max_event_streams). Zero means
	// DefaultShare of MaxHolds, of 10,000 (lockd serve's --max-waiters
	// default) and of MaxEventStreams.
	MaxHoldsPerAPIKey        int
	MaxWaitersPerAPIKey      int
	MaxEventStreamsPerAPIKey int
	// MaxGrants, MaxValueBytes and MaxSessions are what this process's
	// API keys may keep in Redis in all (auth on): live grants, the bytes
	// of their values, sessions. Zero means DefaultMaxGrants,
	// DefaultMaxValueBytes and DefaultMaxSessions.
	MaxGrants, MaxValueBytes, MaxSessions int
	// MaxGrantsPerAPIKey, MaxValueBytesPerAPIKey and MaxSessionsPerAPIKey
	// are one API key's quotas of those, unless its entry in the auth file
	// says otherwise (max_grants, max_value_bytes, max_sessions); zero
	// means DefaultShare of the budget.
	MaxGrantsPerAPIKey, MaxValueBytesPerAPIKey, MaxSessionsPerAPIKey int
	// MaxTTLPerAPIKey is the longest TTL (of a lease or a session) an API
	// key may ask for, unless its entry in the auth file says otherwise
	// (max_ttl); zero means MaxTTL. Neither goes beyond MaxTTL.
	MaxTTLPerAPIKey time.Duration
	// MaxEventReadsPerAPIKey is how many events of the event stream one
	// API key's Last-Event-ID resumes may read a minute (auth on), unless
	// its entry in the auth file says otherwise (max_event_reads); zero
	// means DefaultEventReads.
	MaxEventReadsPerAPIKey int
	// HoldHeartbeat is the interval of the hold stream's comment lines;
	// zero means 10 s (the contract asks for at least one every 15 s).
	HoldHeartbeat time.Duration
	// MaxEventStreams caps concurrent GET /v1/events streams (default
	// 1000); beyond, 429. Their heartbeat is HoldHeartbeat's.
	MaxEventStreams int
	// Contention labels the contention metrics by key prefix; the zero
	// value is one segment and at most 100 prefixes.
	Contention ContentionConfig
	// Keys are the API keys; nil or empty turns auth off.
	Keys *auth.Keyring
	// MetricsAuth makes /metrics need a key with the read scope.
	MetricsAuth bool
	// CheckHost refuses requests whose Host is not localhost, a loopback
	// address or one of AllowedHosts (DNS rebinding). lockd serve sets it
	// with auth off, or when --allowed-hosts is given.
	CheckHost bool
	// AllowedHosts are the extra Host names accepted when CheckHost is set.
	AllowedHosts []string
	// UnknownKeys limits the unknown API keys answered per client address;
	// beyond its limit, a request with an unknown key gets 429. Valid keys
	// are never limited. lockd serve shares it with the dashboard's
	// sign-in. Nil means authlimit's defaults (10, then 1 per second).
	UnknownKeys *authlimit.Limiter
	// Tracer records the spans of requests, waits and (through its Redis
	// hook, installed on the engine's clients) Redis calls; nil records
	// none but still gives each request a trace id (traceparent's, or a
	// new one) for its log lines.
	Tracer *tracing.Tracer
	// AllowIPHosts accepts any IP address as Host when CheckHost is set:
	// a rebinding page sends its DNS name, never an address. lockd serve
	// sets it on a listener beyond loopback.
	AllowIPHosts bool
}

// DefaultConfig is the contract's defaults.
func DefaultConfig() Config {
	return Config{DefaultTTL: 30 * time.Second, MaxTTL: 24 * time.Hour, MaxWait: 60 * time.Second, MaxHolds: 1000,
		HoldHeartbeat: 10 * time.Second}
}

// Server implements the generated strict server interface on an Engine.
type Server struct {
	engine  Engine
	log     zerolog.Logger
	cfg     Config
	metrics *metrics
	holds   chan struct{} // one slot per open hold stream
	quotas  *quotas       // hold streams, waiters and event streams of each API key
	reads   *readBudget   // events each API key's resumes may still read
	books   *books        // what each API key keeps in Redis (book.go)
	// unknownKeys limits unknown API keys per client address.
	unknownKeys *authlimit.Limiter
	closing     chan struct{} // closed by Shutdown: ends hold streams
	streams     chan struct{} // one slot per open event stream

	// contention are the per-prefix wait, hold and acquire series.
	contention *contention
	// pageKind is the dashboard's Dashboard.KindOf (nil without one).
	pageKind func(*http.Request) lock.Kind
}

var _ api.StrictServerInterface = (*Server)(nil)

// New returns a server on engine. Its metrics are registered on reg.
func New(engine Engine, log zerolog.Logger, cfg Config, reg prometheus.Registerer) *Server {
	def := DefaultConfig()
	if cfg.DefaultTTL <= 0 {
		cfg.DefaultTTL = def.DefaultTTL
	}
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = def.MaxTTL
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = def.MaxWait
	}
	if cfg.MaxHolds <= 0 {
		cfg.MaxHolds = def.MaxHolds
	}
	if cfg.MaxHoldsPerAPIKey <= 0 {
		cfg.MaxHoldsPerAPIKey = DefaultShare(cfg.MaxHolds)
	}
	if cfg.MaxWaitersPerAPIKey <= 0 {
		cfg.MaxWaitersPerAPIKey = DefaultShare(10_000)
	}
	if cfg.HoldHeartbeat <= 0 {
		cfg.HoldHeartbeat = def.HoldHeartbeat
	}
	if cfg.MaxEventStreams <= 0 {
		cfg.MaxEventStreams = 1000
	}
	if cfg.MaxEventStreamsPerAPIKey <= 0 {
		cfg.MaxEventStreamsPerAPIKey = DefaultShare(cfg.MaxEventStreams)
	}
	cfg.MaxGrants = cmp.Or(max(cfg.MaxGrants, 0), DefaultMaxGrants)
	cfg.MaxValueBytes = cmp.Or(max(cfg.MaxValueBytes, 0), DefaultMaxValueBytes)
	cfg.MaxSessions = cmp.Or(max(cfg.MaxSessions, 0), DefaultMaxSessions)
	cfg.MaxGrantsPerAPIKey = cmp.Or(max(cfg.MaxGrantsPerAPIKey, 0), DefaultShare(cfg.MaxGrants))
	cfg.MaxValueBytesPerAPIKey = cmp.Or(max(cfg.MaxValueBytesPerAPIKey, 0), DefaultShare(cfg.MaxValueBytes))
	cfg.MaxSessionsPerAPIKey = cmp.Or(max(cfg.MaxSessionsPerAPIKey, 0), DefaultShare(cfg.MaxSessions))
	if cfg.MaxEventReadsPerAPIKey <= 0 {
		cfg.MaxEventReadsPerAPIKey = DefaultEventReads
	}
	if cfg.UnknownKeys == nil {
		cfg.UnknownKeys = authlimit.New(authlimit.DefaultBurst, authlimit.DefaultRefill)
	}
	cont := newContention(reg, cfg.Contention, cfg.Keys.Prefixes())
	engine.OnLapse(cont.lapsed)
	s := &Server{
		unknownKeys: cfg.UnknownKeys,
		quotas:      newQuotas(),
		reads:       newReadBudget(),
		books:       newBooks(),
		engine:      engine,
		log:         log,
		cfg:         cfg,
		metrics:     newMetrics(reg, engine),
		holds:       make(chan struct{}, cfg.MaxHolds),
		streams:     make(chan struct{}, cfg.MaxEventStreams),
		closing:     make(chan struct{}),
	}
	s.contention = cont
	// Every grant, renewal, release and session passes the books.
	s.engine = quotaEngine{Engine: engine, s: s}
	return s
}

// MaxWait is the longest wait_ms the server accepts, after defaults: the
// HTTP server's write timeout must outlast it.
func (s *Server) MaxWait() time.Duration { return s.cfg.MaxWait }

// Shutdown ends the open hold streams, releasing their leases. Waiting
// acquires are answered by closing the engine.
func (s *Server) Shutdown() {
	select {
	case <-s.closing:
	default:
		close(s.closing)
	}
}
