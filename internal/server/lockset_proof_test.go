package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/server"
	"github.com/lockd/lockd/internal/web"
)

// A lock set's proof over HTTP: the acquire, renew and hold answers carry
// one; after Redis lost its data with the lockd that granted the set,
// another lockd puts the set back from it on a renewal (200, the same
// fences), and a renewal without it finds the set gone.
func TestLockSetProofOverHTTP(t *testing.T) {
	ctx := context.Background()
	granting := lockdtest.Start(t, lockdtest.Options{})
	other := lockdtest.Start(t, lockdtest.Options{Redis: granting.Redis})
	clientOf := func(ld *lockdtest.Lockd) *api.ClientWithResponses {
		c, err := api.NewClientWithResponses(ld.URL)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	acq, err := clientOf(granting).AcquireLockSetWithResponse(ctx, api.LockSetRequest{Keys: []string{"hp:a", "hp:b"}, Owner: ptr("set"),
		TtlMs: ptr(int64(20000))})
	if err != nil || acq.JSON200 == nil || acq.JSON200.Proof == nil {
		t.Fatalf("acquire: %v %s", err, acq.Body)
	}
	set := *acq.JSON200
	ren, err := clientOf(granting).RenewLockSetWithResponse(ctx, api.LockSetRenewRequest{Token: set.Token, Proof: set.Proof})
	if err != nil || ren.JSON200 == nil || ren.JSON200.Proof == nil || *ren.JSON200.Proof == *set.Proof {
		t.Fatalf("renew: %v %s", err, ren.Body)
	}
	granting.HTTP.Close()
	granting.Server.Shutdown()
	_ = granting.Engine.Close()
	if err := granting.Redis.Client(t).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	c := clientOf(other)
	bad := "x" + strings.Repeat("A", 19456)
	if r, _ := c.RenewLockSetWithResponse(ctx, api.LockSetRenewRequest{Token: set.Token, Proof: &bad}); r.StatusCode() != http.StatusBadRequest ||
		!strings.Contains(string(r.Body), `"field":"proof"`) {
		t.Fatalf("a proof too long: %d %s", r.StatusCode(), r.Body)
	}
	if r, _ := c.RenewLockSetWithResponse(ctx, api.LockSetRenewRequest{Token: set.Token}); r.StatusCode() == http.StatusOK {
		t.Fatalf("renew without the proof after the loss: %s", r.Body)
	}
	back, err := c.RenewLockSetWithResponse(ctx, api.LockSetRenewRequest{Token: set.Token, Proof: ren.JSON200.Proof})
	if err != nil || back.JSON200 == nil || !slices.Equal(back.JSON200.Leases, set.Leases) || back.JSON200.Owner != "set" {
		t.Fatalf("renew with the proof after the loss: %v %s", err, back.Body)
	}
	if strings.Contains(other.Logs.String(), *back.JSON200.Proof) || strings.Contains(other.Logs.String(), *set.Proof) {
		t.Fatal("a proof in the logs")
	}
	if st, _ := c.GetLockWithResponse(ctx, "hp:a"); st.JSON200 == nil || strings.Contains(string(st.Body), *back.JSON200.Proof) {
		t.Fatalf("state of a key put back: %s", st.Body)
	}
	rel, err := c.ReleaseLockSetWithResponse(ctx, api.LockSetReleaseRequest{Token: set.Token, Proof: back.JSON200.Proof})
	if err != nil || rel.JSON200 == nil || rel.JSON200.Released != 2 {
		t.Fatalf("release: %v %s", err, rel.Body)
	}
}

// A lock set's hold stream carries the set's latest proof in each event
// and renews with it.
func TestLockSetHoldCarriesProofs(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/lock-sets/hold", strings.NewReader(`{"keys":["hh:a","hh:b"],"ttl_ms":300}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("hold: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var proofs []string
	for len(proofs) < 3 && sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		var set api.LockSet
		if err := json.Unmarshal([]byte(line[6:]), &set); err != nil || set.Proof == nil {
			t.Fatalf("event %s: no proof (%v)", line, err)
		}
		if slices.Contains(proofs, *set.Proof) {
			t.Fatalf("the proof did not change with a renewal: %s", line)
		}
		proofs = append(proofs, *set.Proof)
	}
	if len(proofs) < 3 {
		t.Fatalf("events with proofs: %d", len(proofs))
	}
}

