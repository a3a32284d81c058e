package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
)

// askHealthz sends a keep-alive GET /healthz on c and reports whether it
// is answered 200 within d. The connection stays open for more.
func askHealthz(c net.Conn, d time.Duration) bool {
	_ = c.SetDeadline(time.Now().Add(d))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")); err != nil {
		return false
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return false
	}
	defer res.Body.Close()
	buf := make([]byte, 64)
	for {
		if _, err := res.Body.Read(buf); err != nil {
			break
		}
	}
	return res.StatusCode == 200
}

// closedByServer reports, for each connection, whether the server has
// closed it: a read finds the end of the stream rather than waiting. Every
// connection gets the same deadline, so this takes 200 ms in all.
func closedByServer(conns ...net.Conn) []bool {
	// All at once, each with the whole 200 ms: read one after another, an
	// open connection would use up the deadline, and a read past its
	// deadline times out without looking at the connection, so a closed
	// one after it would pass for open.
	deadline := time.Now().Add(200 * time.Millisecond)
	closed := make([]bool, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(deadline)
			_, err := c.Read(make([]byte, 1))
			var ne net.Error
			closed[i] = err != nil && !(errors.As(err, &ne) && ne.Timeout())
			_ = c.SetReadDeadline(time.Time{})
		}()
	}
	wg.Wait()
	return closed
}

// N12: with --max-conns taken by idle keep-alive connections, a new client
// (a probe, say) is served at once: the connection idle the longest gives
// up its slot, instead of the newcomer waiting for the 120 s idle timeout.
// Over TLS as well, where the server sees its own connection type.
func TestServeMaxConnsClosesIdleFirst(t *testing.T) {
	const maxConns = 50
	rs := redistest.Start(t)
	cert, key := selfSigned(t)
	tlsConfig := &tls.Config{InsecureSkipVerify: true}
	for _, tc := range []struct {
		name string
		args []string
		dial func(addr string) (net.Conn, error)
	}{
		{"plain", nil, func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }},
		{"TLS", []string{"--tls-cert", cert, "--tls-key", key}, func(addr string) (net.Conn, error) {
			// The handshake needs a slot too: bound its wait.
			return tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tlsConfig)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := startServe(t, nil, append([]string{"--redis", rs.URL(), "--max-conns", fmt.Sprint(maxConns)}, tc.args...)...)
			addr := inst.url[strings.Index(inst.url, "://")+3:]
			dial := func() net.Conn {
				c, err := tc.dial(addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
			// Every slot is taken by a connection that asked once and now
			// idles, as a pooling client's do.
			idle := make([]net.Conn, 0, maxConns)
			for i := range maxConns {
				c := dial()
				if !askHealthz(c, 10*time.Second) {
					t.Fatalf("idle connection %d was not served", i)
				}
				idle = append(idle, c)
			}

			c := dial()
			start := time.Now()
			served := askHealthz(c, 5*time.Second)
			waited := time.Since(start)
			if !served {
				t.Fatalf("with --max-conns %d taken by idle keep-alive connections, a new client's /healthz was not answered within 5 s", maxConns)
			}
			t.Logf("--max-conns %d, %d idle keep-alive connections open: a new client's /healthz answered in %v", maxConns, maxConns, waited)

			// One of those idle the longest made room; the others are still
			// open. (Which one exactly is the server's view: it marks a
			// connection idle just after the client has its answer.)
			closed := 0
			for i, gone := range closedByServer(idle...) {
				if gone {
					closed++
					if i >= maxConns/2 {
						t.Errorf("connection %d of %d was closed, not one of those idle the longest", i, maxConns)
					}
				}
			}
			if closed < 1 || closed > 5 {
				t.Errorf("%d idle connections were closed to make room for one", closed)
			}
			// The newcomer keeps being served on its connection, and the
			// count stays within the cap.
			if !askHealthz(c, 5*time.Second) {
				t.Error("the new client's second request on its connection was not answered")
			}
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}
			open, closedTotal := metricOf(t, client, inst.url, "lockd_http_connections"), metricOf(t, client, inst.url, "lockd_http_idle_connections_closed_total")
			if open < 1 || open > maxConns || closedTotal < 1 {
				t.Errorf("lockd_http_connections %v (cap %d), lockd_http_idle_connections_closed_total %v", open, maxConns, closedTotal)
			}
		})
	}
}

// metricOf is the value of an unlabelled series in lockd's /metrics.
func metricOf(t *testing.T, client *http.Client, url, name string) float64 {
	t.Helper()
	res, err := client.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}
