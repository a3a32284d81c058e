package lock

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock/store"
)

//go:embed scripts/*.lua scripts/lib/*.lua
var scriptFS embed.FS

// modules are the scripts' shared code (scripts/lib), in the order they
// are concatenated: each module may use those before it, and any
// module's table (base declares them all).
var modules = []string{"base", "events", "epoch", "queue", "gate", "exclusive", "multi"}

// scripts holds one Lua script per operation. Each is the modules
// (scripts/lib, libText) followed by the operation's own file. The store
// runs most as Redis Functions (functionLibrary), and each with EVALSHA,
// falling back to EVAL on NOSCRIPT, where it cannot (the embedded store)
// or in a pipeline of its own (list.go, epoch.go).
type scripts struct {
	acquire, renew, release, forceRelease, state, history *redis.Script
	// leave and alive keep the wait queue (queue.go).
	leave, alive *redis.Script
	// fence writes a Redlock majority's fence back (redlock.go).
	fence *redis.Script
	// session keeps sessions and their lists of grants (session.go).
	session *redis.Script
	// epoch reads and keeps the restart-quarantine marker (epoch.go).
	epoch *redis.Script
	// restore puts back a lease Redis lost with its data, and validate
	// says which leases the ledger knows Redis still holds (restore.go).
	restore, validate *redis.Script
	// lockset takes a lock set's keys of one slot (lockset.go).
	lockset *redis.Script
	// sweep records due lapses (expiry.go). On a Cluster it reads the
	// slots of one node in one call, so it carries the flag that lets a
	// script touch keys of several slots (Redis 7; only on a Cluster: the
	// embedded store does not know script flags).
	sweep *redis.Script
}

// scriptConfig is what the scripts' cfg says: the engine's settings, written
// into the scripts' text rather than passed on every call (each argument
// costs Redis about 1,100 instructions). Engines with other settings run
// scripts, and load a library, of their own.
type scriptConfig struct {
	historyMax, eventsMax, renewalsMax, maxHolders int
	retention, aliveMS, queueTTL                   int64
	quarantineOff, redlock                         bool
	// publish is the command that wakes waiters: SPUBLISH on a Cluster,
	// where a script may only publish on a channel of its own slot and
	// only a sharded subscription on that slot's master hears it.
	publish string
}

func scriptConfigOf(o Options) scriptConfig {
	return scriptConfig{
		historyMax: o.HistoryMax, eventsMax: o.EventsMax, renewalsMax: o.RenewalsMax, maxHolders: o.MaxHoldersPerKey,
		retention: o.Retention.Milliseconds(), aliveMS: aliveFor.Milliseconds(),
		queueTTL:      (o.MaxWait + time.Minute).Milliseconds(),
		quarantineOff: o.NoQuarantine, redlock: o.redlockMaster,
	}
}

func (c scriptConfig) lua() string {
	// events_max is text: it only ever goes to XADD, and Redis 7.0 prints
	// a Lua number passed to redis.call with %.17g.
	return fmt.Sprintf("local cfg = {history_max = %d, events_max = '%d', renewals_max = %d, max_holders = %d, "+
		"retention = %d, alive_ms = %d, queue_ttl = %d, quarantine_off = %t, redlock = %t, publish = '%s'}\n",
		c.historyMax, c.eventsMax, c.renewalsMax, c.maxHolders, c.retention, c.aliveMS, c.queueTTL, c.quarantineOff, c.redlock,
		c.publish)
}

// loadScripts reads the scripts, and the library of functions that runs
// them where the server has Redis Functions. sharded makes them publish
// wake-ups with SPUBLISH (scriptConfig.publish) and the sweep cross slots.
func loadScripts(sharded bool, cfg scriptConfig) (scripts, *store.Functions) {
	cfg.publish = "PUBLISH"
	if sharded {
		cfg.publish = "SPUBLISH"
	}
	lib := libText(cfg)
	s := func(name string) *redis.Script {
		return redis.NewScript(lib + "\n" + mustRead(name))
	}
	sc := scripts{
		acquire:      s("acquire"),
		renew:        s("renew"),
		release:      s("release"),
		forceRelease: s("force_release"),
		state:        s("state"),
		history:      s("history"),
		leave:        s("leave"),
		alive:        s("alive"),
		fence:        s("fence"),
		session:      s("session"),
		epoch:        s("epoch"),
		restore:      s("restore"),
		validate:     s("validate"),
		lockset:      s("lockset"),
		sweep:        sweepScript(lib, sharded),
	}
	return sc, functionLibrary(lib, []libFunction{
		{"acquire", sc.acquire, ""},
		{"renew", sc.renew, ""},
		// Giving a lease back frees memory: it runs with maxmemory reached
		// too, as its script does (its first write shrinks).
		{"release", sc.release, "allow-oom"},
		{"force_release", sc.forceRelease, "allow-oom"},
		{"state", sc.state, ""},
		{"history", sc.history, ""},
		{"leave", sc.leave, ""},
		{"alive", sc.alive, ""},
		{"fence", sc.fence, ""},
		{"session", sc.session, ""},
		{"lockset", sc.lockset, ""},
	})
}

// libFunction is one script of the function library, and its flags.
type libFunction struct {
	name  string
	sc    *redis.Script
	flags string
}

// functionLibrary is the scripts as one library of Redis Functions
// (store.Functions): the modules are its top level, run once when the library
// is loaded, and each script the body of a function of KEYS and ARGV, so
// that a call makes none of the modules' functions again. The library's name
// carries a hash of its code, so a lockd of another version loads its own
// beside it.
func functionLibrary(lib string, fns []libFunction) *store.Functions {
	var body strings.Builder
	body.WriteString(lib)
	for _, f := range fns {
		fmt.Fprintf(&body, "\nredis.register_function{function_name='NAME_%s', flags={%s}, callback=function(KEYS, ARGV)\n%s\nend}\n",
			f.name, quoted(f.flags), mustRead(f.name))
	}
	sum := sha1.Sum([]byte(body.String()))
	id := "lockd_" + hex.EncodeToString(sum[:6])
	code := "#!lua name=" + id + "\n" + strings.ReplaceAll(body.String(), "'NAME_", "'"+id+"_")
	names := make(map[*redis.Script]string, len(fns))
	for _, f := range fns {
		names[f.sc] = id + "_" + f.name
	}
	return store.NewFunctions(code, names)
}

func quoted(flags string) string {
	if flags == "" {
		return ""
	}
	return "'" + flags + "'"
}

// libText is the text every script starts with: cfg, then the modules.
func libText(cfg scriptConfig) string {
	var b strings.Builder
	b.WriteString(cfg.lua())
	for _, m := range modules {
		b.WriteString(mustRead("lib/" + m))
		b.WriteString("\n")
	}
	return b.String()
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
		src = "#!lua flags=allow-cross-slot-keys\n" + src
	}
	return redis.NewScript(src)
}
