package lock

import (
	"embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

// scripts holds one Lua script per operation. Each is lib.lua followed by
// the operation's own file, and runs with EVALSHA, falling back to EVAL on
// NOSCRIPT (redis.Script.Run).
type scripts struct {
	acquire, renew, release, forceRelease, state, history, waiters *redis.Script
}

func loadScripts() scripts {
	lib := mustRead("lib")
	s := func(name string) *redis.Script {
		return redis.NewScript(lib + "\n" + mustRead(name))
	}
	return scripts{
		acquire:      s("acquire"),
		renew:        s("renew"),
		release:      s("release"),
		forceRelease: s("force_release"),
		state:        s("state"),
		history:      s("history"),
		waiters:      s("waiters"),
	}
}

func (s scripts) all() []*redis.Script {
	return []*redis.Script{s.acquire, s.renew, s.release, s.forceRelease, s.state, s.history, s.waiters}
}

func mustRead(name string) string {
	b, err := scriptFS.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		panic(fmt.Sprintf("lock: embedded script %s: %v", name, err))
	}
	return string(b)
}
