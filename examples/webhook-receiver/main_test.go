package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/webhook"
)

const secret = "example-secret-0123456789"

// Deliveries from lockd's own dispatcher pass Verify and reach Handle once;
// forged, re-signed with another secret, or old ones are refused.
func TestReceiver(t *testing.T) {
	var mu sync.Mutex
	var got []Event
	h := &Handler{Secret: secret, Handle: func(ev Event) { mu.Lock(); got = append(got, ev); mu.Unlock() }}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	ld := lockdtest.Start(t, lockdtest.Options{})
	d := webhook.New(ld.Engine.EventClient(), ld.Engine.EventStream(),
		[]webhook.Hook{{Name: "example", URL: srv.URL, Secret: secret, Events: []string{"force_released"}, AllowPrivate: true}},
		webhook.Options{Poll: 50 * time.Millisecond}, prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	lockdtest.Eventually(t, func() bool {
		gs, err := ld.Engine.EventClient().XInfoGroups(ctx, ld.Engine.EventStream()).Result()
		return err == nil && len(gs) == 1
	}, 5*time.Second, "the consumer group")

	l, err := ld.Engine.Acquire(ctx, lock.Lock("deploy:prod"), lock.AcquireRequest{Owner: "ci", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ld.Engine.ForceReleaseFence(ctx, lock.Lock("deploy:prod"), 0, "ops", "stuck"); err != nil {
		t.Fatal(err)
	}
	lockdtest.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 1 }, 10*time.Second, "the delivery")
	if ev := got[0]; ev.Type != "force_released" || ev.Key != "deploy:prod" || ev.Fence != l.Fence || ev.Actor != "ops" || ev.Reason != "stuck" {
		t.Fatalf("event %+v", ev)
	}

	body := []byte(`{"id":"1-0","type":"expired","key":"k"}`)
	for _, tc := range []struct{ name, sig string }{
		{"no signature", ""},
		{"another secret", webhook.Sign("not-the-secret-0123456789", time.Now(), body)},
		{"an hour old", webhook.Sign(secret, time.Now().Add(-time.Hour), body)},
		{"garbage", "t=abc,v1=zz"},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(string(body)))
		req.Header.Set("Lockd-Signature", tc.sig)
		req.Header.Set("Lockd-Event-Id", "1-0")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", tc.name, resp.StatusCode)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Errorf("%d events handled, want 1", len(got))
	}
}
