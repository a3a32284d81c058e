package lock

import (
	"fmt"
	"strings"
)

// Kind is what a resource is: a lock or a semaphore. Each kind has its own
// keys in Redis, so a lock and a semaphore of the same name have their own
// holders, history, fences and queue.
type Kind uint8

const (
	// KindLock is a lock: one exclusive holder, or shared holders.
	KindLock Kind = iota + 1
	// KindSemaphore is a semaphore: up to its limit of permits.
	KindSemaphore
)

// String is the kind's noun, as the API and the dashboard say it.
func (k Kind) String() string {
	switch k {
	case KindLock:
		return "lock"
	case KindSemaphore:
		return "semaphore"
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

// String is the kind and the name, for errors and logs.
func (r Resource) String() string { return r.Kind.String() + " " + r.Name }

// semPrefix starts a semaphore's name inside its Redis keys
// (lockd:{sem/name}:…). "/" is outside the key alphabet (ValidKey), so no
// lock's name starts with it. The layout predates Resource and stays, so
// no data moves.
const semPrefix = "sem/"

// id is the resource's part of its Redis key names (keys.go): the name of
// a lock, semPrefix and the name of a semaphore.
func (r Resource) id() string {
	if r.Kind == KindSemaphore {
		return semPrefix + r.Name
	}
	return r.Name
}

// resourceOf reads back the resource whose Redis keys carry id (listing,
// events, the sweeper's schedule).
func resourceOf(id string) Resource {
	if name, ok := strings.CutPrefix(id, semPrefix); ok {
		return Semaphore(name)
	}
	return Lock(id)
}

// check refuses a resource of no known kind: a zero Resource is a caller's
// bug, not a lock named "".
func (r Resource) check() error {
	if r.Kind != KindLock && r.Kind != KindSemaphore {
		return fmt.Errorf("lock: resource %q has no kind", r.Name)
	}
	return nil
}
