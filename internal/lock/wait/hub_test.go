package wait_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockd/lockd/internal/lock/wait"
)

// The hub's tests run in a synctest bubble: time is fake and moves only
// when every goroutine waits, so "at once" means no time passed at all and
// a timer fires exactly when it is due. The store is a fakeKey whose tries
// are scripted, and the subscription a fakeSub through which the test
// delivers wake-ups by hand.

// grant is what the fake store grants.
type grant struct {
	owner string
	until time.Time
}

// heldError is the fake store's answer for a key someone else holds.
type heldError struct {
	owner string
	left  time.Duration
}

func (e heldError) Error() string { return fmt.Sprintf("held by %s for %v", e.owner, e.left) }

// errAway is the fake store failing for a moment.
var errAway = errors.New("store away")

// fakeKey is one key of a fake store: free, or held until a time. It
// records the tries that reach it.
type fakeKey struct {
	mu     sync.Mutex
	holder string
	until  time.Time
	away   int // the next tries that fail with errAway
	tries  []string
}

func (k *fakeKey) hold(owner string, ttl time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.holder, k.until = owner, time.Now().Add(ttl)
}

func (k *fakeKey) free() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.holder = ""
}

// check is what a try would answer now, without taking the key: a
// caller's own first try before it waits.
func (k *fakeKey) check() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.holder != "" && time.Now().Before(k.until) {
		return heldError{k.holder, time.Until(k.until)}
	}
	return nil
}

// try is owner's try through the hub: it takes the key for ttl when free.
func (k *fakeKey) try(owner string, ttl time.Duration) func(context.Context) (grant, error) {
	return func(context.Context) (grant, error) {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.tries = append(k.tries, owner)
		if k.away > 0 {
			k.away--
			return grant{}, errAway
		}
		now := time.Now()
		if k.holder != "" && now.Before(k.until) {
			return grant{}, heldError{k.holder, k.until.Sub(now)}
		}
		k.holder, k.until = owner, now.Add(ttl)
		return grant{owner, k.until}, nil
	}
}

func (k *fakeKey) tried() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.tries...)
}

// fakeSub is the wake-up subscription: the test delivers what Redis would
// (a confirmation, a message, a reset) through its listener.
type fakeSub struct {
	mu      sync.Mutex
	l       wait.Listener
	confirm bool // confirm each subscription at once
	keys    map[string]bool
	subs    int // Subscribe calls
	closed  bool
}

func (f *fakeSub) Subscribe(_ context.Context, key string) error {
	f.mu.Lock()
	f.keys[key] = true
	f.subs++
	confirm := f.confirm
	f.mu.Unlock()
	if confirm {
		f.l.Subscribed(key)
	}
	return nil
}

func (f *fakeSub) Unsubscribe(_ context.Context, keys ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range keys {
		delete(f.keys, k)
	}
	return nil
}

func (f *fakeSub) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

func (f *fakeSub) subscribed(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.keys[key]
}

// newHub starts a hub on sub, in the test's bubble, closed when the test
// ends.
func newHub(t *testing.T, sub *fakeSub, edit ...func(*wait.Config[grant])) *wait.Hub[grant] {
	t.Helper()
	if sub.keys == nil {
		sub.keys = map[string]bool{}
	}
	c := wait.Config[grant]{
		Listen: func(l wait.Listener) wait.Subscription {
			sub.l = l
			return sub
		},
		Expires: func(g grant) time.Time { return g.until },
		Blocked: func(err error) (time.Duration, bool) {
			var h heldError
			if errors.As(err, &h) {
				return h.left, true
			}
			return 0, false
		},
		Transient: func(err error) bool { return errors.Is(err, errAway) },
		Renewed: func(payload string) (time.Duration, bool) {
			ttl, ok := strings.CutPrefix(payload, "renewed:")
			if !ok {
				return 0, false
			}
			d, err := time.ParseDuration(ttl)
			return d, err == nil
		},
		Bound:      time.Second,
		MaxWaiters: 100,
		MaxPerKey:  10,
	}
	for _, e := range edit {
		e(&c)
	}
	h := wait.New(c)
	t.Cleanup(h.Close)
	return h
}

type result struct {
	g   grant
	err error
	at  time.Time
}

// waiter is one caller: its own try (check), then the hub, as the engines
// do it. It answers on the returned channel.
func waiter(h *wait.Hub[grant], k *fakeKey, key, owner string, within time.Duration, w wait.Waiter[grant]) <-chan result {
	return waiterCtx(context.Background(), h, k, key, owner, within, w)
}

