package lock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Service is what a lock engine offers, on one Redis topology (Engine) or
// on a quorum of independent masters (Redlock). What an engine cannot do it
// answers with an error that errors.Is ErrUnsupported, never with an empty
// answer or a zero that would read as "nothing there": Redlock answers so
// for shared holds, every semaphore operation (ErrNoSemaphores), the event
// stream and its source (ErrNoEventStream), MissedAcks
// (ErrNoReplicaAcks), elections (ErrNoElections), sessions
// (ErrNoSessions), release requests (ErrNoReleaseRequests) and lock sets
// (ErrNoLockSets).
//
// Consumers declare the part they use (server.Engine, web.Engine); the
// composition root (cmd/lockd) holds a Service.
type Service interface {
	// Acquire takes the resource, re-enters it (req.Token) or, with
	// req.Wait > 0, waits for it.
	Acquire(ctx context.Context, res Resource, req AcquireRequest) (Lease, error)
	// Renew sets the lease's expiry to now + ttl (ttl 0: its own TTL).
	Renew(ctx context.Context, res Resource, req RenewRequest) (Lease, error)
	// Release gives back one level of the lease.
	Release(ctx context.Context, res Resource, token, actor string) (Released, error)
	// GiveBack is Release of a grant whose caller never had it: no hold
	// window keeps the key after it.
	GiveBack(ctx context.Context, res Resource, token, actor string) (Released, error)
	// ForceReleaseFence breaks the lease with this fence (0: whoever
	// holds the resource).
	ForceReleaseFence(ctx context.Context, res Resource, fence int64, actor, reason string) (Broken, error)
	// RequestRelease asks the exclusive holder (the one with this fence,
	// when not 0) to step aside.
	RequestRelease(ctx context.Context, res Resource, fence int64, by, reason, actor string) (RequestedRelease, error)
	// Handover gives up an election's leadership to the candidate to,
	// who leads next ahead of the queue.
	Handover(ctx context.Context, res Resource, token, to, actor string) (Released, error)
	// State is the resource's live lease, or ErrNotFound.
	State(ctx context.Context, res Resource) (State, error)
	// List lists the live resources of one kind whose name starts with
	// prefix, a page at a time.
	List(ctx context.Context, kind Kind, prefix string, limit int, after string) (Page, error)
	// History is up to limit events of the resource, newest first.
	History(ctx context.Context, res Resource, limit int) ([]Event, error)
	// Renewals is up to limit renewals of the resource, newest first.
	Renewals(ctx context.Context, res Resource, limit int) ([]Event, error)
	// Subscribe follows the event stream after the event with ID after
	// ("": from now on).
	Subscribe(ctx context.Context, after string) (*Subscription, error)
	// EventSource is where the event stream lives in Redis, for readers
	// with consumer groups (webhooks).
	EventSource() (EventSource, error)
	// Ready reports whether Redis can grant right now (/readyz).
	Ready(ctx context.Context) error
	// Recovering is how long the restart quarantine still lasts (0: none).
	Recovering() time.Duration
	// EndQuarantine ends the restart quarantine for every lockd on the
	// same Redis, and says how long it still had (0: none was on).
	EndQuarantine(ctx context.Context) (time.Duration, error)
	// Topology reports the topology and every node's role and
	// reachability.
	Topology(ctx context.Context) Topology
	// Waiters is the number of callers now waiting in this process.
	Waiters() int
	// MissedAcks counts writes that fewer replicas acknowledged than
	// Options.ReplicaAcks asked for.
	MissedAcks() (int64, error)
	// RestoredLeases counts what this process put back after Redis lost
	// its data, since it started.
	RestoredLeases() Restored
	// HeldKeys counts the keys that hold a lease now, store-wide, or
	// answers ErrUnsupported.
	HeldKeys(ctx context.Context) (int64, error)
	// OnLapse sets the function told of every lapse this process
	// records (for metrics). It must not block.
	OnLapse(f LapseFunc)
	// CreateSession starts a session in scope (session.go); GetSession,
	// RenewSession and EndSession read, renew and end one by its scope
	// and id. A session is found only in the scope that made it.
	CreateSession(ctx context.Context, scope, owner string, ttl time.Duration) (Session, error)
	GetSession(ctx context.Context, scope, id string) (Session, error)
	RenewSession(ctx context.Context, scope, id, actor string) (Session, error)
	EndSession(ctx context.Context, scope, id string) (Session, error)
	// AcquireSet takes several locks all or nothing (lockset.go);
	// RenewSet and ReleaseSet renew and release them all by the set's
	// token.
	AcquireSet(ctx context.Context, req SetRequest) (SetLease, error)
	RenewSet(ctx context.Context, token string, ttl time.Duration, actor string) (SetLease, error)
	ReleaseSet(ctx context.Context, token, actor string) (int, error)
	// Close wakes every waiting caller with ErrClosed and stops the
	// engine's work; it does not close the Redis clients.
	Close() error
}

var (
	_ Service = (*Engine)(nil)
	_ Service = (*Redlock)(nil)
)

// EventSource is where the event stream lives in Redis: the client that
// reaches it and its key.
type EventSource struct {
	Client redis.Cmdable
	Stream string
}

// EventSource is the event stream's client and key.
func (e *Engine) EventSource() (EventSource, error) {
	return EventSource{Client: e.EventClient(), Stream: e.EventStream()}, nil
}

// EventSource answers ErrNoEventStream: see Subscribe.
func (r *Redlock) EventSource() (EventSource, error) {
	return EventSource{}, ErrNoEventStream
}

// Handover answers ErrNoElections.
func (r *Redlock) Handover(context.Context, Resource, string, string, string) (Released, error) {
	return Released{}, ErrNoElections
}

// RequestRelease answers ErrNoReleaseRequests: a request lives in the
// lease, and each master keeps its own.
func (r *Redlock) RequestRelease(context.Context, Resource, int64, string, string, string) (RequestedRelease, error) {
	return RequestedRelease{}, ErrNoReleaseRequests
}

// RestoredLeases counts what this process put back on its masters.
func (r *Redlock) RestoredLeases() Restored {
	var out Restored
	for _, n := range r.nodes {
		out = out.plus(n.restored())
	}
	return out
}

// MissedAcks answers ErrNoReplicaAcks: Redlock refuses replica acks at the
// start (NewRedlock), and a count of 0 would read as "none missed".
func (r *Redlock) MissedAcks() (int64, error) {
	return 0, ErrNoReplicaAcks
}
