package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lock/store"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
)

// The failover figures of docs/elections.md:
//
//	go test -run '^$' -bench ElectionFailover -benchtime 1x ./internal/server/
//
// A benchmark so that `go test` without -bench does not spend its minute.
// It prints figures rather than asserting them: on a shared machine a
// timing assertion fails for reasons that are not lockd's.

// failoverTrials is how many times each figure is measured.
const failoverTrials = 50

// leaderProcessEnv names the election hold URL that the test binary, run
// again as a child, leads by (TestElectionLeaderProcess).
const leaderProcessEnv = "LOCKD_TEST_LEADER_HOLD"

// TestElectionLeaderProcess is not a test of its own: BenchmarkElectionFailover
// runs the test binary again with leaderProcessEnv set, as a leader process
// to kill with SIGKILL. It campaigns by /campaign/hold, prints the leader
// event's data and keeps the connection, and so the leadership, until it
// is killed. An orphan ends itself after a minute.
func TestElectionLeaderProcess(t *testing.T) {
	url := os.Getenv(leaderProcessEnv)
	if url == "" {
		return // an ordinary run: nothing to do
	}
	res, err := http.Post(url, "application/json", strings.NewReader(`{"candidate":"doomed","ttl_ms":30000}`))
	if err != nil || res.StatusCode != http.StatusOK {
		fmt.Println("campaign/hold:", err, res)
		os.Exit(2)
	}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			fmt.Println(data)
			break
		}
	}
	time.Sleep(time.Minute)
	os.Exit(0)
}

// failoverLockd runs a lockd on rs as lockd serve builds it, without
// lockdtest's check of every exchange against the contract, which would
// add its own time to what is measured here.
func failoverLockd(b *testing.B, rs *redistest.Server) string {
	o := &redis.Options{Addr: rs.Addr}
	store.TuneClient(o)
	rdb := redis.NewClient(o)
	engine := lock.New(rdb, lock.Options{})
	reg := prometheus.NewRegistry()
	srv := server.New(engine, zerolog.New(io.Discard), server.DefaultConfig(), reg)
	ts := httptest.NewServer(srv.Handler(reg, nil))
	b.Cleanup(func() {
		srv.Shutdown()
		_ = engine.Close()
		ts.Close()
		_ = rdb.Close()
	})
	return ts.URL
}

// electionClient makes the benchmark's requests to one election.
type electionClient struct {
	b    *testing.B
	name string
}

func (c electionClient) post(url string, body any) (int, []byte) {
	b, _ := json.Marshal(body)
	res, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		c.b.Fatal(err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return res.StatusCode, out
}

// campaign leads c's election through the lockd at base, at once.
func (c electionClient) campaign(base, candidate string, ttl time.Duration) api.Leadership {
	status, body := c.post(base+"/v1/elections/"+c.name+"/campaign", map[string]any{"candidate": candidate, "ttl_ms": ttl.Milliseconds()})
	var l api.Leadership
	if status != http.StatusOK || json.Unmarshal(body, &l) != nil {
		c.b.Fatalf("campaign of %s: %d %s", candidate, status, body)
	}
	return l
}

func (c electionClient) resign(base string, l api.Leadership) {
	if status, body := c.post(base+"/v1/elections/"+c.name+"/resign", map[string]any{"token": l.Token}); status != http.StatusOK {
		c.b.Fatalf("resign: %d %s", status, body)
	}
}

// successor is a candidate's campaign as it ended: the leadership, and
// when its answer came.
type successor struct {
	l  api.Leadership
	at time.Time
}

// successor campaigns through the lockd at base, waiting in line, and
// returns once the election shows it as a candidate; the channel gets its
// leadership.
func (c electionClient) successor(base string) <-chan successor {
	led := make(chan successor, 1)
	go func() {
		b, _ := json.Marshal(map[string]any{"candidate": "successor", "ttl_ms": 30000, "wait_ms": 30000})
		res, err := http.Post(base+"/v1/elections/"+c.name+"/campaign", "application/json", bytes.NewReader(b))
		at := time.Now()
		var s successor
		if err == nil {
			if res.StatusCode == http.StatusOK {
				_ = json.NewDecoder(res.Body).Decode(&s.l)
			}
			res.Body.Close()
		}
		s.at = at
		led <- s
	}()
	lockdtest.Eventually(c.b, func() bool {
		res, err := http.Get(base + "/v1/elections/" + c.name)
		if err != nil {
			return false
		}
		defer res.Body.Close()
		var st api.ElectionState
		return json.NewDecoder(res.Body).Decode(&st) == nil && len(st.Candidates) == 1
	}, 10*time.Second, "the successor in line")
	return led
}

// leaderProcess runs the test binary again as a leader holding the
// election at base by /campaign/hold, and returns it once it leads.
func (c electionClient) leaderProcess(base string) (*exec.Cmd, api.Leadership) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestElectionLeaderProcess$")
	cmd.Env = append(os.Environ(), leaderProcessEnv+"="+base+"/v1/elections/"+c.name+"/campaign/hold")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.b.Fatal(err)
	}
	c.b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	var l api.Leadership
	if err != nil || json.Unmarshal([]byte(line), &l) != nil || l.Token == "" {
		c.b.Fatalf("leader process: %v %q", err, line)
	}
	return cmd, l
}

