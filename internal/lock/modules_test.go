package lock

import (
	"context"
	"encoding/json"
	"reflect"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/embedded"
	"github.com/lockd/lockd/internal/redistest"
)

// harness runs one module function on one lock's keys, below the
// operation scripts: ARGV[1] names the function, ARGV[2] is the call
// (acquireCall's fields by their scripts' names, as JSON strings). It
// answers the function's reply, {"<nil>"} for nil, or {fence} for a grant.
const harness = `
local c = cjson.decode(ARGV[2])
c.named, c.ttl, c.limit, c.used = c.named == '1', tonumber(c.ttl_ms), tonumber(c.limit) or 0, 0
c.key, c.now_ms, c.now_us = lock_of(c.lease), clock()
c.q = queue.of(c)
c.cur = exclusive.read(c)
local fns = {['gate.admit'] = gate.admit, ['exclusive.acquire'] = exclusive.acquire, ['exclusive.take'] = exclusive.take,
  ['exclusive.renew'] = exclusive.renew, ['multi.acquire'] = multi.acquire, ['multi.take'] = multi.take}
local r = fns[ARGV[1]](c, c.cur)
if r == nil then
  return {'<nil>'}
elseif type(r) ~= 'table' then
  return {r}
end
return r
`

// TestModules calls the modules' functions (scripts/lib) on prepared keys,
// on real Redis and on the embedded store: each step runs one function
// and checks the status it answers, and, for a grant reply, its owner.
func TestModules(t *testing.T) {
	for _, b := range []struct {
		name string
		open func(t *testing.T) redis.UniversalClient
	}{
		{"redis", func(t *testing.T) redis.UniversalClient { return redistest.Start(t).Client(t) }},
		{"embedded", func(t *testing.T) redis.UniversalClient {
			s, err := embedded.Start()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			c := redis.NewClient(&redis.Options{Addr: "embedded", Dialer: s.Dial})
			t.Cleanup(func() { _ = c.Close() })
			return c
		}},
	} {
		t.Run(b.name, func(t *testing.T) {
			rdb := b.open(t)
			src := moduleLib() + harness
			for _, tc := range []struct {
				name string
				key  string
				// steps: the function, the call's changes, the status (or
				// fence) it answers, and the owner of a grant reply
				steps []moduleStep
			}{
				{"gate.admit lets a free key through, and a peek finds it free", "m:free", []moduleStep{
					{"gate.admit", acquireCall{intent: grantFree, mode: "x"}, "<nil>", ""},
					{"gate.admit", acquireCall{intent: peek, mode: "x"}, "free", ""},
				}},
				{"gate.admit holds a key off for the lock-delay of a lease force-released", "m:delay", []moduleStep{
					{"exclusive.take", acquireCall{owner: "a", token: "t1", ttlMS: 60000, delay: "60000"}, "fence", ""},
					{"force", acquireCall{}, "ok", ""},
					{"gate.admit", acquireCall{intent: grantFree, mode: "x"}, "delay", ""},
				}},
				{"exclusive.acquire: a re-entry, a replay with another value, held", "m:x", []moduleStep{
					{"exclusive.take", acquireCall{owner: "a", token: "t1", ttlMS: 60000, idem: "i1", value: `{"v":1}`}, "fence", ""},
					{"exclusive.acquire", acquireCall{owner: "a", token: "t2", ttlMS: 60000, reentry: "t1"}, "reentered", "a"},
					{"exclusive.acquire", acquireCall{owner: "a", token: "t3", ttlMS: 60000, idem: "i1", value: `{"v":1}`}, "idempotent", "a"},
					{"exclusive.acquire", acquireCall{owner: "a", token: "t3", ttlMS: 60000, idem: "i1", value: `{"v":2}`}, "mismatch", ""},
					{"exclusive.acquire", acquireCall{owner: "b", token: "t4", ttlMS: 60000}, "held", ""},
				}},
				{"exclusive.renew renews its holder's lease only", "m:renew", []moduleStep{
					{"exclusive.take", acquireCall{owner: "a", token: "t1", ttlMS: 60000}, "fence", ""},
					{"exclusive.renew", acquireCall{token: "t1", ttlMS: 30000}, "ok", "a"},
					{"exclusive.renew", acquireCall{token: "t9", ttlMS: 30000}, "lost", ""},
				}},
				{"multi.acquire lets a shared request in and holds an exclusive one", "m:s", []moduleStep{
					{"multi.take", acquireCall{owner: "a", token: "t1", ttlMS: 60000, mode: "s"}, "fence", ""},
					{"multi.acquire", acquireCall{owner: "b", token: "t2", ttlMS: 60000, mode: "s"}, "<nil>", ""},
					{"multi.acquire", acquireCall{owner: "a", token: "t1", ttlMS: 60000, mode: "s"}, "granted", "a"},
					{"multi.acquire", acquireCall{owner: "c", token: "t3", ttlMS: 60000, mode: "x"}, "held", ""},
					{"multi.acquire", acquireCall{owner: "c", token: "t3", ttlMS: 60000, mode: "s", reentry: "t8"}, "lost", ""},
				}},
				{"multi.acquire refuses a permit of another limit", "m:p", []moduleStep{
					{"multi.take", acquireCall{owner: "a", token: "t1", ttlMS: 60000, mode: "p", limit: 2}, "fence", ""},
					{"multi.acquire", acquireCall{owner: "b", token: "t2", ttlMS: 60000, mode: "p", limit: 3}, "limit", ""},
					{"multi.acquire", acquireCall{owner: "b", token: "t2", ttlMS: 60000, mode: "p", limit: 2}, "<nil>", ""},
				}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					for i, s := range tc.steps {
						got := runModule(t, rdb, src, tc.key, s)
						status, _ := got[0].(string)
						if s.status == "fence" {
							if _, err := strconv.ParseInt(status, 10, 64); err != nil {
								t.Fatalf("step %d, %s: %v, want a fence", i, s.fn, got)
							}
							continue
						}
						if status != s.status {
							t.Fatalf("step %d, %s: %v, want %q", i, s.fn, got, s.status)
						}
						if s.owner != "" && (len(got) < 2 || got[1] != s.owner) {
							t.Fatalf("step %d, %s: %v, want the grant of %q", i, s.fn, got, s.owner)
						}
					}
				})
			}
		})
	}
}

