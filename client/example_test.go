package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/lockd/lockd/client"
)

// Run a job under a lock: WithLock acquires, renews while the job runs,
// cancels the job's context if the lease is lost, and releases at the end.
func Example() {
	c, err := client.New("http://127.0.0.1:8080", client.WithAPIKey(os.Getenv("LOCKD_API_KEY")))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	err = client.WithLock(ctx, c, "report:daily", client.AcquireOptions{TTL: 30 * time.Second, Wait: time.Minute},
		func(ctx context.Context) error {
			// ctx is cancelled as soon as the lease is lost: stop then.
			return buildReport(ctx)
		})
	switch {
	case errors.Is(err, client.ErrHeld):
		log.Print("another run holds the report; skipping")
	case err != nil:
		log.Fatal(err)
	}
}

// A lease held by hand: pass its fence to the resource it protects, and
// stop when it is lost.
func ExampleClient_Acquire() {
	c, err := client.New("http://127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.Acquire(ctx, "order:pay:12345", client.AcquireOptions{Owner: "worker-7", TTL: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(context.Background())

	// The fence rises with every grant of the key: a store that refuses
	// writes with a fence lower than one it has seen keeps a paused,
	// expired holder out.
	if err := chargeCard(l.Context(), "order:pay:12345", l.Fence()); err != nil {
		log.Print(err)
	}
	select {
	case <-l.Lost():
		log.Printf("lease lost: %v", l.Err())
	default:
	}
}

// Who holds the key, when an acquire does not get it in time.
func ExampleClient_Acquire_held() {
	c, err := client.New("http://127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.Acquire(context.Background(), "deploy:prod", client.AcquireOptions{Wait: 5 * time.Second})
	var held *client.HeldError
	var queued *client.QueuedError
	switch {
	case errors.As(err, &held):
		fmt.Printf("held by %s for %v more; retry after %v\n", held.Holder, held.Remaining, held.RetryAfter)
	case errors.As(err, &queued):
		fmt.Printf("free, but %d earlier waiter(s) come first; next is %s\n", queued.Waiters, queued.Next)
	case err != nil:
		log.Fatal(err)
	}
}

// Readers hold a lock together; a writer holds it alone, and readers that
// come after a waiting writer queue behind it.
func ExampleClient_Acquire_shared() {
	c, err := client.New("http://127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	err = client.WithLock(ctx, c, "config:routes", client.AcquireOptions{Mode: client.Shared, Wait: 10 * time.Second},
		func(ctx context.Context) error { return readRoutes(ctx) })
	if err != nil {
		log.Fatal(err)
	}
}

// A mode a lock does not have is refused before any request is sent.
func ExampleClient_Acquire_invalidMode() {
	c, err := client.New("http://127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.Acquire(context.Background(), "config:routes", client.AcquireOptions{Mode: client.Permit})
	fmt.Println(errors.Is(err, client.ErrInvalid))
	fmt.Println(err)
	// Output:
	// true
	// lockd: invalid request: mode "permit": a lock is held exclusive or shared
}

// A semaphore lets at most limit holders in at once; every process that
// shares it must use the same limit. A Semaphore holds no state.
func ExampleClient_Semaphore() {
	c, err := client.New("http://127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	pool := c.Semaphore("render:pool", 4)
	fmt.Println(pool.Name(), pool.Limit())

	// Only Acquire needs the limit; without one it is refused at once.
	_, err = c.Semaphore("render:pool", 0).Acquire(context.Background(), client.AcquireOptions{})
	fmt.Println(errors.Is(err, client.ErrInvalid))
	// Output:
	// render:pool 4
	// true
}

// Run a job under one of a semaphore's permits.
func ExampleWithPermit() {
	c, err := client.New("http://127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	pool := c.Semaphore("render:pool", 4)
	err = client.WithPermit(context.Background(), pool, client.AcquireOptions{Wait: time.Minute},
		func(ctx context.Context) error { return render(ctx) })
	var full *client.NoPermitsError
	if errors.As(err, &full) {
		log.Printf("all %d permits busy; the first ends in %v", pool.Limit(), full.Remaining)
	}
}

// Every answer of the server that is not a success is an *APIError (or a
// type that embeds one) carrying the problem+json body, and errors.Is
// finds the matching sentinel.
func ExampleAPIError() {
	c, err := client.New("http://127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.State(context.Background(), "order:pay:12345")
	var apiErr *client.APIError
	switch {
	case errors.Is(err, client.ErrNotFound):
		fmt.Println("not held")
	case errors.Is(err, client.ErrUnavailable):
		fmt.Println("lockd or its Redis is down; retry")
	case errors.As(err, &apiErr):
		fmt.Println(apiErr.Status, apiErr.Problem.Code)
	}
}

func buildReport(context.Context) error               { return nil }
func chargeCard(context.Context, string, int64) error { return nil }
func readRoutes(context.Context) error                { return nil }
func render(context.Context) error                    { return nil }
