package lock

import (
	"context"
	"strings"
	"testing"
)

// A resource's part of its Redis key names reads back as the same
// resource, and a lock and a semaphore of one name never share keys.
func TestResourceIDRoundTrip(t *testing.T) {
	for _, res := range []Resource{Lock("order:1"), Semaphore("order:1"), Lock("a"), Semaphore("pool:gpu")} {
		if got := resourceOf(res.id()); got != res {
			t.Errorf("resourceOf(%q) = %v, want %v", res.id(), got, res)
		}
	}
	if Lock("x").id() == Semaphore("x").id() {
		t.Error("a lock and a semaphore of one name share Redis keys")
	}
	if keysOf(Lock("x").id()).lease == keysOf(Semaphore("x").id()).lease {
		t.Error("a lock and a semaphore of one name share a lease key")
	}
}

// An operation on a Resource of no kind is refused before Redis is asked:
// it is a caller's bug, not a lock named by its name.
func TestResourceWithoutAKindIsRefused(t *testing.T) {
	e := &Engine{} // never reached: the check comes first
	_, err := e.Acquire(context.Background(), Resource{Name: "x"}, AcquireRequest{})
	if err == nil || !strings.Contains(err.Error(), "no kind") {
		t.Fatalf("acquire of a kindless resource: %v", err)
	}
	if _, err := e.List(context.Background(), 0, "", 10, ""); err == nil || !strings.Contains(err.Error(), "no kind") {
		t.Fatalf("list of no kind: %v", err)
	}
	if got := (Resource{Kind: KindSemaphore, Name: "p"}).String(); got != "semaphore p" {
		t.Errorf("String() = %q", got)
	}
}
