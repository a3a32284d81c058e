package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/webhook"
)

// N17: a receiver deduplicates by the signed body's id; the Lockd-Event-Id
// header, which the signature does not cover, is only a copy. A captured
// delivery replayed with another header is refused, and one replayed as
// it was is handled once.
func TestReceiverDeduplicatesBySignedID(t *testing.T) {
	var handled atomic.Int32
	srv := httptest.NewServer(&Handler{Secret: secret, Handle: func(Event) { handled.Add(1) }})
	t.Cleanup(srv.Close)
	body := `{"id":"7-0","type":"expired","key":"deploy:prod"}`
	sig := webhook.Sign(secret, time.Now(), []byte(body))
	for _, tc := range []struct {
		name, header string
		status       int
		handled      int32
	}{
		{"the delivery", "7-0", 204, 1},
		{"replayed as it was", "7-0", 204, 1},
		{"replayed with another header", "8-0", 400, 1},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		req.Header.Set("Lockd-Signature", sig)
		req.Header.Set("Lockd-Event-Id", tc.header)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tc.status || handled.Load() != tc.handled {
			t.Errorf("%s: %d, %d handled; want %d, %d", tc.name, res.StatusCode, handled.Load(), tc.status, tc.handled)
		}
	}
}