func waiterCtx(ctx context.Context, h *wait.Hub[grant], k *fakeKey, key, owner string, within time.Duration, w wait.Waiter[grant]) <-chan result {
	if w.Try == nil {
		w.Try = k.try(owner, time.Hour)
	}
	if w.Undo == nil {
		w.Undo = func(grant) { k.free() }
	}
	seen := h.Watch(key, w.ID)
	first := k.check()
	out := make(chan result, 1)
	go func() {
		g, err := h.Wait(ctx, key, time.Now().Add(within), w, seen, first)
		out <- result{g, err, time.Now()}
	}()
	return out
}

// answer is the result that came, or fails the test if none did.
func answer(t *testing.T, ch <-chan result) result {
	t.Helper()
	synctest.Wait()
	select {
	case r := <-ch:
		return r
	default:
		t.Fatal("no answer")
		return result{}
	}
}

func noAnswer(t *testing.T, ch <-chan result, why string) {
	t.Helper()
	synctest.Wait()
	select {
	case r := <-ch:
		t.Fatalf("%s: answered %+v", why, r)
	default:
	}
}

// A release message wakes the waiter at once: it does not wait for the
// holder's TTL.
func TestHubWakesOnRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sub := &fakeSub{confirm: true}
		h := newHub(t, sub)
		k := &fakeKey{}
		k.hold("holder", time.Hour)

		w := waiter(h, k, "k", "w", time.Minute, wait.Waiter[grant]{})
		noAnswer(t, w, "while held")
		if !sub.subscribed("k") || h.Waiting() != 1 {
			t.Fatalf("subscribed %v, %d waiting", sub.subscribed("k"), h.Waiting())
		}
		// The confirmation of the new subscription tried once: a release
		// before it could have been missed.
		if got := k.tried(); len(got) != 1 {
			t.Fatalf("tries before the release: %v", got)
		}

		time.Sleep(time.Second)
		freed := time.Now()
		k.free()
		sub.l.Message("k", "released")
		r := answer(t, w)
		if r.err != nil || r.g.owner != "w" {
			t.Fatalf("after the release: %+v", r)
		}
		if late := r.at.Sub(freed); late != 0 {
			t.Fatalf("granted %v after the release", late)
		}
		if h.Waiting() != 0 {
			t.Fatalf("%d still waiting", h.Waiting())
		}
	})
}

// After a renewal message the queue tries when the renewed grant ends, not
// when the old one would have.
func TestHubFollowsRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sub := &fakeSub{confirm: true}
		h := newHub(t, sub)
		k := &fakeKey{}
		k.hold("holder", 2*time.Second)

		w := waiter(h, k, "k", "w", time.Minute, wait.Waiter[grant]{})
		noAnswer(t, w, "while held")
		time.Sleep(time.Second)
		k.hold("holder", 3*time.Second)
		renewedEnd := time.Now().Add(3 * time.Second)
		sub.l.Message("k", "renewed:3s")
		synctest.Wait()
		tries := len(k.tried())

		time.Sleep(1500 * time.Millisecond) // past the old end
		if got := len(k.tried()); got != tries {
			t.Fatalf("the queue tried %d times before the renewed grant ended", got-tries)
		}
		noAnswer(t, w, "before the renewed grant ended")
		time.Sleep(2 * time.Second)
		r := answer(t, w)
		if r.err != nil || r.g.owner != "w" {
			t.Fatalf("after the renewed grant ended: %+v", r)
		}
		if late := r.at.Sub(renewedEnd); late != time.Millisecond {
			t.Fatalf("granted %v after the renewed grant ended, want 1ms", late)
		}
	})
}

// A waiter whose holder just lets the grant lapse gets it one millisecond
// after the lapse.
func TestHubRetriesAtExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sub := &fakeSub{confirm: true}
		h := newHub(t, sub)
		k := &fakeKey{}
		k.hold("holder", 2*time.Second)
		lapse := time.Now().Add(2 * time.Second)

		w := waiter(h, k, "k", "w", time.Minute, wait.Waiter[grant]{})
		noAnswer(t, w, "while held")
		time.Sleep(3 * time.Second)
		r := answer(t, w)
		if r.err != nil || r.g.owner != "w" {
			t.Fatalf("after the lapse: %+v", r)
		}
		if late := r.at.Sub(lapse); late != time.Millisecond {
			t.Fatalf("granted %v after the lapse, want 1ms", late)
		}
	})
}

