package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
)

// A lock set over HTTP: all or nothing, one token to renew and release,
// each key's state marked as part of the set, and 400s that name the key.
func TestLockSetOverHTTP(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()

	held := f.acquire(t, "hs:b", api.AcquireRequest{Owner: ptr("single")})
	res, body, err := do(http.MethodPost, f.url+"/v1/lock-sets/acquire", "application/json", `{"keys":["hs:a","hs:b","hs:c"],"owner":"set"}`)
	if err != nil {
		t.Fatal(err)
	}
	p := problemOf(t, res, body)
	if p.Status != http.StatusConflict || p.Code != api.ProblemCodeLockHeld || p.Key == nil || *p.Key != "hs:b" || p.Holder == nil || *p.Holder != "single" {
		t.Fatalf("set over a held key: %s", body)
	}
	for _, k := range []string{"hs:a", "hs:c"} {
		if st, _ := f.client.GetLockWithResponse(ctx, k); st.StatusCode() != http.StatusNotFound {
			t.Fatalf("%s after a refused set: %d %s", k, st.StatusCode(), st.Body)
		}
	}
	if r, _ := f.client.ReleaseLockWithResponse(ctx, "hs:b", api.ReleaseRequest{Token: held.Token}); r.StatusCode() != http.StatusOK {
		t.Fatalf("release: %s", r.Body)
	}

	acq, err := f.client.AcquireLockSetWithResponse(ctx, api.LockSetRequest{Keys: []string{"hs:c", "hs:a", "hs:b"}, Owner: ptr("set"), TtlMs: ptr(int64(5000))})
	if err != nil || acq.JSON200 == nil {
		t.Fatalf("acquire set: %v %s", err, acq.Body)
	}
	set := *acq.JSON200
	if len(set.Leases) != 3 || set.Leases[0].Key != "hs:c" || set.Leases[0].Fence <= 0 || set.TtlMs != 5000 {
		t.Fatalf("set = %s", acq.Body)
	}
	st, err := f.client.GetLockWithResponse(ctx, "hs:a")
	if err != nil || st.JSON200 == nil || st.JSON200.Set == nil || *st.JSON200.Set != 3 || st.JSON200.Owner != "set" {
		t.Fatalf("state of a key of the set: %s", st.Body)
	}
	if strings.Contains(string(st.Body), set.Token) {
		t.Fatal("the state shows the set's token")
	}
	h, err := f.client.GetLockHistoryWithResponse(ctx, "hs:a", nil)
	if err != nil || h.JSON200 == nil || h.JSON200.Events[0].Set == nil || *h.JSON200.Events[0].Set != 3 {
		t.Fatalf("history of a key of the set: %s", h.Body)
	}

	ren, err := f.client.RenewLockSetWithResponse(ctx, api.LockSetRenewRequest{Token: set.Token, TtlMs: ptr(int64(9000))})
	if err != nil || ren.JSON200 == nil || ren.JSON200.TtlMs != 9000 || len(ren.JSON200.Leases) != 3 {
		t.Fatalf("renew set: %v %s", err, ren.Body)
	}
	rel, err := f.client.ReleaseLockSetWithResponse(ctx, api.LockSetReleaseRequest{Token: set.Token})
	if err != nil || rel.JSON200 == nil || rel.JSON200.Released != 3 {
		t.Fatalf("release set: %v %s", err, rel.Body)
	}
	again, _ := f.client.ReleaseLockSetWithResponse(ctx, api.LockSetReleaseRequest{Token: set.Token})
	if again.StatusCode() != http.StatusConflict {
		t.Fatalf("second release: %d %s", again.StatusCode(), again.Body)
	}
	var lost api.Problem
	_ = json.Unmarshal(again.Body, &lost)
	if lost.Code != api.ProblemCodeLeaseLost {
		t.Fatalf("second release: %s", again.Body)
	}
}

