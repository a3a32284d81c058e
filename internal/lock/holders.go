package lock

import (
	"strings"
	"time"
)

// Mode is how a grant holds its key.
type Mode string

// Modes. A lock is held by one exclusive holder or by any number of shared
// holders; a semaphore's holders hold permits, at most its limit at once.
const (
	Exclusive Mode = "exclusive"
	Shared    Mode = "shared"
	Permit    Mode = "permit"
)

// MaxLimit is the largest semaphore limit, and the most shared holders a
// key may have (Options.MaxHoldersPerKey).
const MaxLimit = 10_000

// StatePage is the most holders and queue entries a state lists: a key's
// state costs Redis the same whatever it holds (State.HoldersTotal and
// State.Waiters count them all).
const StatePage = 100

// semPrefix starts the engine key of a semaphore. "/" is outside the key
// alphabet (ValidKey), so no lock key starts with it: a semaphore and a
// lock of the same name are different keys with their own Redis keys,
// history, fences and queue, and every engine operation works on both.
const semPrefix = "sem/"

// SemaphoreKey is the engine key of the semaphore named name.
func SemaphoreKey(name string) string { return semPrefix + name }

// SplitKey says what an engine key names: a lock, or (semaphore true) the
// semaphore name.
func SplitKey(key string) (name string, semaphore bool) {
	if name, ok := strings.CutPrefix(key, semPrefix); ok {
		return name, true
	}
	return key, false
}

// Holder is one live grant of a key, as readers see it: never its token.
type Holder struct {
	Owner      string
	Mode       Mode
	Fence      int64
	Count      int
	TTL        time.Duration
	AcquiredAt time.Time
	ExpiresAt  time.Time
	Remaining  time.Duration
}

// Queued is one request waiting for a key, in the order of the queue.
type Queued struct {
	Owner        string
	Mode         Mode
	WaitingSince time.Time
}