// take releases the key from its holder and tells the hub, then returns
// which waiter got it.
func releaseTo(t *testing.T, k *fakeKey, sub *fakeSub, ws map[string]<-chan result) string {
	t.Helper()
	k.free()
	sub.l.Message("k", "released")
	synctest.Wait()
	got := ""
	for name, ch := range ws {
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatalf("%s: %v", name, r.err)
			}
			if got != "" {
				t.Fatalf("one release granted %s and %s", got, name)
			}
			got = name
		default:
		}
	}
	if got == "" {
		t.Fatal("the release granted nobody")
	}
	return got
}

// Waiters of one process are granted in the order they came when the store
// gives them no place, and in the order of their places in the store's
// queue when it does, whatever order they came in.
func TestHubOrder(t *testing.T) {
	for _, tc := range []struct {
		name   string
		places map[string]int64 // by waiter; nil: no places
		came   []string
		want   []string
	}{
		{"first come, first served", nil, []string{"a", "b", "c", "d"}, []string{"a", "b", "c", "d"}},
		{"by place in the store", map[string]int64{"a": 10, "b": 20, "c": 30, "d": 40}, []string{"c", "a", "d", "b"}, []string{"a", "b", "c", "d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sub := &fakeSub{confirm: true}
				h := newHub(t, sub)
				k := &fakeKey{}
				k.hold("holder", time.Hour)
				ws := map[string]<-chan result{}
				for _, name := range tc.came {
					w := wait.Waiter[grant]{ID: name}
					if tc.places != nil {
						p := tc.places[name]
						w.Place = func() int64 { return p }
					}
					ws[name] = waiter(h, k, "k", name, time.Minute, w)
					synctest.Wait()
				}
				var order []string
				for range tc.came {
					name := releaseTo(t, k, sub, ws)
					delete(ws, name)
					order = append(order, name)
				}
				if fmt.Sprint(order) != fmt.Sprint(tc.want) {
					t.Fatalf("granted in the order %v, want %v", order, tc.want)
				}
			})
		})
	}
}

// Local waiters coalesce: however many wait for the key, only the head
// tries, so a release costs one try, and joining a queue whose head
// already waits for the holder's end costs none.
func TestHubCoalescesLocalWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sub := &fakeSub{confirm: true}
		h := newHub(t, sub)
		k := &fakeKey{}
		k.hold("holder", time.Hour)
		ws := map[string]<-chan result{}
		for i := range 8 {
			name := fmt.Sprint("w", i)
			ws[name] = waiter(h, k, "k", name, time.Minute, wait.Waiter[grant]{})
			synctest.Wait()
		}
		if got := k.tried(); len(got) != 1 {
			t.Fatalf("8 waiters joined with %d tries (%v), want the subscription's 1", len(got), got)
		}
		if sub.subs != 1 {
			t.Fatalf("%d subscriptions for one key", sub.subs)
		}
		releaseTo(t, k, sub, ws)
		if got := k.tried(); len(got) != 2 {
			t.Fatalf("a release cost %d tries (%v), want 1", len(got)-1, got)
		}
		// More messages while the new holder holds: still one try each.
		sub.l.Message("k", "expired")
		synctest.Wait()
		if got := k.tried(); len(got) != 3 {
			t.Fatalf("a message cost %d tries, want 1", len(got)-2)
		}
	})
}

// At its deadline a waiter gets the answer of one last try: who holds the
// key then, and for how long.
func TestHubTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sub := &fakeSub{confirm: true}
		h := newHub(t, sub)
		k := &fakeKey{}
		k.hold("old", time.Hour)
		start := time.Now()
		left := false
		w := waiter(h, k, "k", "w", 2*time.Second, wait.Waiter[grant]{Leave: func() { left = true }})
		time.Sleep(time.Second)
		// The key changes hands without a message.
		k.hold("new", 10*time.Second)
		noAnswer(t, w, "before the deadline")
		time.Sleep(time.Second)
		r := answer(t, w)
		var held heldError
		if !errors.As(r.err, &held) || held.owner != "new" || held.left != 9*time.Second {
			t.Fatalf("at the deadline: %+v, want held by new for 9s", r)
		}
		if d := r.at.Sub(start); d != 2*time.Second {
			t.Fatalf("answered after %v, want 2s", d)
		}
		if !left || h.Waiting() != 0 {
			t.Fatalf("left the store's queue: %v; %d waiting", left, h.Waiting())
		}
	})
}

