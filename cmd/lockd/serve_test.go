package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
)

// instance is a `lockd serve` started through run, as main starts it.
type instance struct {
	url    string
	out    *lockdtest.Buffer
	stop   context.CancelFunc
	result chan error
}

func startServe(t *testing.T, env map[string]string, args ...string) *instance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	inst := &instance{out: &lockdtest.Buffer{}, stop: cancel, result: make(chan error, 1)}
	getenv := func(k string) string { return env[k] }
	go func() {
		inst.result <- run(ctx, append([]string{"lockd", "serve", "--listen", "127.0.0.1:0"}, args...), getenv, inst.out, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-inst.result:
		case <-time.After(15 * time.Second):
			t.Error("lockd serve did not stop")
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for inst.url == "" {
		for _, line := range strings.Split(inst.out.String(), "\n") {
			var l struct {
				Message, Addr string
				TLS           bool
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.Message == "listening" {
				inst.url = "http://" + l.Addr
				if l.TLS {
					inst.url = "https://" + l.Addr
				}
			}
		}
		select {
		case err := <-inst.result:
			t.Fatalf("lockd serve exited: %v\n%s", err, inst.out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("lockd serve did not listen in 10 s:\n%s", inst.out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The test's own certificates are self-signed.
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	res, err := insecure.Get(inst.url + "/healthz")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("healthz: %v", err)
	}
	res.Body.Close()
	// No connection of the harness's stays open: tests that count the
	// server's connections (--max-conns) count only their own.
	insecure.CloseIdleConnections()
	return inst
}

// waitersOf is the lockd_waiters gauge of the lockd at url: how many
// acquires wait in that process.
func waitersOf(t *testing.T, url string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "lockd_waiters "); ok {
			var n float64
			_, _ = fmt.Sscan(v, &n)
			return n
		}
	}
	t.Fatalf("no lockd_waiters in /metrics:\n%s", b)
	return 0
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(res.Body).Decode(&m)
	return res.StatusCode, m
}

func TestServeEmbedded(t *testing.T) {
	inst := startServe(t, nil)
	if !strings.Contains(inst.out.String(), "EMBEDDED in-process store") {
		t.Fatalf("no embedded-store warning:\n%s", inst.out)
	}
	status, l := post(t, inst.url+"/v1/locks/try:me/acquire", `{"owner":"me","ttl_ms":200}`)
	if status != 200 || l["owner"] != "me" {
		t.Fatalf("acquire: %d %v", status, l)
	}
	if status, _ := post(t, inst.url+"/v1/locks/try:me/acquire", `{}`); status != 409 {
		t.Fatalf("second acquire: %d", status)
	}
	// TTLs really expire in the embedded store: a waiter gets the key when
	// the first lease runs out.
	status, l2 := post(t, inst.url+"/v1/locks/try:me/acquire", `{"owner":"next","wait_ms":3000}`)
	if status != 200 || l2["owner"] != "next" || l2["fence"].(float64) <= l["fence"].(float64) {
		t.Fatalf("after expiry: %d %v", status, l2)
	}
}

func TestServeReplicasShareRedis(t *testing.T) {
	rs := redistest.Start(t)
	env := map[string]string{"LOCKD_REDIS": rs.URL()}
	a := startServe(t, env)
	b := startServe(t, env)
	if strings.Contains(a.out.String(), "EMBEDDED") {
		t.Fatal("LOCKD_REDIS was not used")
	}
	_, l := post(t, a.url+"/v1/locks/shared/acquire", `{"owner":"a"}`)
	got := make(chan map[string]any, 1)
	go func() {
		_, l := post(t, b.url+"/v1/locks/shared/acquire", `{"owner":"b","wait_ms":5000}`)
		got <- l
	}()
	// The release must come after b's waiter is queued, or b simply finds
	// a free key and the cross-replica wake-up goes untested.
	lockdtest.Eventually(t, func() bool { return waitersOf(t, b.url) == 1 }, 5*time.Second, "the waiter on b")
	start := time.Now()
	if status, _ := post(t, a.url+"/v1/locks/shared/release", `{"token":"`+l["token"].(string)+`"}`); status != 200 {
		t.Fatalf("release: %d", status)
	}
	select {
	case l := <-got:
		if l["owner"] != "b" {
			t.Fatalf("waiter on b: %v", l)
		}
		t.Logf("waiter on replica b granted %v after the release on replica a", time.Since(start))
	case <-time.After(2 * time.Second):
		t.Fatal("a release on replica a did not wake the waiter on replica b")
	}
}

func TestServeShutdownAnswersWaits(t *testing.T) {
	inst := startServe(t, map[string]string{"LOCKD_REDIS": redistest.Start(t).URL()})
	post(t, inst.url+"/v1/locks/held/acquire", `{}`)
	answered := make(chan int, 1)
	go func() {
		status, _ := post(t, inst.url+"/v1/locks/held/acquire", `{"wait_ms":30000}`)
		answered <- status
	}()
	lockdtest.Eventually(t, func() bool { return waitersOf(t, inst.url) == 1 }, 5*time.Second, "the waiting request")
	start := time.Now()
	inst.stop()
	select {
	case status := <-answered:
		if status != 503 {
			t.Fatalf("waiting request answered %d at shutdown, want 503", status)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting request was not answered at shutdown")
	}
	if err := <-inst.result; err != nil {
		t.Fatalf("run: %v", err)
	}
	inst.result <- nil // for the cleanup
	t.Logf("shut down in %v with a wait open", time.Since(start))
}

func TestServeConfig(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		code int
		msg  string
	}{
		{"open listen without auth", []string{"--listen", "0.0.0.0:0"}, nil, exitUsage, "refusing to listen"},
		{"open listen from env", nil, map[string]string{"LOCKD_LISTEN": "0.0.0.0:0"}, exitUsage, "refusing to listen"},
		{"bad duration in env", nil, map[string]string{"LOCKD_MAX_TTL": "forever"}, exitUsage, "LOCKD_MAX_TTL"},
		{"default over max", []string{"--default-ttl", "2h", "--max-ttl", "1h"}, nil, exitUsage, "--default-ttl"},
		{"bad log format", []string{"--log-format", "xml"}, nil, exitUsage, "--log-format"},
		{"bad redis url", []string{"--redis", "http://x:1"}, nil, exitUsage, "--redis"},
		{"password not echoed", []string{"--redis", "redis://user:hunter2@:bad"}, nil, exitUsage, "--redis"},
		{"password with a quote", []string{"--redis", `redis://user:hunter2"PW@127.0.0.1:bad/0`}, nil, exitUsage, "--redis"},
		{"password with a backslash", []string{"--redis", `redis://user:hunter2\PW@127.0.0.1:bad/0`}, nil, exitUsage, "--redis"},
		{"password with an at", []string{"--redis", "redis://user:S3c@hunter2@127.0.0.1:bad/0"}, nil, exitUsage, "--redis"},
		{"password with a slash", []string{"--redis", "redis://user:hunter2/x@127.0.0.1:6379/0"}, nil, exitUsage, "--redis"},
		{"password from env", nil, map[string]string{"LOCKD_REDIS": "redis://user:hunter2@127.0.0.1:6379/0?bogus=hunter2"}, exitUsage, "--redis"},
		{"stray argument", []string{"extra"}, nil, exitUsage, "no arguments"},
		{"unknown flag", []string{"--nope"}, nil, exitUsage, ""},
		{"max-wait zero", []string{"--max-wait", "0"}, nil, exitUsage, "--max-wait"},
		{"max-wait zero from env", nil, map[string]string{"LOCKD_MAX_WAIT": "0s"}, exitUsage, "--max-wait"},
		{"max-wait negative", []string{"--max-wait", "-1s"}, nil, exitUsage, "--max-wait"},
		{"max-conns negative", []string{"--max-conns", "-1"}, nil, exitUsage, "--max-conns"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut lockdtest.Buffer
			getenv := func(k string) string { return tc.env[k] }
			// A configuration that should be refused but is not would serve
			// until the context ends; it then returns no error.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			args := append([]string{"lockd", "serve"}, tc.args...)
			if !slices.Contains(tc.args, "--listen") && tc.env["LOCKD_LISTEN"] == "" {
				args = append(args, "--listen", "127.0.0.1:0")
			}
			err := run(ctx, args, getenv, &out, &errOut)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != tc.code || !strings.Contains(ee.msg, tc.msg) {
				t.Fatalf("err = %v, want exit %d mentioning %q", err, tc.code, tc.msg)
			}
			if strings.Contains(ee.msg+out.String()+errOut.String(), "hunter2") {
				t.Fatal("the Redis password was printed")
			}
		})
	}
	// With --insecure-no-auth it listens, and says so loudly.
	inst := startServe(t, nil, "--listen", "0.0.0.0:0", "--insecure-no-auth")
	if !strings.Contains(inst.out.String(), "INSECURE") {
		t.Fatalf("no warning for an open listener:\n%s", inst.out)
	}
}

func TestHealthcheck(t *testing.T) {
	inst := startServe(t, nil)
	if err := run(context.Background(), []string{"lockd", "healthcheck", "--url", inst.url + "/healthz"}, func(string) string { return "" }, io.Discard, io.Discard); err != nil {
		t.Fatalf("healthcheck of a live server: %v", err)
	}
	err := run(context.Background(), []string{"lockd", "healthcheck", "--url", "http://127.0.0.1:1/healthz"}, func(string) string { return "" }, io.Discard, io.Discard)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitUnreachable {
		t.Fatalf("healthcheck of nothing: %v", err)
	}
}

// F3: with auth off on loopback, lockd serve answers only loopback Host
// names and those of --allowed-hosts (LOCKD_ALLOWED_HOSTS). N15: with auth
// off on another address too, where IP addresses (which no rebinding page
// can send as its Host) are also accepted.
func TestServeHostCheck(t *testing.T) {
	open := []string{"--listen", "0.0.0.0:0", "--insecure-no-auth"}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		host string
		want int
	}{
		{"loopback name", nil, nil, "localhost:8080", 200},
		{"rebinding name", nil, nil, "rebind.evil.example:8080", 403},
		{"allowed by env", map[string]string{"LOCKD_ALLOWED_HOSTS": "lockd.test, other.test"}, nil, "lockd.test:8080", 200},
		{"not in the env list", map[string]string{"LOCKD_ALLOWED_HOSTS": "lockd.test"}, nil, "rebind.evil.example", 403},
		{"open listener, rebinding name", nil, open, "rebind.evil.example:8080", 403},
		{"open listener, IP address", nil, open, "10.1.2.3:8080", 200},
		{"open listener, IPv6 address", nil, open, "[fd00::1]:8080", 200},
		{"open listener, loopback name", nil, open, "localhost", 200},
		{"open listener, allowed name", map[string]string{"LOCKD_ALLOWED_HOSTS": "lockd.lan"}, open, "lockd.lan:8080", 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inst := startServe(t, tc.env, tc.args...)
			req, _ := http.NewRequest(http.MethodGet, inst.url+"/v1/locks", nil)
			req.Host = tc.host
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != tc.want {
				t.Fatalf("Host %s: %d, want %d", tc.host, res.StatusCode, tc.want)
			}
		})
	}
	// A --listen name is served without --allowed-hosts.
	c, err := parseServe([]string{"--listen", "lockd.lan:8080", "--insecure-no-auth", "--allowed-hosts", "other.lan"}, func(string) string { return "" }, io.Discard)
	if err != nil || !c.checkHost() || !c.ipHosts() || !slices.Equal(c.hostNames(), []string{"other.lan", "lockd.lan"}) {
		t.Fatalf("--listen lockd.lan:8080: %v, check %v, IP addresses %v, names %q", err, c.checkHost(), c.ipHosts(), c.hostNames())
	}
}

