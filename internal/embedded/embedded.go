// Package embedded runs lockd's default store: an in-process,
// Redis-compatible server (miniredis), so that `lockd serve` works with no
// Redis at all.
//
// The store listens on no port: the Redis client reaches it through Dial,
// over in-memory pipes. A store on a loopback port would be an
// unauthenticated Redis that any local user could read every lease token
// from, or delete leases in, bypassing the API's keys and history.
//
// Caveats: nothing is shared with another process or kept across restarts,
// and miniredis implements only a subset of Redis. It runs the same Lua
// scripts as a real Redis. TTLs follow the wall clock (ClockTTL), so leases
// really expire.
package embedded

import (
	"context"
	"fmt"
	"net"

	"github.com/alicebob/miniredis/v2"
)

// Store is a running in-process store.
type Store struct {
	m *miniredis.Miniredis
}

// Start starts a store, reachable only through Dial.
func Start() (*Store, error) {
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	// The first Dial starts the server without a listener; dial once now
	// so that a failure shows at start.
	c, err := m.Dial()
	if err != nil {
		return nil, fmt.Errorf("embedded store: %w", err)
	}
	_ = c.Close()
	return &Store{m: m}, nil
}

// Dial opens a connection to the store over an in-memory pipe; it fits
// redis.Options.Dialer. The network and address are ignored.
func (s *Store) Dial(context.Context, string, string) (net.Conn, error) { return s.m.Dial() }

// Close stops the store; everything in it is gone.
func (s *Store) Close() { s.m.Close() }