// A caller whose context ends stops waiting at once with the context's
// error and leaves the store's queue; a grant that its try in flight got
// meanwhile is given back.
func TestHubContextCancel(t *testing.T) {
	t.Run("queued", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			sub := &fakeSub{confirm: true}
			h := newHub(t, sub)
			k := &fakeKey{}
			k.hold("holder", time.Hour)
			ctx, cancel := context.WithCancel(context.Background())
			left := false
			w := waiterCtx(ctx, h, k, "k", "w", time.Minute, wait.Waiter[grant]{Leave: func() { left = true }})
			time.Sleep(time.Second)
			cancel()
			r := answer(t, w)
			if !errors.Is(r.err, context.Canceled) || !left || h.Waiting() != 0 {
				t.Fatalf("after cancel: %+v, left %v, %d waiting", r, left, h.Waiting())
			}
		})
	})
	t.Run("grant in flight", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			sub := &fakeSub{confirm: true}
			h := newHub(t, sub)
			k := &fakeKey{}
			k.hold("holder", time.Hour)
			ctx, cancel := context.WithCancel(context.Background())
			trying, proceed := make(chan struct{}), make(chan struct{})
			slow := k.try("w", time.Hour)
			var undone []grant
			w := waiterCtx(ctx, h, k, "k", "w", time.Minute, wait.Waiter[grant]{
				Try: func(ctx context.Context) (grant, error) {
					if k.check() == nil {
						close(trying)
						<-proceed
					}
					return slow(ctx)
				},
				Undo: func(g grant) { undone = append(undone, g); k.free() },
			})
			synctest.Wait()
			k.free()
			sub.l.Message("k", "released")
			<-trying
			cancel()
			noAnswer(t, w, "while its try is in flight")
			close(proceed)
			r := answer(t, w)
			if !errors.Is(r.err, context.Canceled) {
				t.Fatalf("after cancel: %+v", r)
			}
			if len(undone) != 1 || undone[0].owner != "w" || k.check() != nil {
				t.Fatalf("undone %v; the key: %v", undone, k.check())
			}
		})
	})
}

// The lost wake-up: a release that comes between a caller's own try and
// its joining the queue must not be lost, or the caller would sleep until
// the end of a grant that no longer exists. The queue here is kept idle
// for reuse, with no waiter, as after an earlier grant.
func TestHubNoLostWakeUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sub := &fakeSub{confirm: true}
		h := newHub(t, sub)
		k := &fakeKey{}
		k.hold("holder", time.Hour)
		// A first waiter makes the queue and gets the key.
		first := waiter(h, k, "k", "first", time.Minute, wait.Waiter[grant]{})
		releaseTo(t, k, sub, map[string]<-chan result{"first": first})
		tries := len(k.tried())

		// The next caller's own try sees the key held for an hour …
		seen := h.Watch("k", "")
		held := k.check()
		if held == nil {
			t.Fatal("the key should be held")
		}
		// … then the holder releases before the caller joins the queue.
		k.free()
		sub.l.Message("k", "released")
		synctest.Wait()
		if got := len(k.tried()); got != tries {
			t.Fatalf("an empty queue tried %d times", got-tries)
		}
		start := time.Now()
		out := make(chan result, 1)
		go func() {
			g, err := h.Wait(context.Background(), "k", time.Now().Add(time.Minute), wait.Waiter[grant]{Try: k.try("late", time.Hour), Undo: func(grant) {}}, seen, held)
			out <- result{g, err, time.Now()}
		}()
		r := answer(t, out)
		if r.err != nil || r.g.owner != "late" || r.at != start {
			t.Fatalf("the late joiner: %+v after %v, want the key at once", r, r.at.Sub(start))
		}
	})
}