// F11: --max-conns caps the connections open at once. Connections busy
// with a request (here hold streams) are never closed to make room: past
// the cap, a new connection is not served until one of them ends.
func TestServeMaxConns(t *testing.T) {
	const maxConns = 3
	rs := redistest.Start(t)
	inst := startServe(t, nil, "--redis", rs.URL(), "--max-conns", fmt.Sprint(maxConns))
	addr := strings.TrimPrefix(inst.url, "http://")
	var busy []net.Conn
	for i := range maxConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		body := `{"ttl_ms":60000}`
		fmt.Fprintf(c, "POST /v1/locks/busy:%d/hold HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", i, len(body), body)
		// The stream's first event says the hold is granted: the
		// connection is busy from now on.
		buf := make([]byte, 4096)
		got := ""
		for !strings.Contains(got, "event: acquired") {
			n, err := c.Read(buf)
			if err != nil {
				t.Fatalf("hold %d: %v after %q", i, err, got)
			}
			got += string(buf[:n])
		}
		_ = c.SetDeadline(time.Time{})
		busy = append(busy, c)
	}
	waiting, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { waiting.Close() })
	if askHealthz(waiting, 500*time.Millisecond) {
		t.Fatalf("a connection beyond --max-conns %d was served while every one was busy", maxConns)
	}
	// Ending one hold frees its slot; the waiting connection's request
	// (sent above) is answered.
	busy[0].Close()
	_ = waiting.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	if n, _ := waiting.Read(buf); !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 200") {
		t.Fatalf("the waiting connection after a slot freed: %q", buf[:n])
	}
}

