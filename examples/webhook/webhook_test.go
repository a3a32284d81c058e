package webhook_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/examples/webhook"
	"github.com/lockd/lockd/internal/lockdtest"
)

func startLockd(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(lockdtest.Start(t, lockdtest.Options{}).URL)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func deliver(t *testing.T, url, id string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"event":"paid"}`))
	req.Header.Set("X-Delivery-Id", id)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, strings.TrimSpace(string(b))
}

func TestDuplicateDeliveriesAreProcessedOnce(t *testing.T) {
	locks := startLockd(t)
	var processed sync.Map // delivery ID → *atomic.Int32
	release := make(chan struct{})
	h := &webhook.Handler{
		Locks: locks, Store: &webhook.MemStore{}, TTL: time.Second,
		Process: func(ctx context.Context, id string, body []byte) error {
			n, _ := processed.LoadOrStore(id, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
			<-release // hold the first attempt until the duplicates have come
			return nil
		},
	}
	hs := httptest.NewServer(h)
	defer hs.Close()

	// Five copies of one delivery at once (the sender retrying, or
	// delivering twice), plus another delivery.
	type answer struct {
		code int
		body string
	}
	answers := make(chan answer, 6)
	var wg sync.WaitGroup
	for i := range 6 {
		id := "d-1"
		if i == 5 {
			id = "d-2"
		}
		wg.Go(func() {
			code, body := deliver(t, hs.URL, id)
			answers <- answer{code, body}
		})
	}
	// The four duplicates of d-1 answer 409 while d-1 is processed.
	for range 4 {
		select {
		case a := <-answers:
			if a.code != http.StatusConflict {
				t.Errorf("a duplicate got %d %q, want 409 while the first is processed", a.code, a.body)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("duplicates did not answer while the first was processed")
		}
	}
	close(release)
	wg.Wait()
	close(answers)
	for a := range answers {
		if a.code != http.StatusOK || a.body != "processed" {
			t.Errorf("got %d %q, want 200 processed", a.code, a.body)
		}
	}
	// Later retries are answered from the store.
	if code, body := deliver(t, hs.URL, "d-1"); code != http.StatusOK || !strings.Contains(body, "duplicate") {
		t.Errorf("retry after processing: %d %q", code, body)
	}
	for _, id := range []string{"d-1", "d-2"} {
		n, _ := processed.Load(id)
		if n == nil || n.(*atomic.Int32).Load() != 1 {
			t.Errorf("%s processed %v times, want once", id, n)
		}
	}
}

// A retry that arrives while an earlier attempt holds the delivery's lease
// is a replay: it is answered 409 and never processes the delivery a second
// time. When that attempt died, its lease lapses after the TTL (the handler
// keeps it short and renewed) and the next retry processes the delivery.
func TestRetryAfterACrashedHandlerIsProcessedOnce(t *testing.T) {
	locks := startLockd(t)
	var processed atomic.Int32
	h := &webhook.Handler{
		Locks: locks, Store: &webhook.MemStore{}, TTL: time.Second,
		Process: func(context.Context, string, []byte) error { processed.Add(1); return nil },
	}
	hs := httptest.NewServer(h)
	defer hs.Close()

	// The crashed attempt: granted, never released, never renewed.
	if _, err := locks.Acquire(context.Background(), "webhook:d-9",
		client.AcquireOptions{Owner: "webhook", TTL: time.Second, IdempotencyKey: "d-9", NoAutoRenew: true}); err != nil {
		t.Fatal(err)
	}
	code, body := deliver(t, hs.URL, "d-9")
	if code != http.StatusConflict || processed.Load() != 0 {
		t.Fatalf("retry during the first attempt's lease got %d %q (processed %d times), want 409, not processed",
			code, body, processed.Load())
	}
	deadline := time.Now().Add(5 * time.Second)
	for code != http.StatusOK && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		code, body = deliver(t, hs.URL, "d-9")
	}
	if code != http.StatusOK || body != "processed" || processed.Load() != 1 {
		t.Fatalf("retry after the lapse got %d %q (processed %d times), want 200 processed once", code, body, processed.Load())
	}
	if code, _ := deliver(t, hs.URL, "d-9"); code != http.StatusOK || processed.Load() != 1 {
		t.Fatalf("a later duplicate got %d, processed %d times", code, processed.Load())
	}
}

func TestBadDeliveryID(t *testing.T) {
	locks := startLockd(t)
	hs := httptest.NewServer(&webhook.Handler{Locks: locks, Store: &webhook.MemStore{},
		Process: func(context.Context, string, []byte) error { return nil }})
	defer hs.Close()
	for _, id := range []string{"", "../x", strings.Repeat("a", 200)} {
		if code, _ := deliver(t, hs.URL, id); code != http.StatusBadRequest {
			t.Errorf("delivery ID %q: %d, want 400", id, code)
		}
	}
}
