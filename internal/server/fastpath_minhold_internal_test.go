package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/embedded"
	"github.com/lockd/lockd/internal/lock"
)

// acquireRecorder is an engine (an embedded store's for all else) that
// grants every acquire the same lease and keeps what it was asked.
type acquireRecorder struct {
	Engine
	asked []lock.AcquireRequest
}

func (a *acquireRecorder) Acquire(_ context.Context, res lock.Resource, req lock.AcquireRequest) (lock.Lease, error) {
	a.asked = append(a.asked, req)
	at := time.Date(2026, 11, 29, 4, 5, 6, 0, time.UTC)
	return lock.Lease{Resource: res, Owner: req.Owner, Token: "tok", Fence: 7, Count: 1, TTL: req.TTL, AcquiredAt: at,
		ExpiresAt: at.Add(req.TTL), Outcome: lock.Granted, Mode: lock.Exclusive}, nil
}

// leaseOps decodes a lock's acquire body itself (checkBody's decode): it
// must ask the engine what the generated strict handler, which binds the
// same bytes on its own, asks, every field included (min_hold_ms,
// lock_delay_ms, value), and answer the same.
func TestLeaseOpsAcquireAsksAsGenerated(t *testing.T) {
	st, err := embedded.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	rdb := redis.NewClient(&redis.Options{Addr: "embedded", Dialer: st.Dial})
	e := lock.New(rdb, lock.Options{NoSweep: true})
	t.Cleanup(func() { _ = e.Close(); _ = rdb.Close() })
	rec := &acquireRecorder{Engine: e}
	s := New(rec, zerolog.Nop(), Config{}, prometheus.NewRegistry())
	const body = `{"owner":"node-2","ttl_ms":300000,"min_hold_ms":50000,"lock_delay_ms":1000,"value":{"job":"report"}}`
	request := func() *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/v1/locks/report:daily/acquire", strings.NewReader(body))
		r.Host = "localhost"
		r.Header.Set("Content-Type", "application/json")
		return r
	}

	fast := httptest.NewRecorder()
	s.Handler(prometheus.NewRegistry(), nil).ServeHTTP(fast, request())
	strict := api.NewStrictHandlerWithOptions(s, nil, api.StrictHTTPServerOptions{
		RequestErrorHandlerFunc: requestError, ResponseErrorHandlerFunc: writeError,
	})
	generated := httptest.NewRecorder()
	strict.AcquireLock(generated, request(), "report:daily", api.AcquireLockParams{})

	if fast.Code != http.StatusOK || generated.Code != http.StatusOK || fast.Body.String() != generated.Body.String() {
		t.Fatalf("fast path %d %s; generated %d %s", fast.Code, fast.Body, generated.Code, generated.Body)
	}
	if len(rec.asked) != 2 {
		t.Fatalf("the engine was asked %d times", len(rec.asked))
	}
	// The caller (the actor) is the edge's: the generated handler alone
	// runs without it.
	f, g := rec.asked[0], rec.asked[1]
	f.Actor, g.Actor = "", ""
	if !reflect.DeepEqual(f, g) {
		t.Fatalf("fast path asked %+v;\ngenerated asked %+v", f, g)
	}
	if f.MinHold != 50*time.Second || f.LockDelay != time.Second || f.TTL != 300*time.Second {
		t.Fatalf("asked %+v", f)
	}
}
