package server

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

func TestAuthLimiterBuckets(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newAuthLimiter(3, time.Second)
	l.now = func() time.Time { return now }
	for i := range 3 {
		if d := l.wait("a"); d != 0 {
			t.Fatalf("failure %d: must wait %v already", i, d)
		}
		l.fail("a")
	}
	if d := l.wait("a"); d != time.Second {
		t.Fatalf("after the burst: wait %v, want 1s", d)
	}
	if d := l.wait("b"); d != 0 {
		t.Fatalf("another address waits %v", d)
	}
	now = now.Add(500 * time.Millisecond)
	if d := l.wait("a"); d != 500*time.Millisecond {
		t.Fatalf("half refilled: wait %v", d)
	}
	now = now.Add(500 * time.Millisecond)
	if d := l.wait("a"); d != 0 {
		t.Fatalf("refilled: wait %v", d)
	}

	// The map stays bounded whatever the number of addresses.
	for i := range maxAuthFailAddrs + 500 {
		l.fail(fmt.Sprint("x", i))
	}
	if n := len(l.buckets); n > maxAuthFailAddrs {
		t.Fatalf("%d buckets, want at most %d", n, maxAuthFailAddrs)
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
		if got := clientAddr(&http.Request{RemoteAddr: tc.remote}); got != tc.want {
			t.Errorf("clientAddr(%s) = %s, want %s", tc.remote, got, tc.want)
		}
	}
}
