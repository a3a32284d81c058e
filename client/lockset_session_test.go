package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
)

// A lock set in a session lives as long as the session: its keep-alive
// keeps every key past the TTL, its end releases them all, and a session
// ended elsewhere loses the set.
func TestLockManyInSession(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()
	key := uniqueKey(t)
	keys := []string{key + ":b", key + ":a"}

	s, err := c.NewSession(ctx, client.SessionOptions{Owner: "worker", TTL: 900 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	set, err := c.LockMany(ctx, keys, client.AcquireOptions{Session: s})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // past 2 TTLs: the session's renewals keep every key
	for _, k := range keys {
		st, err := c.State(ctx, k)
		if err != nil || st.Fence != set.Fence(k) || st.Owner != "worker" || st.Set == nil || *st.Set != 2 {
			t.Fatalf("state of %s after 2 TTLs: %+v, %v", k, st, err)
		}
	}
	select {
	case <-set.Lost():
		t.Fatalf("lost: %v", set.Err())
	default:
	}
	if _, err := c.Release(ctx, keys[0], set.Token()); !errors.Is(err, client.ErrInLockSet) {
		t.Fatalf("one key of the set released alone: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil || len(info.Holds) != 2 {
		t.Fatalf("info: %+v, %v", info, err)
	}
	if err := s.End(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, err := c.State(ctx, k); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("%s after the session's end: %v", k, err)
		}
	}

	// Ended elsewhere: the keep-alive notices, and the set is lost.
	s2, err := c.NewSession(ctx, client.SessionOptions{TTL: 900 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	set2, err := c.LockMany(ctx, keys, client.AcquireOptions{Session: s2})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodDelete, ld.URL+"/v1/sessions/"+s2.ID(), nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("end elsewhere: %v %v", res, err)
	}
	res.Body.Close()
	select {
	case <-set2.Lost():
	case <-time.After(2 * time.Second):
		t.Fatal("the set was not lost within ttl/3 and slack of its session's end")
	}
	if !errors.Is(set2.Err(), client.ErrLeaseLost) {
		t.Fatalf("loss: %v", set2.Err())
	}
	if _, err := c.LockMany(ctx, keys, client.AcquireOptions{Session: s2}); !errors.Is(err, client.ErrSessionNotFound) {
		t.Fatalf("a set in a lost session: %v", err)
	}
}
