package lock

import (
	"embed"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

// scripts holds one Lua script per operation. Each is lib.lua followed by
// the operation's own file, and runs with EVALSHA, falling back to EVAL on
// NOSCRIPT (redis.Script.Run).
type scripts struct {
	acquire, renew, release, forceRelease, state, history *redis.Script
	// leave and alive keep the wait queue (queue.go).
	leave, alive *redis.Script
	// fence writes a Redlock majority's fence back (redlock.go).
	fence *redis.Script
	// epoch reads and keeps the restart-quarantine marker (epoch.go).
	epoch *redis.Script
	// sweep records due lapses (expiry.go). On a Cluster it reads the
	// slots of one node in one call, so it carries the flag that lets a
	// script touch keys of several slots (Redis 7; only on a Cluster: the
	// embedded store does not know script flags).
	sweep *redis.Script
}

// loadScripts reads the scripts. sharded makes them publish wake-ups with
// SPUBLISH: on a Cluster a script may only publish on a channel of its own
// slot, and only a sharded subscription on that slot's master hears it.
func loadScripts(sharded bool) scripts {
	lib := mustRead("lib")
	s := func(name string) *redis.Script {
		src := lib + "\n" + mustRead(name)
		if sharded {
			src = strings.ReplaceAll(src, "redis.call('PUBLISH',", "redis.call('SPUBLISH',")
		}
		return redis.NewScript(src)
	}
	return scripts{
		acquire:      s("acquire"),
		renew:        s("renew"),
		release:      s("release"),
		forceRelease: s("force_release"),
		state:        s("state"),
		history:      s("history"),
		leave:        s("leave"),
		alive:        s("alive"),
		fence:        s("fence"),
		epoch:        s("epoch"),
		sweep:        sweepScript(lib, sharded),
	}
}

func mustRead(name string) string {
	b, err := scriptFS.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		panic(fmt.Sprintf("lock: embedded script %s: %v", name, err))
	}
	return string(b)
}

func sweepScript(lib string, sharded bool) *redis.Script {
	src := lib + "\n" + mustRead("sweep")
	if sharded {
		src = "#!lua flags=allow-cross-slot-keys\n" + strings.ReplaceAll(src, "redis.call('PUBLISH',", "redis.call('SPUBLISH',")
	}
	return redis.NewScript(src)
}
