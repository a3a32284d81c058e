package authlimit

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// fixedClock makes the limiter's time the test's to move.
func fixedClock(l *Limiter, now *time.Time) {
	l.now = func() time.Time { return *now }
}

func TestTakeBucket(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New(3, time.Second)
	fixedClock(l, &now)
	steps := []struct {
		name    string
		advance time.Duration
		addr    string
		ok      bool
		retry   time.Duration
	}{
		{"burst 1", 0, "a", true, 0},
		{"burst 2", 0, "a", true, 0},
		{"burst 3", 0, "a", true, 0},
		{"empty", 0, "a", false, time.Second},
		{"refused again: nothing taken", 0, "a", false, time.Second},
		{"another address has its own burst", 0, "b", true, 0},
		{"half refilled", 500 * time.Millisecond, "a", false, 500 * time.Millisecond},
		{"refilled one", 500 * time.Millisecond, "a", true, 0},
		{"and empty again", 0, "a", false, time.Second},
		{"full after burst × refill", 3 * time.Second, "a", true, 0},
		{"2 left", 0, "a", true, 0},
		{"1 left", 0, "a", true, 0},
		{"none left", 0, "a", false, time.Second},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		retry, ok := l.Take(s.addr)
		if ok != s.ok || retry != s.retry {
			t.Fatalf("%s: Take(%s) = %v, %v; want %v, %v", s.name, s.addr, retry, ok, s.retry, s.ok)
		}
	}
}

// Requests arriving together cannot all see the last token: exactly the
// burst is taken, however many ask at once.
func TestTakeIsAtomic(t *testing.T) {
	const burst, callers = 10, 1000
	now := time.Unix(1000, 0)
	l := New(burst, time.Hour)
	fixedClock(l, &now)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		taken int
	)
	start := make(chan struct{})
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if _, ok := l.Take("a"); ok {
				mu.Lock()
				taken++
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	if taken != burst {
		t.Fatalf("%d callers at once took %d tokens, want the burst, %d", callers, taken, burst)
	}
}

// The map stays bounded whatever the number of addresses, and a new
// address still gets its burst when it is full.
func TestMemoryBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New(3, time.Second)
	fixedClock(l, &now)
	for i := range MaxAddrs + 500 {
		if _, ok := l.Take(fmt.Sprint("x", i)); !ok {
			t.Fatalf("address %d refused its first unknown key", i)
		}
	}
	if n := len(l.buckets); n > MaxAddrs {
		t.Fatalf("%d buckets, want at most %d", n, MaxAddrs)
	}
	for i := range 3 {
		if _, ok := l.Take("new"); !ok {
			t.Fatalf("a new address on a full map: key %d refused", i+1)
		}
	}
	if _, ok := l.Take("new"); ok {
		t.Fatal("a new address on a full map got more than its burst")
	}
	if n := len(l.buckets); n > MaxAddrs {
		t.Fatalf("%d buckets, want at most %d", n, MaxAddrs)
	}
}

// When the map is full, refilled buckets go first: an address that is
// limited stays limited while others come and go.
func TestEvictionKeepsLimitedAddresses(t *testing.T) {
	now := time.Unix(1000, 0)
	l := New(2, time.Second)
	fixedClock(l, &now)
	for i := range MaxAddrs - 1 {
		l.Take(fmt.Sprint("x", i))
	}
	now = now.Add(10 * time.Second) // every x has refilled
	l.Take("limited")
	l.Take("limited")
	if len(l.buckets) != MaxAddrs {
		t.Fatalf("%d buckets, want the map full (%d)", len(l.buckets), MaxAddrs)
	}
	if _, ok := l.Take("newcomer"); !ok {
		t.Fatal("a newcomer on a full map refused")
	}
	if n := len(l.buckets); n != 2 {
		t.Fatalf("%d buckets after eviction, want 2 (limited and newcomer): the refilled ones go", n)
	}
	if _, ok := l.Take("limited"); ok {
		t.Fatal("the limited address was evicted and got a fresh bucket")
	}
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want int
	}{
		{0, 1}, {time.Millisecond, 1}, {time.Second, 1}, {1001 * time.Millisecond, 2}, {time.Hour, 3600},
	}
	for _, tc := range tests {
		if got := RetryAfter(tc.d); got != tc.want {
			t.Errorf("RetryAfter(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestClientAddr(t *testing.T) {
	tests := []struct{ remote, want string }{
		{"192.0.2.7:5555", "192.0.2.7"},
		{"[2001:db8:1:2:aaaa::1]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:bbbb::9]:443", "2001:db8:1:2::/64"},
		{"[::ffff:192.0.2.7]:1", "::ffff:192.0.2.7"},
		{"pipe", "pipe"},
	}
	for _, tc := range tests {
		if got := ClientAddr(&http.Request{RemoteAddr: tc.remote}); got != tc.want {
			t.Errorf("ClientAddr(%s) = %s, want %s", tc.remote, got, tc.want)
		}
	}
}