func TestLockSetBadInput(t *testing.T) {
	f := newFixture(t)
	many := make([]string, 65)
	for i := range many {
		many[i] = fmt.Sprintf("%q", fmt.Sprintf("hb:%d", i))
	}
	for _, c := range []struct {
		name, path, body, field string
	}{
		{"no body", "acquire", ``, "body"},
		{"one key", "acquire", `{"keys":["hb:1"]}`, "keys"},
		{"65 keys", "acquire", `{"keys":[` + strings.Join(many, ",") + `]}`, "keys"},
		{"duplicate", "acquire", `{"keys":["hb:1","hb:2","hb:3","hb:1"]}`, "keys[3]"},
		{"bad key", "acquire", `{"keys":["hb:1","-x"]}`, "keys[1]"},
		{"bad mode", "acquire", `{"keys":["hb:1","hb:2"],"mode":"both"}`, "mode"},
		{"ttl", "acquire", `{"keys":["hb:1","hb:2"],"ttl_ms":5}`, "ttl_ms"},
		{"unknown field", "acquire", `{"keys":["hb:1","hb:2"],"limit":2}`, "limit"},
		{"renew without token", "renew", `{}`, "token"},
		{"release without token", "release", `{}`, "token"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, body, err := do(http.MethodPost, f.url+"/v1/lock-sets/"+c.path, "application/json", c.body)
			if err != nil {
				t.Fatal(err)
			}
			p := problemOf(t, res, body)
			if p.Status != http.StatusBadRequest || p.Field == nil || *p.Field != c.field {
				t.Fatalf("%d %s; want 400 naming %s", res.StatusCode, body, c.field)
			}
		})
	}
}

func TestRedlockLockSetsUnsupported(t *testing.T) {
	_, ts, _ := redlockServer(t, threeMasters(t))
	for _, path := range []string{"acquire", "renew", "release"} {
		body := `{"token":"t0"}`
		if path == "acquire" {
			body = `{"keys":["rs:1","rs:2"]}`
		}
		res, b, err := do(http.MethodPost, ts.URL+"/v1/lock-sets/"+path, "application/json", body)
		if err != nil {
			t.Fatal(err)
		}
		p := problemOf(t, res, b)
		if p.Status != http.StatusNotImplemented || p.Code != api.ProblemCodeUnsupported {
			t.Fatalf("%s on Redlock: %s", path, b)
		}
	}
}

// A lock set's hold renews every key while the client reads, is lost when
// one key is broken, and releases every key when the client leaves.
func TestLockSetHold(t *testing.T) {
	f := newFixture(t)
	open := func(t *testing.T, ctx context.Context, body string) chan sse {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/lock-sets/hold", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
			b, _ := io.ReadAll(res.Body)
			t.Fatalf("hold: %d %s", res.StatusCode, b)
		}
		events := make(chan sse, 16)
		go readEvents(res.Body, events)
		return events
	}
	next := func(t *testing.T, events chan sse) sse {
		t.Helper()
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("stream ended")
			}
			return ev
		case <-time.After(3 * time.Second):
			t.Fatal("no event in 3 s")
		}
		return sse{}
	}

	t.Run("renews and releases on disconnect", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		events := open(t, ctx, `{"keys":["hh:a","hh:b"],"owner":"sh","ttl_ms":300}`)
		ev := next(t, events)
		var set api.LockSet
		if ev.event != "acquired" || json.Unmarshal([]byte(ev.data), &set) != nil || set.Token == "" || len(set.Leases) != 2 {
			t.Fatalf("first event %+v", ev)
		}
		for range 4 {
			if ev := next(t, events); ev.event != "renewed" {
				t.Fatalf("event %+v", ev)
			}
		}
		st, err := f.engine.State(context.Background(), lock.Lock("hh:b"))
		if err != nil || st.Set != 2 || st.Renewals < 4 {
			t.Fatalf("state after 4 renewals: %+v %v", st, err)
		}
		cancel()
		lockdtest.Eventually(t, func() bool {
			_, ea := f.engine.State(context.Background(), lock.Lock("hh:a"))
			_, eb := f.engine.State(context.Background(), lock.Lock("hh:b"))
			return errors.Is(ea, lock.ErrNotFound) && errors.Is(eb, lock.ErrNotFound)
		}, 5*time.Second, "the hold's keys are released")
	})

	t.Run("lost when a key is broken", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		events := open(t, ctx, `{"keys":["hh:c","hh:d"],"ttl_ms":300}`)
		if ev := next(t, events); ev.event != "acquired" {
			t.Fatalf("%+v", ev)
		}
		if _, err := f.engine.ForceReleaseFence(context.Background(), lock.Lock("hh:d"), 0, "t", "test"); err != nil {
			t.Fatal(err)
		}
		for {
			ev := next(t, events)
			if ev.event == "renewed" {
				continue
			}
			if ev.event != "lost" || !strings.Contains(ev.data, "lease_lost") {
				t.Fatalf("%+v", ev)
			}
			break
		}
		if _, err := f.engine.State(context.Background(), lock.Lock("hh:c")); !errors.Is(err, lock.ErrNotFound) {
			t.Fatalf("the set's other key after the loss: %v", err)
		}
	})
}
