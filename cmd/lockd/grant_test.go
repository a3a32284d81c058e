package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/lockdtest"
)

// lockd run and lockd elect behind a holder that keeps the key longer than
// their TTL: granted after the wait, COMMAND runs to its end under a lease
// that lasts its TTL from the grant, and exits 0 (issue 35:
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

// lockd release (and sem release) of a lease that is already released or
// has expired exits 3 and says so, not "lease lost … stop the protected
// work", which is for a holder that renews (issue 35).
func TestReleaseOfAGoneLease(t *testing.T) {
	ls := startCLIServer(t)
	env := map[string]string{"LOCKD_SERVER": ls.url}
	tests := []struct {
		name    string
		noun    []string // "sem" or nothing
		acquire []string
		gone    func(t *testing.T, key, token string) // makes the lease gone
	}{
		{
			name:    "released twice",
			acquire: []string{"acquire", "--ttl", "10s"},
			gone: func(t *testing.T, key, token string) {
				if code, _, stderr := cli(t, env, "release", "--token", token, key); code != exitOK {
					t.Fatalf("first release: exit %d: %s", code, stderr)
				}
			},
		},
		{
			name:    "released, then held by another",
			acquire: []string{"acquire", "--ttl", "10s"},
			gone: func(t *testing.T, key, token string) {
				if code, _, stderr := cli(t, env, "release", "--token", token, key); code != exitOK {
					t.Fatalf("first release: exit %d: %s", code, stderr)
				}
				if code, _, stderr := cli(t, env, "acquire", "--ttl", "10s", key); code != exitOK {
					t.Fatalf("the other's acquire: exit %d: %s", code, stderr)
				}
			},
		},
		{
			name:    "expired",
			acquire: []string{"acquire", "--ttl", "200ms"},
			gone: func(t *testing.T, key, _ string) {
				lockdtest.Eventually(t, func() bool {
					_, err := ls.c.State(context.Background(), key)
					return errors.Is(err, client.ErrNotFound)
				}, 5*time.Second, "the lease expires")
			},
		},
		{
			name:    "a permit released twice",
			noun:    []string{"sem"},
			acquire: []string{"sem", "acquire", "--limit", "2", "--ttl", "10s"},
			gone: func(t *testing.T, key, token string) {
				if code, _, stderr := cli(t, env, "sem", "release", "--token", token, key); code != exitOK {
					t.Fatalf("first release: exit %d: %s", code, stderr)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "release-gone:" + strings.NewReplacer(" ", "-", ",", "").Replace(tt.name)
			code, out, stderr := cli(t, env, append(tt.acquire, key)...)
			if code != exitOK {
				t.Fatalf("acquire: exit %d: %s", code, stderr)
			}
			token := strings.TrimSpace(out)
			tt.gone(t, key, token)
			code, _, stderr = cli(t, env, append(append(tt.noun, "release", "--token", token), key)...)
			if code != exitLeaseLost || !strings.Contains(stderr, "nothing to release: the lease was already released or has expired") ||
				strings.Contains(stderr, "protected work") {
				t.Errorf("release: exit %d, stderr %q; want %d and already released or expired", code, stderr, exitLeaseLost)
			}
		})
	}
}
