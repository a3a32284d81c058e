package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
)

// TestStatusRenewalsMeanTheSameOnEveryRow: the state counts the renewals of
// one lease, so status shows RENEWALS only for a key with one holder, and
// ls says "-" beside several (newcomer #15: `-` on one shared holder's row
// and 32 on the other's).
func TestStatusRenewalsMeanTheSameOnEveryRow(t *testing.T) {
	ls := startCLIServer(t)
	ctx := context.Background()
	env := map[string]string{"LOCKD_SERVER": ls.url}
	one, err := ls.c.Acquire(ctx, "st:one", client.AcquireOptions{Owner: "solo", TTL: time.Minute, NoAutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := ls.c.Renew(ctx, "st:one", one.Token(), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for _, owner := range []string{"reader-a", "reader-b"} {
		if _, err := ls.c.Acquire(ctx, "st:shared", client.AcquireOptions{Owner: owner, TTL: time.Minute, Mode: client.Shared, NoAutoRenew: true}); err != nil {
			t.Fatal(err)
		}
	}

	_, out, _ := cli(t, env, "status", "st:one")
	header, row := field(out, 0), field(out, 1)
	if header[7] != "RENEWALS" || row[7] != "2" {
		t.Errorf("one holder renewed twice:\n%s", out)
	}
	_, out, _ = cli(t, env, "status", "st:shared")
	if strings.Contains(out, "RENEWALS") {
		t.Errorf("RENEWALS beside two shared holders:\n%s", out)
	}
	lines := strings.Split(out, "\n")
	if n := len(strings.Fields(lines[0])); n != len(strings.Fields(lines[1])) || n != len(strings.Fields(lines[2])) {
		t.Errorf("rows and header differ in columns:\n%s", out)
	}
	_, out, _ = cli(t, env, "ls", "--prefix", "st:")
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 8 && f[0] == "st:one" && f[8] != "2":
			t.Errorf("ls, one holder: renewals %q, want 2\n%s", f[8], out)
		case len(f) > 8 && f[0] == "st:shared" && f[8] != "-":
			t.Errorf("ls, two holders: renewals %q, want -\n%s", f[8], out)
		}
	}
}

// field is line n of out, split into fields.
func field(out string, n int) []string {
	lines := strings.Split(out, "\n")
	if n >= len(lines) {
		return make([]string, 9)
	}
	f := strings.Fields(lines[n])
	for len(f) < 9 {
		f = append(f, "")
	}
	return f
}
