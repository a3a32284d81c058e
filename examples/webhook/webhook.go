// Package webhook is an example: a webhook handler that processes each
// delivery once, however often its sender delivers it, on any number of
// replicas.
//
// For each delivery it takes a short lease on "webhook:<delivery ID>", with
// the delivery ID as the Idempotency-Key: if the handler was granted the
// lease but died or timed out before answering, the sender's retry gets the
// same lease back instead of waiting out the TTL.
//
// Such a retry gets the lease marked as a replay (Lease.Replayed, from the
// server's Idempotent-Replayed header): another attempt may still hold it
// and be processing the delivery, so the handler does not process it again.
// It answers 409 with Retry-After and leaves the lease to its first holder:
// if that attempt finishes, the next retry finds the delivery done; if it
// died, its lease lapses and the next retry gets a fresh lease with a
// higher fence. The Store settles the rest with the lease's fence: a claim
// succeeds when the delivery has no claim yet or only one with a lower fence
// (whose lease has ended), and Done only counts under the fence that
// claimed. In SQL, a table keyed by delivery ID does this:
//
//	INSERT INTO deliveries (id, fence, done) VALUES ($1, $2, false)
//	ON CONFLICT (id) DO UPDATE SET fence = excluded.fence
//	WHERE NOT deliveries.done AND deliveries.fence < excluded.fence
package webhook

import (
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/lockd/lockd/client"
)

// Errors of a Store's Claim.
var (
	// ErrDone means the delivery was processed already.
	ErrDone = errors.New("webhook: delivery already processed")
	// ErrInProgress means a claim with the same or a newer fence is
	// processing the delivery now.
	ErrInProgress = errors.New("webhook: delivery in progress")
)

// Store records which deliveries were processed. Use a table with the
// delivery ID as primary key; MemStore is for tests.
type Store interface {
	// Claim starts processing id under fence.
	Claim(ctx context.Context, id string, fence int64) error
	// Finish records the outcome of the claim with fence: done, or given
	// up so that a retry may claim it again.
	Finish(ctx context.Context, id string, fence int64, done bool) error
}

// Handler processes deliveries; see the package comment.
type Handler struct {
	Locks *client.Client
	Store Store
	// Process does the work; ctx is cancelled if the lease is lost.
	Process func(ctx context.Context, id string, body []byte) error
	// TTL is the lease's TTL (renewed while Process runs); default 30 s.
	TTL time.Duration
	// DeliveryHeader names the delivery ID header; default X-Delivery-Id
	// (GitHub: X-GitHub-Delivery).
	DeliveryHeader string
}

var deliveryID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,150}$`)

// ServeHTTP answers 200 once the delivery is processed (now or before), 409
// with Retry-After while another attempt processes it, 503 when lockd or
// the lease failed: senders retry those.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := h.DeliveryHeader
	if name == "" {
		name = "X-Delivery-Id"
	}
	id := r.Header.Get(name)
	if !deliveryID.MatchString(id) {
		http.Error(w, "missing or malformed "+name, http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return
	}
	ttl := h.TTL
	if ttl <= 0 {
		ttl = 30 * time.Second
	}

	lease, err := h.Locks.Acquire(r.Context(), "webhook:"+id, client.AcquireOptions{
		Owner: "webhook", TTL: ttl, IdempotencyKey: id,
	})
	var held *client.HeldError
	switch {
	case errors.As(err, &held):
		retryLater(w, http.StatusConflict, held.Remaining, "another attempt holds this delivery")
		return
	case err != nil:
		retryLater(w, http.StatusServiceUnavailable, time.Second, "lockd: "+err.Error())
		return
	}

	if lease.Replayed() {
		// Another attempt got this lease first and may be processing the
		// delivery: never process it twice; let the sender retry later.
		lease.Abandon()
		retryLater(w, http.StatusConflict, time.Second, "in progress")
		return
	}
	fence := lease.Fence()
	switch err := h.Store.Claim(r.Context(), id, fence); {
	case errors.Is(err, ErrInProgress):
		// The lease is the one the processing attempt holds (a replay):
		// leave it to that attempt, which renews and releases it.
		lease.Abandon()
		retryLater(w, http.StatusConflict, time.Second, "in progress")
		return
	case errors.Is(err, ErrDone):
		_ = lease.Release(context.WithoutCancel(r.Context()))
		_, _ = io.WriteString(w, "duplicate: already processed\n")
		return
	case err != nil:
		_ = lease.Release(context.WithoutCancel(r.Context()))
		retryLater(w, http.StatusServiceUnavailable, time.Second, "store: "+err.Error())
		return
	}
	defer func() { _ = lease.Release(context.WithoutCancel(r.Context())) }()
	// Process under the lease: its context ends if the lease is lost.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(lease.Context(), cancel)
	defer stop()
	perr := h.Process(ctx, id, body)
	if perr == nil && lease.Err() != nil {
		perr = lease.Err()
	}
	if err := h.Store.Finish(context.WithoutCancel(r.Context()), id, fence, perr == nil); err != nil && perr == nil {
		perr = err
	}
	if perr != nil {
		retryLater(w, http.StatusServiceUnavailable, time.Second, "processing failed")
		return
	}
	_, _ = io.WriteString(w, "processed\n")
}

// retryLater answers status with a Retry-After of after, rounded up.
func retryLater(w http.ResponseWriter, status int, after time.Duration, msg string) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int((after+time.Second-1)/time.Second))))
	http.Error(w, msg, status)
}

// MemStore is an in-memory Store, for tests and as a model of the SQL in
// the package comment.
type MemStore struct {
	mu sync.Mutex
	m  map[string]claim
}

type claim struct {
	fence int64
	done  bool
}

// Claim implements Store.
func (s *MemStore) Claim(_ context.Context, id string, fence int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]claim{}
	}
	c, ok := s.m[id]
	switch {
	case ok && c.done:
		return ErrDone
	case ok && c.fence >= fence:
		return ErrInProgress
	}
	s.m[id] = claim{fence: fence}
	return nil
}

// Finish implements Store.
func (s *MemStore) Finish(_ context.Context, id string, fence int64, done bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[id]
	if !ok || c.fence != fence {
		return errors.New("webhook: claim taken over by a newer lease")
	}
	if done {
		s.m[id] = claim{fence: fence, done: true}
	} else {
		delete(s.m, id)
	}
	return nil
}