// listeningTCP counts this process's listening TCP sockets (Linux /proc).
func listeningTCP(t *testing.T) int {
	t.Helper()
	mine := map[string]bool{}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("this test reads /proc: %v", err)
	}
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, "socket:[") {
			mine[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	n := 0
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		b, _ := os.ReadFile(table)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) > 9 && f[3] == "0A" && mine[f[9]] { // 0A: LISTEN
				n++
			}
		}
	}
	return n
}

// F4: the embedded store listens on no port: only lockd's own HTTP
// listener is added, so no local process can reach the store's tokens.
func TestServeEmbeddedStoreHasNoPort(t *testing.T) {
	before := listeningTCP(t)
	inst := startServe(t, nil)
	if got := listeningTCP(t) - before; got != 1 {
		t.Fatalf("lockd serve with the embedded store added %d listening sockets, want 1 (HTTP)", got)
	}
	// And the store works: a lease, a waiter woken by its expiry.
	if status, l := post(t, inst.url+"/v1/locks/emb:1/acquire", `{"ttl_ms":200}`); status != 200 || l["token"] == "" {
		t.Fatalf("acquire: %d %v", status, l)
	}
	if status, _ := post(t, inst.url+"/v1/locks/emb:1/acquire", `{"wait_ms":3000}`); status != 200 {
		t.Fatalf("waiter: %d", status)
	}
}

