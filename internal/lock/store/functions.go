package store

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Functions is a library of scripts loaded as Redis Functions (Redis 7):
// FUNCTION LOAD runs the library's top level once per server, so what
// every script shares (helper functions, constants) is made once there,
// not on every call as with EVALSHA; FCALL then runs one function. A
// server without functions (the embedded store, Redis before 7) runs each
// script with EVALSHA instead, as does a script the library does not hold.
type Functions struct {
	code  string                   // the library, "#!lua name=…"
	names map[*redis.Script]string // the function that runs each script
	off   atomic.Bool              // the server has no functions
	load  sync.Mutex               // one FUNCTION LOAD at a time
}

// NewFunctions returns a library: code, and the function that stands for
// each script.
func NewFunctions(code string, names map[*redis.Script]string) *Functions {
	return &Functions{code: code, names: names}
}

// name is the function to FCALL for sc, or "" to run sc itself.
func (f *Functions) name(sc *redis.Script) string {
	if f == nil || f.off.Load() {
		return ""
	}
	return f.names[sc]
}

// UseFunctions makes Run call f's functions where f has one for the
// script. Call it before the store is used.
func (s *Store) UseFunctions(f *Functions) {
	s.fns = f
	s.batch.fns = f
	s.batch.loadFns = s.LoadFunctions
}

// LoadFunctions loads the library on every master (FUNCTION LOAD REPLACE:
// loading it twice is harmless); without one (UseFunctions), it does
// nothing. A server that does not know the command turns functions off
// for good.
func (s *Store) LoadFunctions(ctx context.Context) error {
	f := s.fns
	if f == nil {
		return nil
	}
	f.load.Lock()
	defer f.load.Unlock()
	load := func(ctx context.Context, c *redis.Client) error {
		return c.FunctionLoadReplace(ctx, f.code).Err()
	}
	var err error
	if s.cluster != nil {
		err = s.cluster.ForEachMaster(ctx, load)
	} else {
		err = s.rdb.FunctionLoadReplace(ctx, f.code).Err()
	}
	if err != nil && unknownCommand(err) {
		f.off.Store(true)
		return nil
	}
	return err
}

// missing says whether err means that the server lacks the library (a
// restart without persistence, a node new to the Cluster), or functions
// altogether: loading it (or turning functions off) and running the call
// again is the cure.
func missing(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "Function not found") || unknownCommand(err))
}

func unknownCommand(err error) bool {
	return strings.Contains(strings.ToLower(err.Error()), "unknown command")
}
