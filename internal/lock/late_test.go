package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
)

// lateCalls is a fault-injecting hook on a real client: the first call
// whose arguments carry marker is answered with a timeout at once, and sent
// to Redis only after delay, as a call that a slow network delivers after
// its caller gave up on it (and after the caller's later calls).
type lateCalls struct {
	marker string
	delay  time.Duration
	mu     sync.Mutex
	done   bool
	ran    chan struct{} // closed once the late call ran in Redis
}

var errLate = fmt.Errorf("i/o timeout (injected): %w", context.DeadlineExceeded)

func (h *lateCalls) take(cmds []redis.Cmder) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return false
	}
	for _, c := range cmds {
		if strings.Contains(fmt.Sprint(c.Args()...), h.marker) {
			h.done = true
			return true
		}
	}
	return false
}

func (h *lateCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lateCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.take([]redis.Cmder{cmd}) {
			return next(ctx, cmd)
		}
		late := redis.NewCmd(context.Background(), cmd.Args()...)
		go func() {
			time.Sleep(h.delay)
			_ = next(context.Background(), late)
			close(h.ran)
		}()
		cmd.SetErr(errLate)
		return errLate
	}
}

func (h *lateCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.take(cmds) {
			return next(ctx, cmds)
		}
		late := make([]redis.Cmder, len(cmds))
		for i, c := range cmds {
			late[i] = redis.NewCmd(context.Background(), c.Args()...)
			c.SetErr(errLate)
		}
		go func() {
			time.Sleep(h.delay)
			_ = next(context.Background(), late)
			close(h.ran)
		}()
		return errLate
	}
}

// TestLateTryLeavesNoGrantBehindA409: a waiter's try that Redis did not
// answer in time may still run later, after the waiter was answered 409
// and the holder it waited for has gone. A 409 means nothing was granted:
// that late grant is given back, and does not hold the key for its TTL
// with nobody knowing its token (issue 35, item 9).
func TestLateTryLeavesNoGrantBehindA409(t *testing.T) {
	srv := redistest.Start(t)
	rdb := tunedClient(t, srv)
	late := &lateCalls{marker: "late-waiter", delay: 600 * time.Millisecond, ran: make(chan struct{})}
	rdb.AddHook(late)
	e := lock.New(rdb, lock.Options{CallTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { _ = e.Close() })
	ctx := context.Background()
	key := lock.Lock("late:k")

	h := mustAcquire(t, e, key, lock.AcquireRequest{Owner: "holder", TTL: time.Minute})
	// The waiter's first try is the late one; its next tries find the key
	// held, until its wait ends.
	_, err := e.Acquire(ctx, key, lock.AcquireRequest{Owner: "late-waiter", TTL: 20 * time.Second, Wait: 200 * time.Millisecond})
	if !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("the waiter's answer: %v, want held (409)", err)
	}
	// The holder lets go before the late try reaches Redis.
	if _, err := e.Release(ctx, key, h.Token, "holder"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-late.ran:
	case <-time.After(5 * time.Second):
		t.Fatal("the late try never ran")
	}
	lockdtest.Eventually(t, func() bool {
		st, err := e.State(ctx, key)
		if errors.Is(err, lock.ErrNotFound) {
			return true
		}
		return err == nil && st.Owner != "late-waiter"
	}, 5*time.Second, "the key free of the grant answered 409 (its TTL is 20 s)")
}
