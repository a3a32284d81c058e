package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/lockdtest"
)

// lockd run and lockd elect behind a holder that keeps the key longer than
// their TTL: granted after the wait, COMMAND runs to its end under a lease
// that lasts its TTL from the grant, and exits 0 (issue 35, newcomer #1:
// COMMAND was stopped the moment it got the lock, exit 3, "server
// unavailable").
func TestGrantAfterWaitLongerThanTTL(t *testing.T) {
	ls := startCLIServer(t)
	env := map[string]string{"LOCKD_SERVER": ls.url}
	ctx := context.Background()
	const hold = 3 * time.Second // longer than --ttl 2s
	tests := []struct {
		name    string
		cmd     string
		hold    func(key string) (*client.Lease, error)
		waiting func(key string) int
	}{
		{
			name: "run",
			hold: func(key string) (*client.Lease, error) {
				return ls.c.Acquire(ctx, key, client.AcquireOptions{Owner: "holder", TTL: 10 * time.Second})
			},
			waiting: func(key string) int {
				st, err := ls.c.State(ctx, key)
				if err != nil {
					return 0
				}
				return st.Waiters
			},
		},
		{
			name: "elect",
			hold: func(key string) (*client.Lease, error) {
				return ls.c.Campaign(ctx, key, client.CampaignOptions{Owner: "leader", TTL: 10 * time.Second})
			},
			waiting: func(key string) int {
				st, err := ls.c.Leader(ctx, key)
				if err != nil {
					return 0
				}
				return len(st.Candidates)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := "grant-after-wait:" + tt.name
			holder, err := tt.hold(key)
			if err != nil {
				t.Fatal(err)
			}
			var out, errb lockdtest.Buffer
			done := make(chan int, 1)
			go func() {
				// The command outlives the first renewals (every 667 ms).
				err := run(context.Background(), []string{"lockd", tt.name, "--ttl", "2s", "--wait", "10s", key, "--",
					"sh", "-c", "echo started; sleep 1.5; echo finished"}, func(k string) string { return env[k] }, &out, &errb)
				done <- exitCode(err, &errb)
			}()
			lockdtest.Eventually(t, func() bool { return tt.waiting(key) == 1 }, 5*time.Second, "lockd "+tt.name+" waits")
			time.Sleep(hold) // the wait to outlast: longer than the TTL
			if err := holder.Release(ctx); err != nil {
				t.Fatal(err)
			}
			code := waitExit(t, done, 15*time.Second, &errb)
			if code != 0 || out.String() != "started\nfinished\n" {
				t.Fatalf("lockd %s exited %d; stdout %q; stderr:\n%s", tt.name, code, &out, &errb)
			}
			if strings.Contains(errb.String(), "lost") {
				t.Errorf("stderr speaks of a loss:\n%s", &errb)
			}
		})
	}
}
