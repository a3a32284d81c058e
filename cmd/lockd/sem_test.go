package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/redistest"
)

func TestCLISharedAndSemaphoreExitCodes(t *testing.T) {
	ls := startCLIServer(t)
	env := map[string]string{"LOCKD_SERVER": ls.url}
	ctx := context.Background()
	if _, err := ls.c.Semaphore("cli:pool", 1).Acquire(ctx, client.AcquireOptions{Owner: "holder", TTL: time.Minute, NoAutoRenew: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.c.Acquire(ctx, "cli:readers", client.AcquireOptions{Owner: "reader", Mode: client.Shared, TTL: time.Minute, NoAutoRenew: true}); err != nil {
		t.Fatal(err)
	}
	const stranger = "not-the-token-not-the-token-xxxx"

	tests := []struct {
		name string
		env  map[string]string
		args []string
		code int
		msg  string // stderr must contain this
	}{
		{"shared with a shared holder", env, []string{"acquire", "--shared", "cli:readers"}, exitOK, "acquired cli:readers shared"},
		{"shared from env", map[string]string{"LOCKD_SERVER": ls.url, "LOCKD_SHARED": "true"}, []string{"acquire", "cli:readers"}, exitOK, "shared"},
		{"exclusive with a shared holder", env, []string{"acquire", "cli:readers"}, exitHeld, "held by reader"},
		{"force-release a fence nobody has", env, []string{"force-release", "--fence", "1", "cli:readers"}, exitLeaseLost, "nothing was broken"},
		{"negative fence", env, []string{"force-release", "--fence", "-1", "cli:readers"}, exitUsage, "--fence"},
		{"a free permit", env, []string{"sem", "acquire", "--limit", "2", "cli:free"}, exitOK, "acquired a permit of cli:free (limit 2,"},
		{"limit from env", map[string]string{"LOCKD_SERVER": ls.url, "LOCKD_LIMIT": "2"}, []string{"sem", "acquire", "cli:free"}, exitOK, "limit 2"},
		{"no permit free", env, []string{"sem", "acquire", "--limit", "1", "cli:pool"}, exitHeld, "every permit of cli:pool is held"},
		{"no permit free after a wait", env, []string{"sem", "acquire", "--limit", "1", "--wait", "200ms", "cli:pool"}, exitHeld, "(holder)"},
		{"another limit", env, []string{"sem", "acquire", "--limit", "3", "cli:pool"}, exitUsage, "limit_mismatch"},
		{"no limit", env, []string{"sem", "acquire", "cli:x"}, exitUsage, "--limit"},
		{"limit out of range", env, []string{"sem", "acquire", "--limit", "10001", "cli:x"}, exitUsage, "limit"},
		{"bad name", env, []string{"sem", "acquire", "--limit", "1", "bad/name"}, exitUsage, "invalid_request"},
		{"--shared on a semaphore", env, []string{"sem", "acquire", "--shared", "--limit", "1", "cli:x"}, exitUsage, "flag provided but not defined"},
		{"renew stranger token", env, []string{"sem", "renew", "--token", stranger, "cli:pool"}, exitLeaseLost, "lease lost"},
		{"renew a free semaphore", env, []string{"sem", "renew", "--token", stranger, "cli:nothing"}, exitLeaseLost, "404 not_found"},
		{"renew without token", env, []string{"sem", "renew", "cli:pool"}, exitUsage, "sem renew needs --token"},
		{"release stranger token", env, []string{"sem", "release", "--token", stranger, "cli:pool"}, exitLeaseLost, "nothing to release"},
		{"status held", env, []string{"sem", "status", "cli:pool"}, exitOK, ""},
		{"status free", env, []string{"sem", "status", "cli:nothing"}, exitLeaseLost, "no live permit"},
		{"status of the lock of the same name", env, []string{"status", "cli:pool"}, exitLeaseLost, "no live lease"},
		{"force-release free", env, []string{"sem", "force-release", "cli:nothing"}, exitLeaseLost, "404 not_found"},
		{"force-release another fence", env, []string{"sem", "force-release", "--fence", "1", "cli:pool"}, exitLeaseLost, "409 lease_lost"},
		{"list", env, []string{"sem", "list", "--prefix", "cli:"}, exitOK, ""},
		{"ls", env, []string{"sem", "ls"}, exitOK, ""},
		{"history", env, []string{"sem", "history", "cli:pool"}, exitOK, ""},
		{"unreachable", nil, []string{"sem", "status", "--server", "http://127.0.0.1:1", "cli:pool"}, exitUnreachable, "unavailable"},
		{"no subcommand", env, []string{"sem"}, exitUsage, "usage: lockd sem"},
		{"unknown subcommand", env, []string{"sem", "take", "cli:pool"}, exitUsage, "unknown sem subcommand"},
		{"two names", env, []string{"sem", "status", "a", "b"}, exitUsage, "wants NAME"},
		{"help", env, []string{"sem", "acquire", "-h"}, exitOK, "usage: lockd sem acquire --limit N"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := cli(t, tt.env, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr)
			}
			if !strings.Contains(stderr, tt.msg) {
				t.Errorf("stderr %q does not say %q", stderr, tt.msg)
			}
		})
	}

	code, out, _ := cli(t, env, "sem", "-h")
	if code != exitOK || !strings.Contains(out, "lockd sem acquire --limit N") {
		t.Errorf("sem -h: exit %d, %q", code, out)
	}
}

