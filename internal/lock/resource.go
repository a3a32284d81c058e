package lock

import (
	"fmt"
	"strings"
)

// Kind is what a resource is: a lock, a semaphore or an election. Each kind has its own
// keys in Redis, so a lock and a semaphore of the same name have their own
// holders, history, fences and queue.
type Kind uint8

const (
	// KindLock is a lock: one exclusive holder, or shared holders.
	KindLock Kind = iota + 1
	// KindSemaphore is a semaphore: up to its limit of permits.
	KindSemaphore
	// KindElection is an election: one leader at a time, candidates served
	// in the order they began to campaign, each leadership's fence its
	// term.
	KindElection
)

// String is the kind's noun, as the API and the dashboard say it.
func (k Kind) String() string {
	switch k {
	case KindLock:
		return "lock"
	case KindSemaphore:
		return "semaphore"
	case KindElection:
		return "election"
	default:
		return "unknown kind"
	}
}

// Resource is what every engine operation names: a kind and a name that
// ValidKey accepts.
type Resource struct {
	Kind Kind
	Name string
}

// Lock is the lock called name.
func Lock(name string) Resource { return Resource{Kind: KindLock, Name: name} }

// Semaphore is the semaphore called name.
func Semaphore(name string) Resource { return Resource{Kind: KindSemaphore, Name: name} }

// Election is the election called name.
func Election(name string) Resource { return Resource{Kind: KindElection, Name: name} }

// String is the kind and the name, for errors and logs.
func (r Resource) String() string { return r.Kind.String() + " " + r.Name }

// semPrefix and electPrefix start a semaphore's and an election's name
// inside its Redis keys (lockd:{sem/name}:…, lockd:{elect/name}:…). "/" is
// outside the key alphabet (ValidKey), so no lock's name starts with
// either. The layout predates Resource and stays, so no data moves.
const (
	semPrefix   = "sem/"
	electPrefix = "elect/"
)

// id is the resource's part of its Redis key names (keys.go): the name of
// a lock, semPrefix and the name of a semaphore.
func (r Resource) id() string {
	switch r.Kind {
	case KindSemaphore:
		return semPrefix + r.Name
	case KindElection:
		return electPrefix + r.Name
	default:
		return r.Name
	}
}

// resourceOf reads back the resource whose Redis keys carry id (listing,
// events, the sweeper's schedule).
func resourceOf(id string) Resource {
	if name, ok := strings.CutPrefix(id, semPrefix); ok {
		return Semaphore(name)
	}
	if name, ok := strings.CutPrefix(id, electPrefix); ok {
		return Election(name)
	}
	return Lock(id)
}

// check refuses a resource of no known kind: a zero Resource is a caller's
// bug, not a lock named "".
func (r Resource) check() error {
	if r.Kind != KindLock && r.Kind != KindSemaphore && r.Kind != KindElection {
		return fmt.Errorf("lock: resource %q has no kind", r.Name)
	}
	return nil
}