// BenchmarkElectionFailover prints how long a successor takes to lead
// after the leader resigns, after the leader's process is killed
// (SIGKILL) while it leads by an open /campaign/hold, and after the
// leader's lease lapses; and how long a proclaim takes to reach
// observers. One Redis, two lockd replicas on loopback: the leader goes
// through one, the successor waits in line (campaign with wait_ms)
// through the other. Each trial is a new election.
//
// Resign and kill are timed from just before the resign is sent or the
// signal is sent to the successor's answer; a lapse from the lease's
// expires_at (Redis's clock, the same machine's) to the successor's
// answer. The observe delay is from just before the proclaim is sent to
// the proclaimed event's arrival, for an observer on the leader's lockd
// and one on the other. b.N is ignored: the trials are the measurement.
func BenchmarkElectionFailover(b *testing.B) {
	rs := redistest.Start(b)
	near, far := failoverLockd(b, rs), failoverLockd(b, rs)
	type row struct {
		what string
		d    []time.Duration
	}
	var rows []row
	trial := func(kind string, i int) electionClient {
		return electionClient{b: b, name: fmt.Sprintf("failover:%s:%d", kind, i)}
	}
	check := func(c electionClient, s successor, leader api.Leadership) {
		if s.l.Leader != "successor" || s.l.Term <= leader.Term {
			b.Fatalf("%s: the successor's answer %+v after term %d", c.name, s.l, leader.Term)
		}
		c.resign(far, s.l)
	}

	var resign []time.Duration
	for i := range failoverTrials {
		c := trial("resign", i)
		l := c.campaign(near, "leader", 30*time.Second)
		led := c.successor(far)
		start := time.Now()
		c.resign(near, l)
		s := <-led
		resign = append(resign, s.at.Sub(start))
		check(c, s, l)
	}
	rows = append(rows, row{"resigns", resign})

	var killed []time.Duration
	for i := range failoverTrials {
		c := trial("kill", i)
		cmd, l := c.leaderProcess(near)
		led := c.successor(far)
		start := time.Now()
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			b.Fatal(err)
		}
		s := <-led
		killed = append(killed, s.at.Sub(start))
		_ = cmd.Wait()
		check(c, s, l)
	}
	rows = append(rows, row{"is killed (`kill -9`) while it leads by an open `/campaign/hold`", killed})

	const lapseTTL = 500 * time.Millisecond
	var lapsed []time.Duration
	for i := range failoverTrials {
		c := trial("lapse", i)
		l := c.campaign(near, "leader", lapseTTL)
		led := c.successor(far)
		s := <-led
		lapsed = append(lapsed, s.at.Sub(l.ExpiresAt))
		check(c, s, l)
	}
	rows = append(rows, row{fmt.Sprintf("stops renewing: after its lease's expiry (TTL %v)", lapseTTL), lapsed})

	sameDelay, otherDelay := observeDelays(b, near, far)
	b.Logf("election failover: %d trials each; one redis-server and two lockd on loopback; the successor waits in line through the other lockd", failoverTrials)
	b.Logf("| the leader | the successor leads after: p50 | p99 |")
	b.Logf("|---|---|---|")
	for _, r := range rows {
		b.Logf("| %s | %.2f ms | %.2f ms |", r.what, ms(percentile(r.d, .5)), ms(percentile(r.d, .99)))
	}
	b.Logf("| proclaim → observer's `proclaimed` event | p50 | p99 |")
	b.Logf("| observer on the leader's lockd | %.2f ms | %.2f ms |", ms(percentile(sameDelay, .5)), ms(percentile(sameDelay, .99)))
	b.Logf("| observer on the other lockd | %.2f ms | %.2f ms |", ms(percentile(otherDelay, .5)), ms(percentile(otherDelay, .99)))
	for _, m := range []struct {
		unit string
		d    []time.Duration
	}{{"resign", resign}, {"kill", killed}, {"lapse", lapsed}, {"observe-same", sameDelay}, {"observe-other", otherDelay}} {
		b.ReportMetric(ms(percentile(m.d, .5)), m.unit+"-p50-ms")
		b.ReportMetric(ms(percentile(m.d, .99)), m.unit+"-p99-ms")
	}
}

// stamped is an event and when it arrived.
type stamped struct {
	sse
	at time.Time
}

// observeDelays proclaims failoverTrials values through the lockd at near
// and returns how long each took to reach an observer on near and one on
// far.
func observeDelays(b *testing.B, near, far string) (same, other []time.Duration) {
	c := electionClient{b: b, name: "failover:observe"}
	l := c.campaign(near, "leader", 30*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func(base string) <-chan stamped {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/elections/"+c.name+"/observe", nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != http.StatusOK {
			b.Fatalf("observe: %v %v", err, res)
		}
		events := make(chan sse)
		go readEvents(res.Body, events)
		out := make(chan stamped, 16)
		go func() {
			defer close(out)
			defer res.Body.Close()
			for ev := range events {
				out <- stamped{ev, time.Now()}
			}
		}()
		return out
	}
	// until returns when the event that is sought arrived.
	until := func(events <-chan stamped, event, value string) time.Time {
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					b.Fatalf("the observe stream ended before %s %s", event, value)
				}
				var ch api.ElectionChange
				_ = json.Unmarshal([]byte(ev.data), &ch)
				if ev.event == event && (value == "" || ch.Value != nil && string(*ch.Value) == value) {
					return ev.at
				}
			case <-time.After(10 * time.Second):
				b.Fatalf("no %s %s within 10 s", event, value)
			}
		}
	}
	sameEvents, otherEvents := open(near), open(far)
	until(sameEvents, "leader", "")
	until(otherEvents, "leader", "")
	for i := range failoverTrials {
		value := fmt.Sprintf(`{"n":%d}`, i)
		start := time.Now()
		if status, body := c.post(near+"/v1/elections/"+c.name+"/proclaim", map[string]any{"token": l.Token, "value": json.RawMessage(value)}); status != http.StatusOK {
			b.Fatalf("proclaim: %d %s", status, body)
		}
		same = append(same, until(sameEvents, "proclaimed", value).Sub(start))
		other = append(other, until(otherEvents, "proclaimed", value).Sub(start))
	}
	return same, other
}
