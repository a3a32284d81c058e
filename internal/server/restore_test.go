package server_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
)

// An open /hold and campaign/hold stream sees no "lost" when Redis
// restarts empty under it: lockd puts the lease back, and the stream's
// renewals go on (issue 34: holders notice nothing).
func TestHoldStreamsSurviveARedisLoss(t *testing.T) {
	ld := lockdtest.Start(t, lockdtest.Options{Engine: lock.Options{EpochRefresh: 200 * time.Millisecond}})
	type stream struct {
		path   string
		events chan string
	}
	var streams []stream
	for path, body := range map[string]string{
		"/v1/locks/rl:hold/hold":               `{"ttl_ms":1500,"owner":"h"}`,
		"/v1/elections/rl:elect/campaign/hold": `{"ttl_ms":1500,"candidate":"h"}`,
	} {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ld.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %v", path, err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		events := make(chan string, 100)
		go func() {
			defer close(events)
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if line := sc.Text(); strings.HasPrefix(line, "event: ") {
					events <- line[7:]
				}
			}
		}()
		streams = append(streams, stream{path, events})
	}
	for _, s := range streams {
		if e := <-s.events; e != "acquired" && e != "leader" {
			t.Fatalf("%s: first event %q", s.path, e)
		}
	}
	ld.Redis.Restart()
	// Three renewals of each stream after the restart (one every 500 ms),
	// none of them lost.
	for _, s := range streams {
		renewals := 0
		for renewals < 3 {
			select {
			case e, ok := <-s.events:
				if !ok {
					t.Fatalf("%s: the stream ended after the restart", s.path)
				}
				if e == "lost" {
					t.Fatalf("%s: lost after Redis restarted empty", s.path)
				}
				if e == "renewed" {
					renewals++
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: %d renewals in 10 s after the restart", s.path, renewals)
			}
		}
	}
}
