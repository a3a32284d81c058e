package lock

import (
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestScriptHeaders holds each script's header (the KEYS[n] and ARGV[n]
// it names) to its call type in protocol.go: as many keys and arguments,
// and no body that reads one past them.
func TestScriptHeaders(t *testing.T) {
	n := &node{arg: args{historyMax: 1, retention: 1, eventsMax: 1, renewalsMax: 1, replica: "r", alive: 1, queueTTL: 1}}
	k := keysOf("k")
	sh := &sharedKeys{}
	calls := map[string]func() ([]string, []any){
		"acquire":       func() ([]string, []any) { return acquireCall{keys: k, shared: sh}.args(n) },
		"renew":         func() ([]string, []any) { return renewCall{keys: k, shared: sh}.args(n) },
		"release":       func() ([]string, []any) { return releaseCall{keys: k, shared: sh}.args(n) },
		"force_release": func() ([]string, []any) { return forceReleaseCall{keys: k, shared: sh}.run(n) },
		"history":       func() ([]string, []any) { return historyCall{keys: k, shared: sh}.run(n) },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			src := mustRead(name)
			keys, argv := call()
			for _, c := range []struct {
				what string
				n    int
			}{{"KEYS", len(keys)}, {"ARGV", len(argv)}} {
				if got := highest(src, c.what); got != c.n {
					t.Errorf("%s.lua reads %s up to %d; its call passes %d", name, c.what, got, c.n)
				}
			}
		})
	}
}

// highest is the largest n of what[n] in src.
func highest(src, what string) int {
	top := 0
	for _, m := range regexp.MustCompile(what+`\[(\d+)\]`).FindAllStringSubmatch(src, -1) {
		n, _ := strconv.Atoi(m[1])
		top = max(top, n)
	}
	return top
}

// The decoders read each reply shape the scripts' headers give, field by
// field: a shape that gains or moves a field fails here first.
func TestReplyShapes(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_000).UTC()
	ms := strconv.FormatInt(at.UnixMilli(), 10)
	grant, err := decodeAcquire([]any{"granted", "o", "tok", "17", int64(2), int64(3000), ms, int64(2500), ms, "ep", "p", int64(4)}, acquireCall{})
	if err != nil || grant.grant != (grantReply{status: "granted", owner: "o", token: "tok", fence: 17, count: 2, ttl: 3 * time.Second,
		acquiredAt: at, left: 2500 * time.Millisecond, now: at, epoch: "ep", mode: Permit, limit: 4}) {
		t.Errorf("granted: %+v, %v", grant, err)
	}
	fresh, err := decodeAcquire([]any{"new", "18", ms, "ep"}, acquireCall{owner: "o", token: "tok", ttlMS: 3000})
	if err != nil || fresh.status != "granted" || fresh.grant != (grantReply{status: "granted", owner: "o", token: "tok", fence: 18,
		count: 1, ttl: 3 * time.Second, acquiredAt: at, left: 3 * time.Second, now: at, epoch: "ep", mode: Exclusive}) {
		t.Errorf("new: %+v, %v", fresh, err)
	}
	queued, err := decodeAcquire([]any{"queued", "next", int64(1200), "ep", "99", int64(3), ms}, acquireCall{})
	if err != nil || queued.owner != "next" || queued.retry != 1200*time.Millisecond || queued.epoch != "ep" ||
		queued.place != "99" || queued.waiters != 3 || !queued.since.Equal(at) {
		t.Errorf("queued: %+v, %v", queued, err)
	}
	held, err := decodeAcquire([]any{"held", "h", int64(500), "", ""}, acquireCall{})
	if err != nil || held.owner != "h" || held.retry != 500*time.Millisecond || held.waiters != 0 {
		t.Errorf("held: %+v, %v", held, err)
	}
	if r, err := decodeAcquire([]any{"recovering", "ep", int64(800)}, acquireCall{}); err != nil || r.epoch != "ep" || r.left != 800*time.Millisecond {
		t.Errorf("recovering: %+v, %v", r, err)
	}
	if r, err := decodeAcquire([]any{"full", int64(10000)}, acquireCall{}); err != nil || r.holders != 10000 {
		t.Errorf("full: %+v, %v", r, err)
	}
	if r, err := decodeAcquire([]any{"mode", "s"}, acquireCall{}); err != nil || r.held != Shared {
		t.Errorf("mode: %+v, %v", r, err)
	}
	renewed, err := decodeRenew([]any{"ok", "o", "tok", "17", int64(1), int64(3000), ms, int64(3000), ms, "", "p", int64(5)})
	if err != nil || renewed.mode != Permit || renewed.limit != 5 || renewed.fence != 17 {
		t.Errorf("renew of a permit: %+v, %v", renewed, err)
	}
	if _, err := decodeRenew([]any{"lost"}); err != ErrLeaseLost {
		t.Errorf("renew lost: %v", err)
	}
	rel, err := decodeRelease([]any{"ok", int64(0), ms, "w1", "next", "tok2", "18", int64(1000), ms})
	if err != nil || rel.count != 0 || !rel.acquiredAt.Equal(at) || rel.handoff == nil || rel.handoff.waiter != "w1" ||
		rel.handoff.fence != 18 || rel.handoff.ttl != time.Second {
		t.Errorf("release with a hand-off: %+v, %v", rel, err)
	}
	if _, err := decodeRelease([]any{"not_found"}); err != ErrNotFound {
		t.Errorf("release not_found: %v", err)
	}
	force, err := decodeForce([]any{"ok", "o", "17", ms, int64(1)})
	if err != nil || force.owner != "o" || force.fence != 17 || !force.more {
		t.Errorf("force-release: %+v, %v", force, err)
	}
}
