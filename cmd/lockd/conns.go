package main

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimiter is lockd serve's listener under --max-conns. Each connection
// costs memory and a file descriptor, so their number is capped. At the
// cap, a new connection takes the slot of the connection that has been
// idle the longest (a keep-alive connection between requests), which is
// closed: idle connections would otherwise hold every slot for the whole
// idle timeout (120 s) while probes and new clients wait in the kernel's
// backlog. Only when every connection is busy with a request does a new one
// wait, until one ends or turns idle.
//
// Closing an idle connection is what the idle timeout does anyway, only
// earlier: HTTP clients expect a kept-alive connection to close between
// requests and retry on a new one.
type connLimiter struct {
	net.Listener
	max int

	mu sync.Mutex
	// cond is signalled when a connection closes or turns idle, and when
	// the listener closes: what a waiting Accept waits for.
	cond   *sync.Cond
	open   map[*limitedConn]struct{}
	closed bool
	// idleClosed counts the idle connections closed to make room.
	idleClosed int64
}

// limitedConn is a connection that holds a slot until it is closed.
type limitedConn struct {
	net.Conn
	l *connLimiter
	// idleSince is when the connection last turned idle; zero while it is
	// new (no request yet), busy with a request, or hijacked. Guarded by
	// l.mu.
	idleSince time.Time
}

func newConnLimiter(ln net.Listener, max int) *connLimiter {
	l := &connLimiter{Listener: ln, max: max, open: make(map[*limitedConn]struct{}, min(max, 1024))}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// Accept accepts the next connection, then gives it a slot: a free one,
// or that of the connection idle the longest. With every slot busy it
// waits, and connections behind it wait in the kernel's backlog.
func (l *connLimiter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	lc := &limitedConn{Conn: c, l: l}
	l.mu.Lock()
	defer l.mu.Unlock()
	for !l.closed && len(l.open) >= l.max {
		if idle := l.oldestIdle(); idle != nil {
			// Its slot is free from now on: the server's goroutine of
			// that connection finds it closed and ends.
			delete(l.open, idle)
			l.idleClosed++
			_ = idle.Conn.Close()
			continue
		}
		l.cond.Wait()
	}
	if l.closed {
		_ = c.Close()
		return nil, net.ErrClosed
	}
	l.open[lc] = struct{}{}
	return lc, nil
}

// oldestIdle is the open connection idle the longest, or nil when none is
// idle. Called with l.mu held; it walks every connection, which costs
// microseconds at the default cap and happens only at the cap.
func (l *connLimiter) oldestIdle() *limitedConn {
	var oldest *limitedConn
	for c := range l.open {
		if !c.idleSince.IsZero() && (oldest == nil || c.idleSince.Before(oldest.idleSince)) {
			oldest = c
		}
	}
	return oldest
}

// Close closes the listener and ends a waiting Accept.
func (l *connLimiter) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	l.closed = true
	l.cond.Broadcast()
	l.mu.Unlock()
	return err
}

// connState is the http.Server's ConnState hook: it marks which
// connections are idle, and since when.
func (l *connLimiter) connState(c net.Conn, state http.ConnState) {
	// Under TLS the server sees the tls.Conn around ours.
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if state == http.StateIdle {
		lc.idleSince = time.Now()
		l.cond.Broadcast()
		return
	}
	lc.idleSince = time.Time{}
}

// Open is the number of connections holding a slot.
func (l *connLimiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.open)
}

// IdleClosed is the number of idle connections closed to make room.
func (l *connLimiter) IdleClosed() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.idleClosed
}

// Close gives back the connection's slot.
func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.l.mu.Lock()
	if _, ok := c.l.open[c]; ok {
		delete(c.l.open, c)
		c.l.cond.Broadcast()
	}
	c.l.mu.Unlock()
	return err
}