// A release by this process hands the key straight to the waiter it names:
// a queued one gets it with no try of its own; one whose try is in flight
// gets it whatever that try saw; a waiter that has gone does not, and the
// caller is told so.
func TestHubHandOff(t *testing.T) {
	t.Run("queued", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			sub := &fakeSub{confirm: true}
			h := newHub(t, sub)
			k := &fakeKey{}
			k.hold("holder", time.Hour)
			a := waiter(h, k, "k", "a", time.Minute, wait.Waiter[grant]{ID: "a"})
			synctest.Wait()
			b := waiter(h, k, "k", "b", time.Minute, wait.Waiter[grant]{ID: "b"})
			synctest.Wait()
			tries := len(k.tried())
			handed := grant{owner: "b", until: time.Now().Add(5 * time.Second)}
			if !h.HandOff("k", "b", handed) {
				t.Fatal("HandOff to a queued waiter said false")
			}
			r := answer(t, b)
			if r.err != nil || r.g != handed {
				t.Fatalf("b: %+v, want the handed grant", r)
			}
			if got := len(k.tried()); got != tries {
				t.Fatalf("a hand-off cost %d tries", got-tries)
			}
			noAnswer(t, a, "a, behind the hand-off")
			if h.HandOff("k", "gone", handed) || h.HandOff("other", "a", handed) {
				t.Fatal("HandOff to no waiter said true")
			}
			// The handed grant's end frees the key for a.
			k.hold("b", 5*time.Second)
			time.Sleep(6 * time.Second)
			if r := answer(t, a); r.err != nil || r.g.owner != "a" {
				t.Fatalf("a after b's grant lapsed: %+v", r)
			}
		})
	})
	t.Run("try in flight", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			sub := &fakeSub{confirm: true}
			h := newHub(t, sub)
			k := &fakeKey{}
			k.hold("holder", time.Hour)
			trying, proceed := make(chan struct{}), make(chan struct{})
			plain := k.try("w", time.Hour)
			calls := 0
			w := waiter(h, k, "k", "w", time.Minute, wait.Waiter[grant]{
				ID: "w",
				Try: func(ctx context.Context) (grant, error) {
					if calls++; calls == 2 {
						close(trying)
						<-proceed
					}
					return plain(ctx)
				},
			})
			synctest.Wait()
			sub.l.Message("k", "expired") // the second try starts, and stalls
			<-trying
			handed := grant{owner: "w", until: time.Now().Add(5 * time.Second)}
			if !h.HandOff("k", "w", handed) {
				t.Fatal("HandOff to a waiter that is trying said false")
			}
			close(proceed) // its try says held
			if r := answer(t, w); r.err != nil || r.g != handed {
				t.Fatalf("w: %+v, want the handed grant", r)
			}
		})
	})
}

// A release that runs between a caller's first try (which queued it in
// the store) and its Wait hands the key to it all the same: the store has
// marked that waiter served, so a refused hand-off would leave it waiting
// for a key that can no longer be its (TestValues met this under load).
// A caller that does not go on to wait takes the grant with Unwatch.
func TestHubHandOffBeforeWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sub := &fakeSub{confirm: true}
		h := newHub(t, sub)
		k := &fakeKey{}
		k.hold("holder", time.Hour)

		seen := h.Watch("k", "w")
		held := k.check()
		handed := grant{owner: "w", until: time.Now().Add(5 * time.Second)}
		if !h.HandOff("k", "w", handed) {
			t.Fatal("HandOff to a caller between its try and Wait said false")
		}
		if h.HandOff("k", "w", handed) {
			t.Fatal("a second HandOff to the same caller said true")
		}
		tries := len(k.tried())
		g, err := h.Wait(context.Background(), "k", time.Now().Add(time.Minute), wait.Waiter[grant]{ID: "w", Try: k.try("w", time.Hour), Undo: func(grant) {}}, seen, held)
		if err != nil || g != handed {
			t.Fatalf("Wait: %+v %v, want the handed grant", g, err)
		}
		if got := len(k.tried()); got != tries {
			t.Fatalf("the hand-off cost %d tries", got-tries)
		}
		if h.HandOff("k", "w", handed) {
			t.Fatal("HandOff after Wait answered said true")
		}

		seen = h.Watch("k", "v")
		if _, ok := h.Unwatch(seen); ok {
			t.Fatal("Unwatch with no hand-off answered a grant")
		}
		seen = h.Watch("k", "v")
		if !h.HandOff("k", "v", handed) {
			t.Fatal("HandOff to a watching caller said false")
		}
		if g, ok := h.Unwatch(seen); !ok || g != handed {
			t.Fatalf("Unwatch: %+v %v, want the handed grant", g, ok)
		}
		if h.HandOff("k", "v", handed) {
			t.Fatal("HandOff after Unwatch said true")
		}
	})
}