// A lock set's hold takes a live set over by its token and proof: after
// Redis lost its data with the lockd that granted the set, a hold through
// another lockd streams the set put back from the proof (the same token
// and fences), and closing it releases every key. The token goes with
// hold only, and the keys must be the set's.
func TestLockSetHoldTakesOverBySetProof(t *testing.T) {
	ctx := context.Background()
	granting := lockdtest.Start(t, lockdtest.Options{})
	other := lockdtest.Start(t, lockdtest.Options{Redis: granting.Redis})
	c, err := api.NewClientWithResponses(granting.URL)
	if err != nil {
		t.Fatal(err)
	}
	acq, err := c.AcquireLockSetWithResponse(ctx, api.LockSetRequest{Keys: []string{"ht:a", "ht:b"}, TtlMs: ptr(int64(20000))})
	if err != nil || acq.JSON200 == nil || acq.JSON200.Proof == nil {
		t.Fatalf("acquire: %v %s", err, acq.Body)
	}
	set := *acq.JSON200
	granting.HTTP.Close()
	granting.Server.Shutdown()
	_ = granting.Engine.Close()
	if err := granting.Redis.Client(t).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	body := func(keys, extra string) string {
		return `{"keys":` + keys + `,"ttl_ms":600` + extra + `}`
	}
	withToken := `,"token":"` + set.Token + `","proof":"` + *set.Proof + `"`
	for _, c := range []struct {
		name, path, body, field string
		status                  int
	}{
		{"a token on acquire", "acquire", body(`["ht:a","ht:b"]`, withToken), "token", http.StatusBadRequest},
		{"a proof without its token", "hold", body(`["ht:a","ht:b"]`, `,"proof":"`+*set.Proof+`"`), "proof", http.StatusBadRequest},
		{"a token of no set", "hold", body(`["ht:a","ht:b"]`, `,"token":"nobody"`), "", http.StatusConflict},
		{"other keys than the set's", "hold", body(`["ht:a","ht:c"]`, withToken), "keys", http.StatusBadRequest},
	} {
		res, b, err := do(http.MethodPost, other.URL+"/v1/lock-sets/"+c.path, "application/json", c.body)
		if err != nil {
			t.Fatal(err)
		}
		p := problemOf(t, res, b)
		// A token of no set: lost, or (while the dead lockd's leases
		// may be live) recovering.
		recovering := c.status == http.StatusConflict && p.Status == http.StatusServiceUnavailable
		if (p.Status != c.status && !recovering) || (c.field != "" && (p.Field == nil || *p.Field != c.field)) {
			t.Fatalf("%s: %d %s", c.name, res.StatusCode, b)
		}
	}

	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, _ := http.NewRequestWithContext(hctx, http.MethodPost, other.URL+"/v1/lock-sets/hold", strings.NewReader(body(`["ht:b","ht:a"]`, withToken)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("hold with the set's token and proof after the loss: %v", err)
	}
	sc := bufio.NewScanner(resp.Body)
	var events []api.LockSet
	for len(events) < 2 && sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: ") {
			var s api.LockSet
			if err := json.Unmarshal([]byte(line[6:]), &s); err != nil {
				t.Fatalf("event %s: %v", line, err)
			}
			events = append(events, s)
		}
	}
	if len(events) < 2 || events[0].Token != set.Token || !slices.Equal(events[0].Leases, set.Leases) || events[1].Proof == nil {
		t.Fatalf("the stream of the set taken over: %+v", events)
	}
	cancel()
	resp.Body.Close()
	oc, err := api.NewClientWithResponses(other.URL)
	if err != nil {
		t.Fatal(err)
	}
	lockdtest.Eventually(t, func() bool {
		st, err := oc.GetLockWithResponse(ctx, "ht:a")
		return err == nil && st.StatusCode() == http.StatusNotFound
	}, 5*time.Second, "the set released when its stream closed")
}

// TestSetProofsStayWithTheHolder: a lock set's keys' state, history,
// listing, events and dashboard pages, and the server's log, never show
// the set's proof.
func TestSetProofsStayWithTheHolder(t *testing.T) {
	ld := lockdtest.Start(t, lockdtest.Options{Dashboard: func(e *lock.Engine, log zerolog.Logger) server.Dashboard {
		return web.NewDashboard(e, log)
	}})
	_, events := openEvents(t, ld.URL+"/v1/events?prefix=psf:", "", "")
	c, err := api.NewClientWithResponses(ld.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := c.AcquireLockSetWithResponse(ctx, api.LockSetRequest{Keys: []string{"psf:a", "psf:b"}, Value: ptr(api.Value(`"v"`))})
	if err != nil || a.JSON200 == nil || a.JSON200.Proof == nil {
		t.Fatalf("acquire: %v", err)
	}
	r, err := c.RenewLockSetWithResponse(ctx, api.LockSetRenewRequest{Token: a.JSON200.Token, Proof: a.JSON200.Proof})
	if err != nil || r.JSON200 == nil || r.JSON200.Proof == nil {
		t.Fatalf("renew: %v", err)
	}
	proofs := []string{*a.JSON200.Proof, *r.JSON200.Proof}
	if ev := events.next(t); ev.event != "acquired" || strings.Contains(ev.raw, proofs[0]) {
		t.Fatalf("event %+v", ev)
	}
	pages := map[string]string{"log": ld.Logs.String()}
	for _, path := range []string{
		"/v1/locks/psf:a", "/v1/locks/psf:a/history", "/v1/locks/psf:b/history?type=renewed", "/v1/locks?prefix=psf:",
		"/", "/ui/locks/psf:a", "/ui/fragments/locks/psf:b",
	} {
		res, err := http.Get(ld.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(b), "psf:") {
			t.Fatalf("%s: %d %.200s", path, res.StatusCode, b)
		}
		pages[path] = string(b)
	}
	for where, text := range pages {
		for _, p := range proofs {
			if strings.Contains(text, p) || strings.Contains(text, p[:24]) {
				t.Fatalf("a set's proof in %s", where)
			}
		}
	}
}
