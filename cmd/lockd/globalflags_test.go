package main

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/client"
)

// TestGlobalFlagsBeforeTheCommand: --server, --api-key and --json may come
// before the command, as etcdctl's --endpoints do (newcomer #11: `lockd
// --server URL history KEY` answered unknown command "--server"); flags
// that belong to no client command there are refused by name.
func TestGlobalFlagsBeforeTheCommand(t *testing.T) {
	ls := startCLIServer(t)
	ctx := context.Background()
	if _, err := ls.c.Acquire(ctx, "gf:k", client.AcquireOptions{Owner: "holder", TTL: time.Minute, NoAutoRenew: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.c.Semaphore("gf:pool", 2).Acquire(ctx, client.AcquireOptions{Owner: "permit-1", TTL: time.Minute, NoAutoRenew: true}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		code int
		out  string // in stdout (ok) or stderr (refused)
	}{
		{[]string{"--server", ls.url, "status", "gf:k"}, exitOK, "holder"},
		{[]string{"--server=" + ls.url, "--json", "status", "gf:k"}, exitOK, `"owner": "holder"`},
		{[]string{"-server", ls.url, "history", "gf:k"}, exitOK, "acquired"},
		{[]string{"--server", ls.url, "sem", "status", "gf:pool"}, exitOK, "permit-1"},
		{[]string{"--api-key", "k", "--server", ls.url, "ls"}, exitOK, "gf:k"},
		{[]string{"--server", ls.url, "quarantine", "end"}, exitUsage, "--reason"},
		{[]string{"--server", ls.url}, exitUsage, "a command must follow"},
		{[]string{"--server"}, exitUsage, "--server wants a value"},
		{[]string{"--server", ls.url, "--ttl", "5s", "status", "gf:k"}, exitUsage, "unknown flag --ttl before the command"},
		{[]string{"--server", ls.url, "serve"}, exitUsage, "client flag"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := cli(t, nil, tc.args...)
			where := stdout
			if tc.code != exitOK {
				where = stderr
			}
			if code != tc.code || !strings.Contains(where, tc.out) {
				t.Fatalf("exit %d, want %d with %q\nstdout: %s\nstderr: %s", code, tc.code, tc.out, stdout, stderr)
			}
		})
	}
}

// TestEveryFlagIsDescribed: each command's -h gives every flag a line that
// says what it does (newcomer #13 found one without).
func TestEveryFlagIsDescribed(t *testing.T) {
	commands := [][]string{{"serve"}, {"healthcheck"}, {"sem", "acquire"}, {"sem", "renew"}, {"sem", "release"},
		{"sem", "status"}, {"sem", "list"}, {"sem", "history"}, {"sem", "force-release"},
		{"session", "create"}, {"session", "renew"}, {"session", "show"}, {"session", "end"}, {"quarantine", "end"}}
	for name := range clientCommands {
		if !withSubcommands[name] {
			commands = append(commands, []string{name})
		}
	}
	for _, c := range commands {
		_, stdout, stderr := cli(t, nil, append(c, "-h")...)
		lines := strings.Split(stdout+stderr, "\n")
		flags := 0
		for i, line := range lines {
			if !strings.HasPrefix(line, "  -") {
				continue
			}
			flags++
			if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) == "" || strings.HasPrefix(lines[i+1], "  -") {
				t.Errorf("lockd %s -h: %s has no description", strings.Join(c, " "), strings.TrimSpace(line))
			}
		}
		if flags == 0 {
			t.Errorf("lockd %s -h lists no flags:\n%s%s", strings.Join(c, " "), stdout, stderr)
		}
	}
}

// TestDurationFlagErrorsSayWhatADurationIs: a duration flag given a bare
// number or words is refused in one line that says what a duration looks
// like (newcomer #12: `invalid value "5" for flag -ttl: parse error`, then
// every flag of the command); what a COMMAND after -- takes is its own.
func TestDurationFlagErrorsSayWhatADurationIs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"acquire", "--ttl", "5", "k"}, `--ttl takes a duration like 30s, 2m or 1h30m; "5" has no unit (5s?)`},
		{[]string{"acquire", "k", "--wait=soon"}, `--wait takes a duration like 30s, 2m or 1h30m; "soon" is not one`},
		{[]string{"sem", "acquire", "--limit", "2", "--ttl", "1.5", "p"}, `"1.5" has no unit (1.5s?)`},
		{[]string{"elect", "--ttl", "10", "e", "--", "true"}, `--ttl takes a duration`},
		{[]string{"serve", "--max-wait", "60"}, `--max-wait takes a duration`},
		{[]string{"acquire", "--nope", "k"}, `run 'lockd acquire -h' for its flags`},
	} {
		code, _, stderr := cli(t, nil, c.args...)
		if code != exitUsage || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "-server string") {
			t.Errorf("lockd %s: exit %d\n%s\nwant exit 2 with %q and no list of flags", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
	// The flags of a COMMAND after -- are its own.
	fs := flag.NewFlagSet("lockd run", flag.ContinueOnError)
	fs.Duration("ttl", time.Second, "")
	if err := checkDurations(fs, []string{"--ttl", "2s", "k", "--", "sleep", "--ttl", "5"}); err != nil {
		t.Errorf("a COMMAND's flag was checked as lockd's: %v", err)
	}
}
