package lock

import (
	"testing"
	"time"
)

// A Cluster slot's marker stops being refreshed only when this process
// has not met it for epochIdle and knows of no lease that may be live in
// its bucket.
func TestEpochIdle(t *testing.T) {
	now := time.Now()
	long := now.Add(-2 * epochIdle)
	tests := []struct {
		name string
		s    epochSeen
		idle bool
	}{
		{"used just now", epochSeen{used: now}, false},
		{"unused, nothing live", epochSeen{used: long}, true},
		{"unused, a lease read live", epochSeen{used: long, read: now.Add(time.Minute)}, false},
		{"unused, an own lease live", epochSeen{used: long, own: now.Add(time.Second)}, false},
	}
	for _, tc := range tests {
		if got := tc.s.idle(now); got != tc.idle {
			t.Errorf("%s: idle = %v, want %v", tc.name, got, tc.idle)
		}
	}
}