// A store that fails for a moment keeps the waiter at the head of the
// queue, retried with backoff; a waiter whose deadline comes while the
// store still fails gets the store's error, without another try.
func TestHubTransientErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sub := &fakeSub{confirm: true}
		h := newHub(t, sub)
		k := &fakeKey{}
		k.hold("holder", time.Hour)
		a := waiter(h, k, "k", "a", time.Minute, wait.Waiter[grant]{})
		synctest.Wait()
		k.mu.Lock()
		k.away = 3
		k.mu.Unlock()
		k.free()
		sub.l.Message("k", "released")
		synctest.Wait()
		b := waiter(h, k, "k", "b", time.Minute, wait.Waiter[grant]{})
		// 50, 100 and 200 ms of backoff, then the key.
		time.Sleep(time.Second)
		if r := answer(t, a); r.err != nil || r.g.owner != "a" {
			t.Fatalf("a after the store came back: %+v", r)
		}
		if got := k.tried(); fmt.Sprint(got) != "[a a a a a]" {
			t.Fatalf("tries %v, want a's only", got)
		}
		noAnswer(t, b, "b, behind a")

		// The store fails until b's deadline.
		k.mu.Lock()
		k.away = 1000
		k.mu.Unlock()
		k.free()
		sub.l.Message("k", "released")
		time.Sleep(time.Minute)
		r := answer(t, b)
		if !errors.Is(r.err, errAway) {
			t.Fatalf("b at its deadline with the store away: %+v", r)
		}
	})
}

// A subscription that Redis does not confirm holds the new queue's first
// try back at most a second.
func TestHubUnconfirmedSubscription(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sub := &fakeSub{}
		h := newHub(t, sub)
		k := &fakeKey{}
		k.hold("holder", time.Hour)
		w := waiter(h, k, "k", "w", time.Minute, wait.Waiter[grant]{})
		k.free()
		noAnswer(t, w, "before the subscription is confirmed")
		time.Sleep(time.Second + time.Millisecond)
		if r := answer(t, w); r.err != nil {
			t.Fatalf("after the confirmation timeout: %+v", r)
		}
	})
}

// After a reset (reconnect, failover) every queue tries again: any key may
// have missed its release.
func TestHubResetWakesEveryQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sub := &fakeSub{confirm: true}
		h := newHub(t, sub)
		keys := map[string]*fakeKey{"k1": {}, "k2": {}}
		ws := map[string]<-chan result{}
		for name, k := range keys {
			k.hold("holder", time.Hour)
			ws[name] = waiter(h, k, name, "w", time.Minute, wait.Waiter[grant]{})
		}
		synctest.Wait()
		for _, k := range keys {
			k.free()
		}
		sub.l.Reset()
		for name, ch := range ws {
			if r := answer(t, ch); r.err != nil {
				t.Fatalf("%s after a reset: %+v", name, r)
			}
		}
	})
}

// The hub caps its waiters, answers ErrClosed to those waiting when it
// closes and to any later Wait, and unsubscribes from keys whose queue
// stayed empty.
func TestHubLimitsCloseAndIdleQueues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sub := &fakeSub{confirm: true}
		h := newHub(t, sub, func(c *wait.Config[grant]) { c.MaxPerKey = 2 })
		k := &fakeKey{}
		k.hold("holder", time.Hour)
		a := waiter(h, k, "k", "a", time.Minute, wait.Waiter[grant]{})
		synctest.Wait()
		b := waiter(h, k, "k", "b", time.Minute, wait.Waiter[grant]{})
		synctest.Wait()
		c := waiter(h, k, "k", "c", time.Minute, wait.Waiter[grant]{})
		if r := answer(t, c); !errors.Is(r.err, wait.ErrTooManyWaiters) {
			t.Fatalf("a third waiter on a key capped at two: %+v", r)
		}
		releaseTo(t, k, sub, map[string]<-chan result{"a": a})
		// The queue stays while b waits, and 30 s after it is empty.
		k.free()
		sub.l.Message("k", "released")
		if r := answer(t, b); r.err != nil {
			t.Fatalf("b: %+v", r)
		}
		time.Sleep(20 * time.Second)
		if !sub.subscribed("k") {
			t.Fatal("unsubscribed a queue idle for 20 s")
		}
		time.Sleep(30 * time.Second)
		if sub.subscribed("k") {
			t.Fatal("still subscribed to a queue idle for 50 s")
		}

		k.hold("holder", time.Hour)
		d := waiter(h, k, "k", "d", time.Minute, wait.Waiter[grant]{})
		synctest.Wait()
		h.Close()
		if r := answer(t, d); !errors.Is(r.err, wait.ErrClosed) {
			t.Fatalf("a waiter when the hub closed: %+v", r)
		}
		if !sub.closed {
			t.Fatal("the subscription is still open")
		}
		if r := answer(t, waiter(h, k, "k", "e", time.Minute, wait.Waiter[grant]{})); !errors.Is(r.err, wait.ErrClosed) {
			t.Fatalf("a Wait after Close: %+v", r)
		}
	})
}
