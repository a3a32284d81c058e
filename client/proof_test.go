package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/lockdtest"
)

// proofCall is one renewal, release or proclaim as the server saw it: the
// proof the client sent, and the one the server answered.
type proofCall struct {
	op         string // the path's last element
	sent, got  string
	statusCode int
}

// proofTap records the proofs of renewals, releases and proclaims on
// their way to the server and back.
type proofTap struct {
	mu    sync.Mutex
	calls []proofCall
}

func (p *proofTap) RoundTrip(r *http.Request) (*http.Response, error) {
	op := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	if op != "renew" && op != "release" && op != "proclaim" && op != "resign" {
		return http.DefaultTransport.RoundTrip(r)
	}
	var in struct{ Proof string }
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &in)
	r.Body = io.NopCloser(bytes.NewReader(body))
	res, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		return res, err
	}
	answer, _ := io.ReadAll(res.Body)
	res.Body = io.NopCloser(bytes.NewReader(answer))
	var out struct{ Proof string }
	_ = json.Unmarshal(answer, &out)
	p.mu.Lock()
	p.calls = append(p.calls, proofCall{op: op, sent: in.Proof, got: out.Proof, statusCode: res.StatusCode})
	p.mu.Unlock()
	return res, nil
}

func (p *proofTap) taken() []proofCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.calls
	p.calls = nil
	return out
}