// Item 3 of issue 9, through lockd serve's real router: keys with every
// ':' percent-encoded work like the plain key, an encoded '/' is still no
// key, and a JSON null body means {}.
func TestServeAnyCorrectClient(t *testing.T) {
	inst := startServe(t, nil)
	tests := []struct {
		name, method, path, body string
		status                   int
		want                     string // in the answer
	}{
		{"encoded key acquire", "POST", "/v1/locks/order%3Apay%3A1/acquire", `{"owner":"enc"}`, 200, `"key":"order:pay:1"`},
		{"plain key sees it", "GET", "/v1/locks/order:pay:1", "", 200, `"owner":"enc"`},
		{"mixed encoding", "GET", "/v1/locks/order:pay%3A1", "", 200, `"owner":"enc"`},
		{"lower-case escapes", "GET", "/v1/locks/order%3apay%3a1/history", "", 200, `"type":"acquired"`},
		{"encoded slash", "GET", "/v1/locks/order%2Fpay", "", 400, `"field":"key"`},
		{"null body acquire", "POST", "/v1/locks/null:1/acquire", `null`, 200, `"count":1`},
		{"null body force-release", "POST", "/v1/locks/null:1/force-release", ` null `, 200, `"released":true`},
		{"null body renew", "POST", "/v1/locks/null:1/renew", `null`, 400, `"field":"token"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, inst.url+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.status || !strings.Contains(string(b), tc.want) {
				t.Fatalf("%d %s, want %d with %s", res.StatusCode, b, tc.status, tc.want)
			}
		})
	}
}

// TestConsoleLogHasNoColourOffATerminal: --log-format console into a file
// or a pipe writes plain text, with no ANSI colour codes for grep and log
// shippers to keep (newcomer #22).
func TestConsoleLogHasNoColourOffATerminal(t *testing.T) {
	var out bytes.Buffer
	log := newLogger(serveConfig{logFormat: "console", logLevel: "info"}, &out)
	log.Warn().Str("key", "deploy:prod").Msg("plain")
	if !strings.Contains(out.String(), "plain") || strings.Contains(out.String(), "\x1b[") {
		t.Fatalf("console log off a terminal: %q", out.String())
	}
}
