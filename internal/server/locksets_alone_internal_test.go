package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
)

// One key of a lock set, renewed, released, re-entered or held alone with
// the set's token, answers 409 in_lock_set, naming the key and the set's
// size, through the fast path and the generated one alike, and changes
// nothing: the set's own renewal and release still act on every key.
func TestLockSetKeyAloneOverHTTP(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	e := lock.New(rdb, lock.Options{})
	t.Cleanup(func() { _ = e.Close() })
	s := New(e, zerolog.Nop(), Config{}, prometheus.NewRegistry())
	fast := s.Handler(prometheus.NewRegistry(), nil)
	// The generated path: the strict handler alone, routed as the server
	// routes it (so that the answer names the route's key).
	generated := chi.NewRouter()
	api.HandlerWithOptions(api.NewStrictHandlerWithOptions(s, nil, api.StrictHTTPServerOptions{
		RequestErrorHandlerFunc: requestError, ResponseErrorHandlerFunc: writeError,
	}), api.ChiServerOptions{BaseRouter: generated, ErrorHandlerFunc: paramError})
	ctx := context.Background()
	for _, mode := range []lock.Mode{lock.Exclusive, lock.Shared} {
		t.Run(string(mode), func(t *testing.T) {
			keys := []string{"alone:" + string(mode) + ":a", "alone:" + string(mode) + ":b"}
			set, err := e.AcquireSet(ctx, lock.SetRequest{Keys: keys, Owner: "whole", TTL: 30 * time.Second, Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			key := keys[1]
			before, err := e.State(ctx, lock.Lock(key))
			if err != nil {
				t.Fatal(err)
			}
			token := fmt.Sprintf(`{"token":%q}`, set.Token)
			request := func(op, body string) *http.Request {
				r := httptest.NewRequest(http.MethodPost, "/v1/locks/"+key+"/"+op, strings.NewReader(body))
				r.Host = "localhost"
				r.Header.Set("Content-Type", "application/json")
				return r
			}
			for _, op := range []string{"renew", "release", "acquire", "hold"} {
				t.Run(op, func(t *testing.T) {
					viaFast, viaGenerated := httptest.NewRecorder(), httptest.NewRecorder()
					fast.ServeHTTP(viaFast, request(op, token))
					generated.ServeHTTP(viaGenerated, request(op, token))
					if viaFast.Code != viaGenerated.Code || viaFast.Body.String() != viaGenerated.Body.String() {
						t.Fatalf("fast path %d %s; generated %d %s", viaFast.Code, viaFast.Body, viaGenerated.Code, viaGenerated.Body)
					}
					var p api.Problem
					if err := json.Unmarshal(viaFast.Body.Bytes(), &p); err != nil {
						t.Fatalf("%d %s: %v", viaFast.Code, viaFast.Body, err)
					}
					if viaFast.Code != http.StatusConflict || p.Code != api.ProblemCodeInLockSet || p.Key == nil || *p.Key != key ||
						p.Detail == nil || !strings.Contains(*p.Detail, "lock set of 2 keys") || !strings.Contains(*p.Detail, "/v1/lock-sets/"+op) &&
						op != "acquire" || viaFast.Header().Get("Content-Type") != "application/problem+json" {
						t.Fatalf("%s of one key of the set: %d %s", op, viaFast.Code, viaFast.Body)
					}
					if strings.Contains(viaFast.Body.String(), set.Token) {
						t.Fatal("the answer shows the set's token")
					}
				})
			}
			after, err := e.State(ctx, lock.Lock(key))
			if err != nil || after.Fence != before.Fence || !after.ExpiresAt.Equal(before.ExpiresAt) || after.Set != 2 {
				t.Fatalf("the key after the refusals: %+v, %v; was %+v", after, err, before)
			}
			r := httptest.NewRecorder()
			fast.ServeHTTP(r, func() *http.Request {
				req := httptest.NewRequest(http.MethodPost, "/v1/lock-sets/release", strings.NewReader(token))
				req.Host = "localhost"
				req.Header.Set("Content-Type", "application/json")
				return req
			}())
			if r.Code != http.StatusOK || !strings.Contains(r.Body.String(), `"released":2`) {
				t.Fatalf("the set's release: %d %s", r.Code, r.Body)
			}
		})
	}
}
