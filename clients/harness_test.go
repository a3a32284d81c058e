package clients

import (
	"bufio"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
	"github.com/lockd/lockd/internal/server"
)

// lockdBin is a lockd binary built from this tree: the second server.
var lockdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lockd-clients")
	if err != nil {
		panic(err)
	}
	lockdBin = filepath.Join(dir, "lockd")
	out, err := exec.Command("go", "build", "-o", lockdBin, "../cmd/lockd").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build ../cmd/lockd: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// harness is one redis-server and the lockds on it that a client's tests
// run against (see the package comment).
type harness struct {
	redis  *redistest.Server
	env    []string
	pauses chan pauseRequest
}

// pauseRequest asks the test's goroutine to stop Redis for d.
type pauseRequest struct {
	d    time.Duration
	done chan error
}

// maxPause bounds what a client may ask for: a client's test that pauses
// Redis for longer is wrong.
const maxPause = 5 * time.Second

func startHarness(t *testing.T) *harness {
	t.Helper()
	rs := redistest.Start(t)
	one := lockdtest.Start(t, lockdtest.Options{Redis: rs})
	two := startBinary(t, rs)

	writeKey, readKey := crand.Text(), crand.Text()
	keys, err := auth.Parse([]byte(fmt.Sprintf("keys:\n"+
		"  - {name: writer, key: %q, scopes: [write]}\n"+
		"  - {name: reader, key: %q, scopes: [read]}\n", writeKey, readKey)))
	if err != nil {
		t.Fatal(err)
	}
	authed := lockdtest.Start(t, lockdtest.Options{Redis: rs, Configure: func(c *server.Config) { c.Keys = keys }})
	short := lockdtest.Start(t, lockdtest.Options{Redis: rs, Configure: func(c *server.Config) { c.MaxWait = shortMaxWait }})

	h := &harness{redis: rs, pauses: make(chan pauseRequest)}
	ctl := httptest.NewServer(http.HandlerFunc(h.control))
	t.Cleanup(ctl.Close)
	h.env = []string{
		"LOCKD_URL=" + one.URL,
		"LOCKD_SLOW_URL=" + slowProxy(t, one.URL),
		"LOCKD_URL_2=" + two,
		"LOCKD_AUTH_URL=" + authed.URL,
		"LOCKD_TEST_WRITE_KEY=" + writeKey,
		"LOCKD_TEST_READ_KEY=" + readKey,
		"LOCKD_CONTROL_URL=" + ctl.URL,
		"LOCKD_SHORT_WAIT_URL=" + short.URL,
	}
	return h
}

// shortMaxWait is LOCKD_SHORT_WAIT_URL's --max-wait: waits longer than it
// go in rounds.
const shortMaxWait = time.Second

// slowBy is how late LOCKD_SLOW_URL passes each request on: a network's
// latency, more than a client that gives a request a millisecond waits.
const slowBy = 25 * time.Millisecond

// slowProxy serves target's API, each request slowBy late, until the test
// ends, and returns its URL.
func slowProxy(t *testing.T, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := httputil.NewSingleHostReverseProxy(u)
	p.FlushInterval = -1 // streams (hold, observe) as they come
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(slowBy)
		p.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// startBinary runs `lockd serve` on rs until the test ends and returns its
// URL.
func startBinary(t *testing.T, rs *redistest.Server) string {
	t.Helper()
	// Port 0 and the address from the log: a port found free and closed
	// could be taken by another test's process before lockd binds it.
	cmd := exec.Command(lockdBin, "serve", "--listen", "127.0.0.1:0", "--redis", rs.URL())
	// LOCKD_* variables of whoever runs the tests would change its flags.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOCKD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var logs lockdtest.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	killWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	url := ""
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if url == "" {
			url = listeningURL(logs.String())
		}
		var err error
		if url != "" {
			var resp *http.Response
			if resp, err = http.Get(url + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return url
				}
			}
		}
		select {
		case <-exited:
			t.Fatalf("lockd serve exited while starting:\n%s", &logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("lockd serve at %q not ready in 10 s (%v):\n%s", url, err, &logs)
		}
	}
}

