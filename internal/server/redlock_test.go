package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
)

// Redlock has neither shared holds nor semaphores: asking for them is a
// 400 unsupported that says so (never a 500, never an exclusive grant in
// their place), while exclusive locks work and show their one holder.
func TestRedlockRefusesSharedAndSemaphores(t *testing.T) {
	clients := make([]*redis.Client, 3)
	for i := range clients {
		clients[i] = redistest.Start(t).Client(t)
	}
	engine, err := lock.NewRedlock(clients, lock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.Close() })
	reg := prometheus.NewRegistry()
	srv := server.New(engine, zerolog.Nop(), server.DefaultConfig(), reg)
	ts := httptest.NewServer(lockdtest.ValidateSpec(srv.Handler(reg, nil), t.Errorf))
	t.Cleanup(func() { srv.Shutdown(); ts.Close() })

	for _, tc := range []struct {
		name, path, body, field string
	}{
		{"shared acquire", "/v1/locks/rl:1/acquire", `{"mode":"shared"}`, "mode"},
		{"shared hold", "/v1/locks/rl:1/hold", `{"mode":"shared"}`, "mode"},
		{"semaphore acquire", "/v1/semaphores/rl:1/acquire", `{"limit":2}`, ""},
		{"semaphore hold", "/v1/semaphores/rl:1/hold", `{"limit":2}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, body, err := do(http.MethodPost, ts.URL+tc.path, "application/json", tc.body)
			if err != nil {
				t.Fatal(err)
			}
			p := problemOf(t, res, body)
			if res.StatusCode != 400 || p.Code != api.ProblemCodeUnsupported || p.Detail == nil || *p.Detail == "" {
				t.Fatalf("%d %s", res.StatusCode, body)
			}
			field := ""
			if p.Field != nil {
				field = *p.Field
			}
			if field != tc.field {
				t.Fatalf("field %q, want %q: %s", field, tc.field, body)
			}
		})
	}
	if _, err := engine.State(context.Background(), "rl:1"); err != lock.ErrNotFound {
		t.Fatalf("a refused shared acquire left a lease: %v", err)
	}

	c, err := api.NewClientWithResponses(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.AcquireLockWithResponse(ctx, "rl:2", nil, api.AcquireRequest{Owner: ptr("w")})
	if err != nil || l.JSON200 == nil || l.JSON200.Mode != api.GrantModeExclusive {
		t.Fatalf("exclusive acquire: %v %s", err, l.Body)
	}
	st, err := c.GetLockWithResponse(ctx, "rl:2")
	if err != nil || st.JSON200 == nil || len(st.JSON200.Holders) != 1 || st.JSON200.Holders[0].Fence != l.JSON200.Fence ||
		st.JSON200.Holders[0].Owner != "w" || st.JSON200.Queue == nil {
		t.Fatalf("state: %v %s", err, st.Body)
	}
	sems, err := c.ListSemaphoresWithResponse(ctx, nil)
	if err != nil || sems.JSON200 == nil || len(sems.JSON200.Semaphores) != 0 {
		t.Fatalf("list semaphores: %v %s", err, sems.Body)
	}
}