// A script takes two permits, sees them in status and list, breaks one by
// its fence, renews and releases the other.
func TestCLISemaphoreScript(t *testing.T) {
	ls := startCLIServer(t)
	env := map[string]string{"LOCKD_SERVER": ls.url}

	var tokens []string
	for _, owner := range []string{"a", "b"} {
		code, out, stderr := cli(t, env, "sem", "acquire", "--limit", "2", "--ttl", "10s", "--owner", owner, "cli:pool")
		if code != exitOK {
			t.Fatalf("sem acquire: exit %d: %s", code, stderr)
		}
		token := strings.TrimSpace(out)
		if strings.ContainsAny(token, " \n") || len(token) < 22 || strings.Contains(stderr, token) {
			t.Fatalf("sem acquire printed %q (stderr %q), want just the token on stdout", out, stderr)
		}
		tokens = append(tokens, token)
	}

	code, out, stderr := cli(t, env, "sem", "status", "cli:pool")
	if code != exitOK {
		t.Fatalf("sem status: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"permit  a", "permit  b", "2 of 2 permits held, 0 waiting"} {
		if !strings.Contains(out, want) {
			t.Errorf("sem status does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, tokens[0]) || strings.Contains(out, tokens[1]) {
		t.Error("sem status printed a token")
	}

	var st api.LockState
	mustJSON(t, env, &st, "sem", "status", "--json", "cli:pool")
	if st.Key != "cli:pool" || st.Limit == nil || *st.Limit != 2 || len(st.Holders) != 2 || st.Mode != api.GrantModePermit {
		t.Fatalf("sem status --json = %+v", st)
	}
	var list api.SemaphoreList
	mustJSON(t, env, &list, "sem", "list", "--json")
	if len(list.Semaphores) != 1 || list.Semaphores[0].Key != "cli:pool" {
		t.Errorf("sem list --json = %+v", list)
	}
	code, out, _ = cli(t, env, "sem", "list")
	if code != exitOK || !strings.Contains(out, "cli:pool") || !strings.Contains(out, "2/2") {
		t.Errorf("sem list: exit %d:\n%s", code, out)
	}
	var locks api.LockList
	mustJSON(t, env, &locks, "ls", "--json")
	if len(locks.Locks) != 0 {
		t.Errorf("ls lists a semaphore: %+v", locks)
	}

	// Break a's permit by its fence: b keeps its own.
	var broken api.ForceReleaseResult
	mustJSON(t, env, &broken, "sem", "force-release", "--json", "--reason", "test", "--fence", itoa(st.Holders[0].Fence), "cli:pool")
	if broken.Owner != "a" || broken.Fence != st.Holders[0].Fence {
		t.Fatalf("sem force-release --fence = %+v, want a's permit", broken)
	}
	if code, _, _ := cli(t, env, "sem", "renew", "--token", tokens[0], "cli:pool"); code != exitLeaseLost {
		t.Errorf("renew of the broken permit: exit %d, want %d", code, exitLeaseLost)
	}
	var renewed api.Lease
	mustJSON(t, map[string]string{"LOCKD_SERVER": ls.url, "LOCKD_TOKEN": tokens[1]}, &renewed, "sem", "renew", "--json", "--ttl", "20s", "cli:pool")
	if renewed.Owner != "b" || renewed.TtlMs != 20000 || renewed.Mode != api.GrantModePermit {
		t.Errorf("sem renew --json = %+v", renewed)
	}
	code, out, stderr = cli(t, env, "sem", "release", "--token", tokens[1], "cli:pool")
	if code != exitOK || !strings.Contains(out, "released cli:pool") {
		t.Fatalf("sem release: exit %d: %s%s", code, out, stderr)
	}
	if code, _, _ := cli(t, env, "sem", "status", "cli:pool"); code != exitLeaseLost {
		t.Errorf("sem status after the last release: exit %d, want %d", code, exitLeaseLost)
	}
	var h api.History
	mustJSON(t, env, &h, "sem", "history", "--json", "cli:pool")
	var types []string
	for _, e := range h.Events {
		types = append(types, string(e.Type))
	}
	if got := strings.Join(types, " "); got != "released force_released acquired acquired" {
		t.Errorf("sem history = %q", got)
	}
}

// status shows every shared holder and the queue behind them.
func TestCLIStatusShowsHoldersAndQueue(t *testing.T) {
	ls := startCLIServer(t)
	env := map[string]string{"LOCKD_SERVER": ls.url}
	ctx := context.Background()
	for _, owner := range []string{"reader-1", "reader-2"} {
		if code, _, stderr := cli(t, env, "acquire", "--shared", "--ttl", "10s", "--owner", owner, "cli:doc"); code != exitOK {
			t.Fatalf("acquire --shared: exit %d: %s", code, stderr)
		}
	}
	writer := make(chan error, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, err := ls.c.Acquire(wctx, "cli:doc", client.AcquireOptions{Owner: "writer", Wait: 30 * time.Second})
		writer <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := ls.c.State(ctx, "cli:doc")
		if err == nil && len(st.Queue) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the writer is not in the queue: %+v, %v", st.Queue, err)
		}
		time.Sleep(5 * time.Millisecond)
	}

	code, out, stderr := cli(t, env, "status", "cli:doc")
	if code != exitOK {
		t.Fatalf("status: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"shared  reader-1", "shared  reader-2", "2 holder(s), 1 waiting", "QUEUE", "1      writer  exclusive"} {
		if !strings.Contains(out, want) {
			t.Errorf("status does not say %q:\n%s", want, out)
		}
	}
	var st api.LockState
	mustJSON(t, env, &st, "status", "--json", "cli:doc")
	if st.Mode != api.GrantModeShared || len(st.Holders) != 2 || len(st.Queue) != 1 || st.Queue[0].Owner != "writer" {
		t.Errorf("status --json = %+v", st)
	}
	code, out, _ = cli(t, env, "ls")
	if code != exitOK || !strings.Contains(out, "shared") {
		t.Errorf("ls: exit %d:\n%s", code, out)
	}
	cancel()
	<-writer
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A Redlock server has neither shared holds nor semaphores: the CLI says
// so and exits 2, for reads as for grants, and lockd run never starts
// COMMAND.
func TestCLIRedlockRefusesSharedAndSemaphores(t *testing.T) {
	masters := []*redistest.Server{redistest.Start(t), redistest.Start(t), redistest.Start(t)}
	urls := make([]string, len(masters))
	for i, m := range masters {
		urls[i] = m.URL()
	}
	inst := startServe(t, nil, "--redlock", strings.Join(urls, ","))
	env := map[string]string{"LOCKD_SERVER": inst.url}
	tests := []struct {
		name string
		args []string
	}{
		{"acquire --shared", []string{"acquire", "--shared", "rl:k"}},
		{"sem acquire", []string{"sem", "acquire", "--limit", "2", "rl:pool"}},
		{"run --shared", []string{"run", "--shared", "rl:k", "--", "sh", "-c", "echo ran"}},
		{"run --semaphore", []string{"run", "--semaphore", "rl:pool", "--limit", "2", "--", "sh", "-c", "echo ran"}},
		// Reads too: "no semaphore has a permit held" would read as "none
		// in use", not "none here".
		{"sem list", []string{"sem", "list"}},
		{"sem status", []string{"sem", "status", "rl:pool"}},
		{"sem history", []string{"sem", "history", "rl:pool"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, stderr := cli(t, env, tt.args...)
			if code != exitUsage || !strings.Contains(stderr, "unsupported") || strings.Contains(out, "ran") {
				t.Errorf("exit %d, want %d saying unsupported, without running COMMAND; stdout %q, stderr:\n%s", code, exitUsage, out, stderr)
			}
		})
	}
	// Exclusive locks work as ever.
	if code, _, stderr := cli(t, env, "acquire", "rl:k"); code != exitOK {
		t.Errorf("exclusive acquire on Redlock: exit %d: %s", code, stderr)
	}
}
