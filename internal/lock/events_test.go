package lock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/redistest"
)

// A resume reads a bounded part of the stream and never misses events
// silently (N6, N10 of the second audit): within the window it gets every
// event after its ID; past the window, those of the window, then a Reset
// (too_far); from an ID the stream trimmed past, a Reset (trimmed) at
// once. After a Reset the subscription goes on live from its ID, the
// newest event.
func TestResume(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	e := lock.New(rdb, lock.Options{EventsResumeMax: 5})
	t.Cleanup(func() { _ = e.Close() })
	ctx := context.Background()
	var ids []string // ids[i] is the event of key ev:<i>
	add := func() {
		t.Helper()
		if _, err := e.Acquire(ctx, lock.Lock(fmt.Sprintf("ev:%d", len(ids))), lock.AcquireRequest{Owner: "w", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		last, err := rdb.XRevRangeN(ctx, e.EventStream(), "+", "-", 1).Result()
		if err != nil || len(last) != 1 {
			t.Fatal(last, err)
		}
		ids = append(ids, last[0].ID)
	}
	// resume reads what a subscription after after catches up with (up to
	// the newest event, or a reset), then one live event.
	resume := func(t *testing.T, after string) string {
		t.Helper()
		sub, err := e.Subscribe(ctx, after)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		next := func() lock.Change {
			t.Helper()
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			c, err := sub.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		var got []string
		for newest := ids[len(ids)-1]; ; {
			c := next()
			if c.Type == lock.Reset {
				if c.ID != newest {
					t.Errorf("reset at %s, want the newest event %s", c.ID, newest)
				}
				got = append(got, "reset "+c.Reason)
				break
			}
			got = append(got, c.Resource.Name)
			if c.ID == newest {
				break
			}
		}
		add()
		return fmt.Sprint(append(got, next().Resource.Name))
	}

	for range 8 {
		add() // ev:0 … ev:7
	}
	// Each resume adds the live event that ends it.
	for _, tc := range []struct {
		name  string
		after func() string
		want  string
	}{
		{"within the window", func() string { return ids[4] }, "[ev:5 ev:6 ev:7 ev:8]"},
		{"the window, to the last", func() string { return ids[3] }, "[ev:4 ev:5 ev:6 ev:7 ev:8 ev:9]"},
		{"past the window", func() string { return ids[0] }, "[ev:1 ev:2 ev:3 ev:4 ev:5 reset too_far ev:10]"},
		{"from 0-0, past the window", func() string { return "0-0" }, "[ev:0 ev:1 ev:2 ev:3 ev:4 reset too_far ev:11]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := resume(t, tc.after()); got != tc.want {
				t.Fatalf("resumed %s, want %s", got, tc.want)
			}
		})
	}

	// The stream trims its oldest events: it keeps ev:9 … ev:11.
	if err := rdb.XTrimMaxLen(ctx, e.EventStream(), 3).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		after func() string
		want  string
	}{
		{"trimmed past", func() string { return ids[2] }, "[reset trimmed ev:12]"},
		{"from 0-0, trimmed", func() string { return "0-0" }, "[reset trimmed ev:13]"},
		// The newest trimmed event: nothing after it is lost, but the
		// stream cannot tell (Redis does not say which it trimmed).
		{"the newest trimmed", func() string { return ids[8] }, "[reset trimmed ev:14]"},
		{"the oldest kept", func() string { return ids[9] }, "[ev:10 ev:11 ev:12 ev:13 ev:14 ev:15]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := resume(t, tc.after()); got != tc.want {
				t.Fatalf("resumed %s, want %s", got, tc.want)
			}
		})
	}
}
