// Package embedded runs lockd's default store: an in-process,
// Redis-compatible server (miniredis) on a loopback port, so that
// `lockd serve` works with no Redis at all.
//
// Caveats: nothing is shared with another process or kept across restarts,
// and miniredis implements only a subset of Redis. It runs the same Lua
// scripts as a real Redis. TTLs follow the wall clock (ClockTTL), so leases
// really expire.
package embedded

import (
	"fmt"

	"github.com/alicebob/miniredis/v2"
)

// Store is a running in-process store.
type Store struct {
	m *miniredis.Miniredis
}

// Start starts a store on a free loopback port.
func Start() (*Store, error) {
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("embedded store: %w", err)
	}
	return &Store{m: m}, nil
}

// Addr is the host:port the store listens on.
func (s *Store) Addr() string { return s.m.Addr() }

// Close stops the store; everything in it is gone.
func (s *Store) Close() { s.m.Close() }
