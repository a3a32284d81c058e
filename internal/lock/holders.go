package lock

import (
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

// Holder is one live grant of a key, as readers see it: never its token.
type Holder struct {
	// Value is the grant's value (JSON), or "".
	Value      string
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
