package lock

import (
	"context"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unsafe"

	"github.com/lockd/lockd/internal/lock/store"
)

// TestScriptHeaders holds each script's header (the KEYS[n] and ARGV[n]
// it names) to its call type in protocol.go: as many keys and arguments,
// and no body that reads one past them.
func TestScriptHeaders(t *testing.T) {
	calls := map[string]func() ([]string, []any){
		"acquire":       func() ([]string, []any) { return acquireCall{}.args() },
		"renew":         func() ([]string, []any) { return renewCall{}.args() },
		"release":       func() ([]string, []any) { return releaseCall{}.args() },
		"force_release": func() ([]string, []any) { return forceReleaseCall{}.args() },
		"history":       func() ([]string, []any) { return historyCall{}.args() },
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

// TestCallNames holds each call type to its dispatcher name by name: its
// fields, in order, are the names under which the script reads KEYS then
// ARGV (ttlMS is ttl_ms), and args puts each field in its script's place.
func TestCallNames(t *testing.T) {
	for script, call := range map[string]interface{ args() ([]string, []any) }{
		"acquire": &acquireCall{}, "renew": &renewCall{}, "release": &releaseCall{}, "force_release": &forceReleaseCall{},
		"history": &historyCall{},
	} {
		t.Run(script, func(t *testing.T) {
			lua := luaCall(t, mustRead(script))
			v := reflect.ValueOf(call).Elem()
			var goNames []string
			want := map[string]string{} // Lua name → what args must send for it
			for i := range v.NumField() {
				name := snake(v.Type().Field(i).Name)
				goNames = append(goNames, name)
				f := reflect.NewAt(v.Field(i).Type(), unsafe.Pointer(v.Field(i).UnsafeAddr())).Elem()
				switch f.Kind() {
				case reflect.String:
					f.SetString(name)
					want[name] = name
				case reflect.Int, reflect.Int64:
					f.SetInt(int64(1000 + i))
					want[name] = strconv.Itoa(1000 + i)
				}
			}
			if !slices.Equal(goNames, lua) {
				t.Fatalf("the call's fields are\n%v;\n%s.lua reads\n%v", goNames, script, lua)
			}
			keys, argv := call.args()
			sent := append([]string{}, keys...)
			for _, a := range argv {
				sent = append(sent, fmt.Sprint(a))
			}
			for i, name := range lua {
				if sent[i] != want[name] {
					t.Errorf("place %d of the call is %s in %s.lua; args sends %q there", i+1, name, script, sent[i])
				}
			}
		})
	}
}

// luaCall is the names a dispatcher reads KEYS and then ARGV under, in
// their places: its assignments "c.a, c.b = KEYS[1], KEYS[2]".
func luaCall(t *testing.T, src string) []string {
	t.Helper()
	stmt := regexp.MustCompile(`(?m)^((?:c\.\w+, )*c\.\w+) = ((?:.|\n  )*)$`)
	place := regexp.MustCompile(`^(?:tonumber\()?(KEYS|ARGV)\[(\d+)\]`)
	at := map[string][]string{}
	for _, m := range stmt.FindAllStringSubmatch(src, -1) {
		names := strings.Split(m[1], ", ")
		values := strings.Split(strings.Join(strings.Fields(m[2]), " "), ", ")
		if len(values) != len(names) {
			continue // a call: c.now_ms, c.now_us = clock()
		}
		for i, val := range values {
			p := place.FindStringSubmatch(val)
			if p == nil {
				continue
			}
			n, _ := strconv.Atoi(p[2])
			list := at[p[1]]
			for len(list) < n {
				list = append(list, "")
			}
			list[n-1] = strings.TrimPrefix(names[i], "c.")
			at[p[1]] = list
		}
	}
	return append(at["KEYS"], at["ARGV"]...)
}

// snake is a Go field name as the scripts write it: ttlMS is ttl_ms.
func snake(name string) string {
	var b strings.Builder
	for i, r := range name {
		if unicode.IsUpper(r) && i > 0 && unicode.IsLower(rune(name[i-1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
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
	n := &node{st: &store.Store{}}
	sh := &sharedKeys{}
	try := acquireTry{key: "lock:k", sh: sh}
	answer := func(reply []any, c acquireCall) (Lease, error) {
		r, err := newReply(reply)
		if err != nil {
			t.Fatal(err)
		}
		a := acquireStatuses[r.str(0)](r, c)
		if r.err != nil {
			t.Fatalf("%v: %v", reply, r.err)
		}
		return a(context.Background(), n, try)
	}
	res := resourceOf("lock:k")
	for _, c := range []struct {
		reply []any
		call  acquireCall
		lease Lease
		err   error
	}{
		{[]any{"granted", "o", "tok", "17", int64(2), int64(3000), ms, int64(2500), ms, "ep", "p", int64(4)}, acquireCall{},
			Lease{Resource: res, Owner: "o", Token: "tok", Fence: 17, Count: 2, TTL: 3 * time.Second, AcquiredAt: at,
				ExpiresAt: at.Add(2500 * time.Millisecond), Mode: Permit, Limit: 4, Outcome: Granted}, nil},
		{[]any{"new", "18", ms, "ep"}, acquireCall{owner: "o", token: "tok", ttlMS: 3000},
			Lease{Resource: res, Owner: "o", Token: "tok", Fence: 18, Count: 1, TTL: 3 * time.Second, AcquiredAt: at,
				ExpiresAt: at.Add(3 * time.Second), Mode: Exclusive, Outcome: Granted}, nil},
		{[]any{"idempotent", "o", "tok", "17", int64(1), int64(3000), ms, int64(2500), ms, "", "x", int64(0)}, acquireCall{},
			Lease{Resource: res, Owner: "o", Token: "tok", Fence: 17, Count: 1, TTL: 3 * time.Second, AcquiredAt: at,
				ExpiresAt: at.Add(2500 * time.Millisecond), Mode: Exclusive, Outcome: Replayed}, nil},
		{[]any{"queued", "next", int64(1200), "ep", "99", int64(3), ms}, acquireCall{}, Lease{},
			&QueuedError{Resource: res, Waiters: 3, RetryAfter: min(1200*time.Millisecond, queuedRetry), Next: Waiter{Owner: "next", Since: at}}},
		{[]any{"held", "h", int64(500), "", ""}, acquireCall{}, Lease{}, &HeldError{Resource: res, Owner: "h", Remaining: 500 * time.Millisecond}},
		{[]any{"min_hold", "h", int64(400), "", ""}, acquireCall{}, Lease{}, &MinHoldError{Resource: res, Owner: "h", Remaining: 400 * time.Millisecond}},
		{[]any{"recovering", "ep", int64(800)}, acquireCall{}, Lease{}, &RecoveringError{Remaining: 800 * time.Millisecond}},
		{[]any{"delay", "ep", int64(700), ""}, acquireCall{}, Lease{}, &DelayError{Resource: res, Remaining: 700 * time.Millisecond}},
		{[]any{"full", int64(10000)}, acquireCall{}, Lease{}, &TooManyHoldersError{Holders: 10000}},
		{[]any{"mode", "s"}, acquireCall{mode: "x"}, Lease{}, &ModeMismatchError{Held: Shared, Asked: Exclusive}},
		{[]any{"lost"}, acquireCall{}, Lease{}, ErrLeaseLost},
		{[]any{"mismatch"}, acquireCall{}, Lease{}, ErrIdempotencyMismatch},
		{[]any{"limit"}, acquireCall{}, Lease{}, ErrLimitMismatch},
		{[]any{"free"}, acquireCall{}, Lease{}, errFree},
		{[]any{"ended"}, acquireCall{}, Lease{}, errEnded},
		{[]any{"in_set", "3"}, acquireCall{}, Lease{}, &InSetError{Keys: 3}},
	} {
		l, err := answer(c.reply, c.call)
		if !reflect.DeepEqual(l, c.lease) || !reflect.DeepEqual(err, c.err) {
			t.Errorf("%v: %+v, %v; want %+v, %v", c.reply[0], l, err, c.lease, c.err)
		}
	}
	if len(acquireStatuses) != 17 {
		t.Errorf("acquireStatuses has %d rows; this test reads 17", len(acquireStatuses))
	}
	renewed, rq, err := decodeRenew([]any{"ok", "o", "tok", "17", int64(1), int64(3000), ms, int64(3000), ms, "", "p", int64(5)})
	if err != nil || renewed.mode != Permit || renewed.limit != 5 || renewed.fence != 17 || rq != nil {
		t.Errorf("renew of a permit: %+v, %v, %v", renewed, rq, err)
	}
	_, rq, err = decodeRenew([]any{"ok", "o", "tok", "17", int64(1), int64(3000), ms, int64(3000), ms, "", "x", int64(0),
		"1700000000000\x1eops\x1edeploy waits"})
	if err != nil || rq == nil || rq.By != "ops" || rq.Reason != "deploy waits" || rq.At.UnixMilli() != 1700000000000 {
		t.Errorf("renew with a release request: %+v, %v", rq, err)
	}
	if _, _, err := decodeRenew([]any{"lost"}); err != ErrLeaseLost {
		t.Errorf("renew lost: %v", err)
	}
	if _, _, err := decodeRenew([]any{"in_set", "4"}); !reflect.DeepEqual(err, &InSetError{Keys: 4}) {
		t.Errorf("renew of one key of a set: %v", err)
	}
	rel, err := decodeRelease([]any{"ok", int64(0), ms, "w1", "next", "tok2", "18", int64(1000), ms})
	if err != nil || rel.count != 0 || !rel.acquiredAt.Equal(at) || rel.handoff == nil || rel.handoff.waiter != "w1" ||
		rel.handoff.fence != 18 || rel.handoff.ttl != time.Second {
		t.Errorf("release with a hand-off: %+v, %v", rel, err)
	}
	if _, err := decodeRelease([]any{"not_found"}); err != ErrNotFound {
		t.Errorf("release not_found: %v", err)
	}
	if _, err := decodeRelease([]any{"in_set", "2"}); !reflect.DeepEqual(err, &InSetError{Keys: 2}) {
		t.Errorf("release of one key of a set: %v", err)
	}
	force, err := decodeForce([]any{"ok", "o", "17", ms, int64(1)})
	if err != nil || force.owner != "o" || force.fence != 17 || !force.more {
		t.Errorf("force-release: %+v, %v", force, err)
	}
}
