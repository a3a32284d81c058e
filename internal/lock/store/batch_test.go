package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redistest"
)

func TestBatcher(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	count := &redistest.Counter{}
	rdb.AddHook(count)
	ctx := context.Background()
	echo := redis.NewScript(`redis.call('INCR', KEYS[1]) return {KEYS[1], ARGV[1]}`)

	t.Run("each caller gets its own answer, in shared pipelines", func(t *testing.T) {
		b := newBatcher(rdb)
		defer b.close()
		const callers, rounds = 64, 20
		var wg sync.WaitGroup
		errs := make(chan error, callers)
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := "batch:" + strconv.Itoa(i)
				for r := range rounds {
					v, err := b.run(ctx, echo, []string{key}, []any{r})
					if err != nil {
						errs <- err
						return
					}
					got := fmt.Sprint(v)
					if want := fmt.Sprintf("[%s %d]", key, r); got != want {
						errs <- fmt.Errorf("caller %d got %s, want %s", i, got, want)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for i := range callers {
			if n, _ := rdb.Get(ctx, "batch:"+strconv.Itoa(i)).Int(); n != rounds {
				t.Fatalf("batch:%d ran %d times, want %d", i, n, rounds)
			}
		}
		// 1,280 calls from 64 goroutines at once: they must have shared
		// round trips, or the batcher does nothing.
		if c, p := count.Commands.Load(), count.RoundTrips.Load(); p >= c {
			t.Fatalf("%d commands in %d round trips: nothing was batched", c, p)
		} else {
			t.Logf("%d commands in %d round trips", c, p)
		}
	})

	t.Run("a call whose context ended is not sent", func(t *testing.T) {
		b := newBatcher(rdb)
		defer b.close()
		done, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := b.run(done, echo, []string{"batch:cancelled"}, []any{1}); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		// A queued call whose context ends before a flusher takes it.
		c := &scriptCall{ctx: done, sc: echo, keys: []string{"batch:cancelled"}, args: []any{1}, done: make(chan struct{}, 1)}
		b.send([]*scriptCall{c}, nil)
		<-c.done
		if !errors.Is(c.err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", c.err)
		}
		if n, err := rdb.Exists(ctx, "batch:cancelled").Result(); err != nil || n != 0 {
			t.Fatalf("the cancelled call ran (exists %d, %v)", n, err)
		}
	})

	t.Run("scripts come back after SCRIPT FLUSH", func(t *testing.T) {
		b := newBatcher(rdb)
		defer b.close()
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var failed atomic.Int64
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := b.run(ctx, echo, []string{"batch:flush"}, []any{i}); err != nil {
					t.Error(err)
					failed.Add(1)
				}
			}()
		}
		wg.Wait()
		if n, _ := rdb.Get(ctx, "batch:flush").Int(); n != 16 || failed.Load() != 0 {
			t.Fatalf("ran %d of 16", n)
		}
	})

	t.Run("calls after close answer ErrClosed", func(t *testing.T) {
		b := newBatcher(rdb)
		b.close()
		b.close() // twice is fine
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := b.run(short, echo, []string{"batch:closed"}, []any{1}); !errors.Is(err, ErrClosed) {
			t.Fatalf("err = %v, want ErrClosed", err)
		}
	})

	t.Run("Redis down: every caller gets the error", func(t *testing.T) {
		opts := &redis.Options{Addr: "127.0.0.1:1"}
		TuneClient(opts)
		down := redis.NewClient(opts)
		defer down.Close()
		b := newBatcher(down)
		defer b.close()
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := b.run(ctx, echo, []string{"batch:down"}, []any{1}); err == nil {
					t.Error("a call to a closed port succeeded")
				}
			}()
		}
		wg.Wait()
	})
}
