package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
)

// A session keeps its grants past their TTL by itself; ending it releases
// them all; a session ended elsewhere loses every lease in it.
func TestSession(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx := context.Background()
	key := uniqueKey(t)

	s, err := c.NewSession(ctx, client.SessionOptions{Owner: "worker", TTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Acquire(ctx, key, client.AcquireOptions{Session: s})
	if err != nil {
		t.Fatal(err)
	}
	permit, err := c.Semaphore(key+":pool", 2).Acquire(ctx, client.AcquireOptions{Session: s})
	if err != nil {
		t.Fatal(err)
	}
	leader, err := c.Campaign(ctx, key+":leader", client.CampaignOptions{Session: s})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // 2.5 TTLs: the session's renewals keep every grant
	info, err := s.Info(ctx)
	if err != nil || len(info.Holds) != 3 {
		t.Fatalf("info: %+v, %v", info, err)
	}
	if st, err := c.State(ctx, key); err != nil || st.Fence != l.Fence() {
		t.Fatalf("state after 2.5 TTLs: %+v, %v", st, err)
	}
	select {
	case <-l.Lost():
		t.Fatalf("lost: %v", l.Err())
	default:
	}

	// A lease of the session released on its own.
	if err := permit.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.End(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.State(ctx, key); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("state after the end: %v", err)
	}
	if _, err := c.Leader(ctx, key+":leader"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("leader after the end: %v", err)
	}
	_ = leader

	// Ended elsewhere: the keep-alive notices, and its leases are lost.
	s2, err := c.NewSession(ctx, client.SessionOptions{TTL: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c.Acquire(ctx, key, client.AcquireOptions{Session: s2})
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
	case <-l2.Lost():
	case <-time.After(time.Second):
		t.Fatal("the lease was not lost within ttl/3 and slack of its session's end")
	}
	if !errors.Is(l2.Err(), client.ErrLeaseLost) || !errors.Is(s2.Err(), client.ErrSessionNotFound) {
		t.Fatalf("errors: lease %v, session %v", l2.Err(), s2.Err())
	}
	if _, err := c.Acquire(ctx, key, client.AcquireOptions{Session: s2}); !errors.Is(err, client.ErrSessionNotFound) {
		t.Fatalf("acquire in a lost session: %v", err)
	}
}