// listeningURL is the URL in lockd's "listening" log line, "" before it.
func listeningURL(logs string) string {
	for _, line := range strings.Split(logs, "\n") {
		var l struct{ Message, Addr string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Message == "listening" {
			return "http://" + l.Addr
		}
	}
	return ""
}

// control serves POST /redis/pause?ms=N for the client's tests.
func (h *harness) control(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/redis/pause" {
		http.Error(w, "POST /redis/pause?ms=N", http.StatusNotFound)
		return
	}
	ms, err := strconv.Atoi(r.URL.Query().Get("ms"))
	d := time.Duration(ms) * time.Millisecond
	if err != nil || d <= 0 || d > maxPause {
		http.Error(w, fmt.Sprintf("ms: want 1 to %d", maxPause.Milliseconds()), http.StatusBadRequest)
		return
	}
	req := pauseRequest{d: d, done: make(chan error, 1)}
	select {
	case h.pauses <- req:
	case <-r.Context().Done():
		return
	}
	if err := <-req.done; err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// run runs cmd (a client's test suite) to its end and serves its requests
// to pause Redis meanwhile. Pause and Resume run on the test's goroutine,
// as testing.TB asks of anything that may call Fatal.
func (h *harness) run(t *testing.T, cmd *exec.Cmd) error {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", strings.Join(cmd.Args, " "), err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var resume <-chan time.Time // set while Redis is paused
	for {
		select {
		case err := <-done:
			if resume != nil {
				h.redis.Resume()
			}
			return err
		case req := <-h.pauses:
			if resume != nil {
				req.done <- errors.New("redis-server is paused already")
				continue
			}
			h.redis.Pause()
			resume = time.After(req.d)
			req.done <- nil
		case <-resume:
			h.redis.Resume()
			resume = nil
		}
	}
}

// scenario is an entry of scenarios.json, as far as the harness reads it.
type scenario struct {
	ID      string `json:"id"`
	Title   string `json:"title"`
	Pending string `json:"pending"`
}

// scenarioResult is a line a client wrote to LOCKD_SCENARIO_RESULTS.
type scenarioResult struct {
	ID      string  `json:"id"`
	Result  string  `json:"result"`
	Reason  string  `json:"reason"`
	Seconds float64 `json:"seconds"`
}

func readScenarios(t *testing.T) []scenario {
	t.Helper()
	b, err := os.ReadFile("scenarios.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Scenarios []scenario `json:"scenarios"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("scenarios.json: %v", err)
	}
	if len(doc.Scenarios) == 0 {
		t.Fatal("scenarios.json has no scenarios")
	}
	return doc.Scenarios
}

// checkScenarios reports a subtest per scenario from the results file that
// client wrote: passed, skipped with the reason of a pending scenario, or
// failed. A ready scenario that was skipped, a pending one that ran, or one
// with no result fails.
func checkScenarios(t *testing.T, client, file string) {
	t.Helper()
	results := map[string]scenarioResult{}
	f, err := os.Open(file)
	if err != nil {
		t.Errorf("%s wrote no scenario results: %v", client, err)
	} else {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var r scenarioResult
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Errorf("%s: scenario result %q: %v", client, sc.Text(), err)
				continue
			}
			if _, dup := results[r.ID]; dup {
				t.Errorf("%s ran scenario %s twice", client, r.ID)
			}
			results[r.ID] = r
		}
	}
	known := map[string]bool{}
	for _, s := range readScenarios(t) {
		known[s.ID] = true
		r, ok := results[s.ID]
		t.Run(s.ID, func(t *testing.T) {
			switch {
			case !ok:
				t.Fatalf("%s has no result for %q (%s): every scenario needs a test in every client", client, s.ID, s.Title)
			case s.Pending != "":
				if want := "pending: " + s.Pending; r.Result != "skip" || r.Reason != want {
					t.Fatalf("%s: %s %q, want skip %q: mark it ready in scenarios.json once it can run", client, r.Result, r.Reason, want)
				}
				t.Skip(r.Reason)
			case r.Result != "pass":
				t.Fatalf("%s: %s: %s", client, r.Result, r.Reason)
			}
			t.Logf("%s: passed in %.2f s", client, r.Seconds)
		})
	}
	for id := range results {
		if !known[id] {
			t.Errorf("%s ran scenario %q, which scenarios.json does not have", client, id)
		}
	}
}