// TestLeasesSendTheirProofs: a lease sends the proof of its grant or
// latest renewal with every renewal (its own or the watchdog's), proclaim
// and release, without being asked; the server's new proof, which takes
// the value from the one sent, shows that it got it.
func TestLeasesSendTheirProofs(t *testing.T) {
	ld := startLockd(t)
	tap := &proofTap{}
	c, err := client.New(ld.URL, client.WithHTTPClient(&http.Client{Transport: tap}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := uniqueKey(t)
	value := json.RawMessage(`{"n":1}`)

	type grant struct {
		name       string
		resourceID string
		take       func() (*client.Lease, error)
	}
	for _, g := range []grant{
		{"lock", key, func() (*client.Lease, error) {
			return c.Acquire(ctx, key, client.AcquireOptions{TTL: 10 * time.Second, Value: value, NoAutoRenew: true})
		}},
		{"permit", "sem/" + key, func() (*client.Lease, error) {
			return c.Semaphore(key, 2).Acquire(ctx, client.AcquireOptions{TTL: 10 * time.Second, Value: value, NoAutoRenew: true})
		}},
		{"leadership", "elect/" + key, func() (*client.Lease, error) {
			return c.Campaign(ctx, key, client.CampaignOptions{TTL: 10 * time.Second, Value: value, NoAutoRenew: true})
		}},
	} {
		t.Run(g.name, func(t *testing.T) {
			l, err := g.take()
			if err != nil {
				t.Fatal(err)
			}
			latest := l.Proof()
			if latest == "" {
				t.Fatal("the grant answered no proof")
			}
			for range 2 {
				if err := l.Renew(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if g.name == "leadership" {
				if err := l.Proclaim(ctx, json.RawMessage(`{"n":1}`)); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			calls := tap.taken()
			if len(calls) < 3 {
				t.Fatalf("calls %+v", calls)
			}
			for i, call := range calls {
				if call.sent != latest {
					t.Fatalf("call %d (%s) sent proof %.16q, the latest answered was %.16q", i, call.op, call.sent, latest)
				}
				if call.op == "release" || call.op == "resign" {
					continue
				}
				c, err := lockdtest.Signer().Verify(call.got, g.resourceID, l.Token(), time.Now())
				if err != nil || c.Value != `{"n":1}` || c.ValueUnknown {
					t.Fatalf("the %s's new proof: %+v, %v: the server did not get the one sent", call.op, c, err)
				}
				latest = call.got
			}
			if l.Proof() != latest {
				t.Fatal("the lease does not keep the latest proof")
			}
		})
	}

	t.Run("watchdog", func(t *testing.T) {
		l, err := c.Acquire(ctx, key+":w", client.AcquireOptions{TTL: 300 * time.Millisecond, Value: value})
		if err != nil {
			t.Fatal(err)
		}
		first := l.Proof()
		lockdtest.Eventually(t, func() bool { return l.Renewals() >= 3 }, 5*time.Second, "three renewals")
		_ = l.Release(ctx)
		calls := tap.taken()
		if len(calls) < 4 || calls[0].sent != first {
			t.Fatalf("calls %+v", calls)
		}
		for i := 1; i < len(calls); i++ {
			if calls[i].sent != calls[i-1].got || calls[i].sent == "" {
				t.Fatalf("call %d sent %.16q, the answer before it was %.16q", i, calls[i].sent, calls[i-1].got)
			}
		}
	})
}

// switchTo sends every request to the lockd whose URL it holds now: a
// client that fails over from one lockd to another behind one address.
type switchTo struct {
	mu sync.Mutex
	to *url.URL
}

func (s *switchTo) set(raw string) {
	u, _ := url.Parse(raw)
	s.mu.Lock()
	s.to = u
	s.mu.Unlock()
}

func (s *switchTo) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	to := s.to
	s.mu.Unlock()
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host, r.Host = to.Scheme, to.Host, to.Host
	return http.DefaultTransport.RoundTrip(r)
}

// TestLockSetSurvivesRedisAndItsLockd: a set taken through one lockd,
// which then dies with Redis's data (FLUSHALL), renews through another
// lockd that never knew it, with the same fences, because the set sends
// its latest proof; and is released there.
func TestLockSetSurvivesRedisAndItsLockd(t *testing.T) {
	granting := lockdtest.Start(t, lockdtest.Options{})
	other := lockdtest.Start(t, lockdtest.Options{Redis: granting.Redis})
	sw := &switchTo{}
	sw.set(granting.URL)
	c, err := client.New(granting.URL, client.WithHTTPClient(&http.Client{Transport: sw}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := uniqueKey(t)
	set, err := c.LockMany(ctx, []string{key + ":b", key + ":a"}, client.AcquireOptions{TTL: 20 * time.Second, Value: json.RawMessage(`{"n":1}`), NoAutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	first := set.Proof()
	if first == "" {
		t.Fatal("the set's grant answered no proof")
	}
	if err := set.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if set.Proof() == first {
		t.Fatal("the set does not keep its renewal's proof")
	}
	fences := set.Leases()

	granting.HTTP.Close()
	granting.Server.Shutdown()
	_ = granting.Engine.Close()
	if err := granting.Redis.Client(t).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	sw.set(other.URL)
	if err := set.Renew(ctx); err != nil {
		t.Fatalf("renew through another lockd after the loss: %v", err)
	}
	for _, l := range fences {
		st, err := c.State(ctx, l.Key)
		if err != nil || st.Fence != l.Fence || st.Value == nil || string(*st.Value) != `{"n":1}` {
			t.Fatalf("%s after the loss: %+v, %v (fence was %d)", l.Key, st, err, l.Fence)
		}
	}
	if err := set.Release(ctx); err != nil {
		t.Fatalf("release after the loss: %v", err)
	}
}

// TestLockSetSendsItsProofs: a set sends the proof of its grant or latest
// renewal with every renewal and its release; the server's new proof,
// which takes the value from the one sent, shows that it got it.
func TestLockSetSendsItsProofs(t *testing.T) {
	ld := startLockd(t)
	tap := &proofTap{}
	c, err := client.New(ld.URL, client.WithHTTPClient(&http.Client{Transport: tap}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := uniqueKey(t)
	set, err := c.LockMany(ctx, []string{key + ":1", key + ":2"}, client.AcquireOptions{TTL: 10 * time.Second, Value: json.RawMessage(`{"n":1}`), NoAutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	latest := set.Proof()
	for range 2 {
		if err := set.Renew(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	calls := tap.taken()
	if len(calls) != 3 || latest == "" {
		t.Fatalf("calls %+v, first proof %.16q", calls, latest)
	}
	for i, call := range calls {
		if call.sent != latest {
			t.Fatalf("call %d (%s) sent proof %.16q, the latest answered was %.16q", i, call.op, call.sent, latest)
		}
		if call.op == "release" {
			continue
		}
		claim, err := lockdtest.Signer().VerifySet(call.got, set.Token(), time.Now())
		if err != nil || claim.Value != `{"n":1}` || claim.ValueUnknown {
			t.Fatalf("the renewal's new proof: %+v, %v: the server did not get the one sent", claim, err)
		}
		latest = call.got
	}
}
