package lockdtest

import (
	"testing"
	"time"
)

// Eventually polls cond every 5 ms until it holds, and fails the test if it
// does not within timeout. Tests wait for a state (a waiter registered, a
// lease gone) with it instead of sleeping for a guessed time: a sleep is
// either too long, or too short on a loaded machine and the test then
// checks nothing.
func Eventually(tb testing.TB, cond func() bool, timeout time.Duration, what string) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
