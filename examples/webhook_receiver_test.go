package examples_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/webhook"
)

// webhook_receiver.py takes lockd's signed deliveries and prints each event
// once; a forged or stale signature is refused.
func TestPythonWebhookReceiver(t *testing.T) {
	need(t, "python3", "apt-get install python3")
	const secret = "example-secret-0123456789"
	ld := lockdtest.Start(t, lockdtest.Options{})
	// Port 0: the receiver prints the port it was given.
	py := start(t, &lockd{url: ld.URL}, []string{"LOCKD_WEBHOOK_SECRET=" + secret}, "python3", "webhook_receiver.py", "127.0.0.1", "0")
	py.waitOutput(t, "listening on 127.0.0.1:")
	var port int
	if _, err := fmt.Sscanf(py.out.String(), "listening on 127.0.0.1:%d", &port); err != nil {
		t.Fatalf("the receiver's port: %v in %q", err, py.out.String())
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/lockd", port)

	d := webhook.New(ld.Engine.EventClient(), ld.Engine.EventStream(),
		[]webhook.Hook{{Name: "py", URL: url, Secret: secret, Prefixes: []string{"py:"}, AllowPrivate: true}},
		webhook.Options{Poll: 50 * time.Millisecond}, prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	lockdtest.Eventually(t, func() bool {
		gs, err := ld.Engine.EventClient().XInfoGroups(ctx, ld.Engine.EventStream()).Result()
		return err == nil && len(gs) == 1
	}, 5*time.Second, "the consumer group")

	if _, err := ld.Engine.Acquire(ctx, lock.Lock("py:job"), lock.AcquireRequest{Owner: "cron", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := ld.Engine.ForceReleaseFence(ctx, lock.Lock("py:job"), 0, "ops", "stuck"); err != nil {
		t.Fatal(err)
	}
	py.waitOutput(t, `"type": "force_released"`)
	if out := py.out.String(); !strings.Contains(out, `"type": "acquired"`) || !strings.Contains(out, `"reason": "stuck"`) {
		t.Fatalf("printed:\n%s", out)
	}

	body := `{"id":"1-0","type":"expired","key":"py:x"}`
	for _, tc := range []struct{ name, sig string }{
		{"no signature", ""},
		{"another secret", webhook.Sign("not-the-secret-0123456789", time.Now(), []byte(body))},
		{"an hour old", webhook.Sign(secret, time.Now().Add(-time.Hour), []byte(body))},
		{"good", webhook.Sign(secret, time.Now(), []byte(body))},
	} {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Lockd-Signature", tc.sig)
		req.Header.Set("Lockd-Event-Id", "1-0")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := http.StatusUnauthorized
		if tc.name == "good" {
			want = http.StatusNoContent
		}
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, want)
		}
	}
}