// moduleStep is one call of a module function, or "force": a
// force-release of the key's exclusive lease through its script.
type moduleStep struct {
	fn     string
	call   acquireCall
	status string
	owner  string
}

// runModule runs s on key's keys with the harness (src), or force_release.lua.
func runModule(t *testing.T, rdb redis.UniversalClient, src, key string, s moduleStep) []any {
	t.Helper()
	ctx := context.Background()
	n := &node{}
	sh := newShared("")
	base := n.acquireCallOf(key, sh)
	if s.fn == "force" {
		k := keysOf(key)
		v, err := rdb.Eval(ctx, moduleLib()+mustRead("force_release"),
			[]string{k.lease, k.hist, sh.expiries, sh.events, k.holders}, "t", "test", k.wake, "", "").Result()
		if err != nil {
			t.Fatal(err)
		}
		return v.([]any)
	}
	c := s.call
	c.lease, c.hist, c.queue, c.epoch, c.sched, c.stream = base.lease, base.hist, base.queue, base.epoch, base.sched, base.stream
	c.qinfo, c.holders, c.replicas, c.channel, c.replica = base.qinfo, base.holders, base.replicas, base.channel, "r1"
	c.epochArgs, c.actor = "1000 e1", "test"
	fields := map[string]string{}
	v := reflect.ValueOf(c)
	for i := range v.NumField() {
		f := v.Field(i)
		name := snake(v.Type().Field(i).Name)
		switch f.Kind() {
		case reflect.String:
			fields[name] = f.String()
		case reflect.Int, reflect.Int64:
			fields[name] = strconv.FormatInt(f.Int(), 10)
		}
	}
	fields["renewals"] = keysOf(key).renewals // renew's, not acquire's
	call, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := c.args()
	got, err := rdb.Eval(ctx, src, keys, s.fn, string(call)).Result()
	if err != nil {
		t.Fatalf("%s: %v", s.fn, err)
	}
	return got.([]any)
}

// moduleLib is the modules as one server's scripts have them.
func moduleLib() string {
	cfg := scriptConfigOf(Options{}.withDefaults())
	cfg.publish = "PUBLISH"
	return libText(cfg)
}
