package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/problem"
)

// An acquire's outcome label is the problem the client was answered, in
// a fixed set of labels.
func TestOutcomeLabel(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("acquire k: %w", err) }
	for _, tc := range []struct {
		o    lock.Outcome
		err  error
		want string
	}{
		{lock.Granted, nil, "granted"},
		{lock.Reentered, nil, "reentered"},
		{lock.Replayed, nil, "replayed"},
		{"", wrap(&lock.HeldError{Resource: lock.Lock("k"), Owner: "w", Remaining: time.Second}), "held"},
		{"", &lock.HeldError{Resource: lock.Semaphore("pool"), Owner: "w", Remaining: time.Second}, "held"},
		{"", wrap(&lock.QueuedError{Resource: lock.Lock("k"), Waiters: 2}), "queued"},
		{"", lock.ErrLeaseLost, "lease_lost"},
		{"", wrap(lock.ErrLimitMismatch), "limit_mismatch"},
		{"", wrap(lock.ErrUnavailable), "unavailable"},
		{"", &lock.RecoveringError{Remaining: time.Second}, "unavailable"},
		{"", problem.ErrShuttingDown, "unavailable"},
		{"", lock.ErrTooManyWaiters, "error"},
		{"", invalid("ttl_ms", "ttl_ms is too long"), "error"},
		{"", context.Canceled, "error"},
	} {
		if got := outcomeLabel(tc.o, tc.err); got != tc.want {
			t.Errorf("outcomeLabel(%q, %v) = %q, want %q", tc.o, tc.err, got, tc.want)
		}
	}
}
