package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
)

// Campaign, Leader, Proclaim, Observe and resigning by Release, end to end:
// the observer sees the leader, its new value, the vacancy and the next
// leader, whose term is higher.
func TestElection(t *testing.T) {
	ld := startLockd(t)
	c := newClient(t, ld.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	name := uniqueKey(t)

	a, err := c.Campaign(ctx, name, client.CampaignOptions{Owner: "a", TTL: 5 * time.Second, Value: json.RawMessage(`{"addr":"a:1"}`)})
	if err != nil {
		t.Fatal(err)
	}
	events, err := c.Observe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	next := func(want string) client.ElectionEvent {
		t.Helper()
		select {
		case ev := <-events:
			if ev.Event != want {
				t.Fatalf("observed %+v, want %s", ev, want)
			}
			return ev
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s event", want)
		}
		return client.ElectionEvent{}
	}
	if ev := next("leader"); *ev.Change.Leader != "a" || ev.Change.Term != a.Fence() {
		t.Fatalf("first: %+v", ev.Change)
	}
	if _, err := c.Campaign(ctx, name, client.CampaignOptions{Owner: "b"}); !errors.Is(err, client.ErrHeld) {
		t.Fatalf("a second leader: %v", err)
	}
	if err := a.Proclaim(ctx, json.RawMessage(`"draining"`)); err != nil {
		t.Fatal(err)
	}
	if ev := next("proclaimed"); string(*ev.Change.Value) != `"draining"` {
		t.Fatalf("proclaimed: %+v", ev.Change)
	}
	st, err := c.Leader(ctx, name)
	if err != nil || *st.Leader != "a" || string(*st.Value) != `"draining"` {
		t.Fatalf("leader: %+v %v", st, err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next("vacant")
	b, err := c.Campaign(ctx, name, client.CampaignOptions{Owner: "b", Wait: time.Second})
	if err != nil || b.Fence() <= a.Fence() {
		t.Fatalf("next term: %v %v", b, err)
	}
	if ev := next("leader"); *ev.Change.Leader != "b" || ev.Change.Term != b.Fence() {
		t.Fatalf("next leader: %+v", ev.Change)
	}
	if err := a.Proclaim(ctx, json.RawMessage(`1`)); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("proclaim after resigning: %v", err)
	}
	_ = b.Release(ctx)
}
