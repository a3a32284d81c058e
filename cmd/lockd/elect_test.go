package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lockdtest"
)

// lockd elect runs COMMAND while it leads, with the term in LOCKD_TERM,
// and resigns when COMMAND exits; a second candidate waits in line and
// leads next. lockd leader prints the leader; --watch follows changes.
func TestElectAndLeader(t *testing.T) {
	ls := startCLIServer(t)
	env := map[string]string{"LOCKD_SERVER": ls.url}
	elect := func(out, errb *lockdtest.Buffer, args ...string) <-chan int {
		done := make(chan int, 1)
		go func() {
			err := run(context.Background(), append([]string{"lockd", "elect"}, args...), func(k string) string { return env[k] }, out, errb)
			done <- exitCode(err, errb)
		}()
		return done
	}
	var out1, err1, out2, err2 lockdtest.Buffer
	first := elect(&out1, &err1, "--owner", "host-a", "--value", `{"addr":"a:1"}`, "svc", "--",
		"sh", "-c", `echo "leading term $LOCKD_TERM"; sleep 1`)
	lockdtest.Eventually(t, func() bool { return strings.Contains(out1.String(), "leading term") }, 5*time.Second, "host-a leads")

	code, stdout, stderr := cli(t, env, "leader", "svc")
	if code != 0 || !strings.HasPrefix(stdout, "host-a\tterm ") || !strings.Contains(stdout, `{"addr":"a:1"}`) {
		t.Fatalf("lockd leader: %d %q %s", code, stdout, stderr)
	}

	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	var watched, watchErr lockdtest.Buffer
	go func() {
		_ = run(watchCtx, []string{"lockd", "leader", "--watch", "svc"}, func(k string) string { return env[k] }, &watched, &watchErr)
	}()
	lockdtest.Eventually(t, func() bool { return strings.Contains(watched.String(), "leader\thost-a") }, 5*time.Second, "the watch prints the leader")

	second := elect(&out2, &err2, "--owner", "host-b", "svc", "--", "sh", "-c", `echo "leading term $LOCKD_TERM"`)
	if code := waitExit(t, first, 10*time.Second, &err1); code != 0 {
		t.Fatalf("first elect exited %d: %s", code, &err1)
	}
	if code := waitExit(t, second, 10*time.Second, &err2); code != 0 || !strings.Contains(out2.String(), "leading term") {
		t.Fatalf("second elect exited %d: %s %s", code, &out2, &err2)
	}
	lockdtest.Eventually(t, func() bool { return strings.Contains(watched.String(), "leader\thost-b") }, 5*time.Second, "the watch prints the next leader")
	if !strings.Contains(watched.String(), "vacant") {
		t.Errorf("the watch missed the vacancy:\n%s", &watched)
	}
	if code, _, _ := cli(t, env, "leader", "svc"); code != exitLeaseLost {
		t.Errorf("lockd leader after both resigned: exit %d, want %d (nobody leads)", code, exitLeaseLost)
	}
}

// A leader whose leadership is broken has COMMAND stopped at once and
// exits 3.
func TestElectStopsCommandWhenLeadershipIsLost(t *testing.T) {
	ls := startCLIServer(t)
	env := map[string]string{"LOCKD_SERVER": ls.url}
	var out, errb lockdtest.Buffer
	done := make(chan int, 1)
	go func() {
		err := run(context.Background(), []string{"lockd", "elect", "--ttl", "600ms", "--grace", "2s", "lost", "--", "sh", "-c", "echo started; sleep 30"},
			func(k string) string { return env[k] }, &out, &errb)
		done <- exitCode(err, &errb)
	}()
	lockdtest.Eventually(t, func() bool { return strings.Contains(out.String(), "started") }, 5*time.Second, "leading")
	broke := time.Now()
	resp, err := http.Post(ls.url+"/v1/elections/lost/force-release", "application/json", strings.NewReader(`{"reason":"split brain drill"}`))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("force-release of the leadership: %v %v", err, resp)
	}
	resp.Body.Close()
	code := waitExit(t, done, 10*time.Second, &errb)
	t.Logf("lockd elect exited %v after the leadership was broken", time.Since(broke).Round(time.Millisecond))
	if code != exitLeaseLost || !strings.Contains(errb.String(), "leadership of lost") {
		t.Fatalf("exit %d, stderr:\n%s", code, &errb)
	}
}

// lockd acquire --value puts a value on the grant, which the state shows;
// a value that is not JSON is a usage error.
func TestAcquireWithValue(t *testing.T) {
	ls := startCLIServer(t)
	env := map[string]string{"LOCKD_SERVER": ls.url}
	if code, _, stderr := cli(t, env, "acquire", "--value", `{"addr":"10.0.0.7:8080"}`, "--lock-delay", "1s", "val:cli"); code != 0 {
		t.Fatalf("acquire --value: %d %s", code, stderr)
	}
	st, err := ls.c.State(context.Background(), "val:cli")
	if err != nil || st.Value == nil || string(*st.Value) != `{"addr":"10.0.0.7:8080"}` {
		t.Fatalf("state: %+v %v", st, err)
	}
	if code, _, _ := cli(t, env, "acquire", "--value", `{nope`, "val:bad"); code != exitUsage {
		t.Fatalf("acquire with a bad value: exit %d, want %d", code, exitUsage)
	}
}
