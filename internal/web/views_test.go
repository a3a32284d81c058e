package web

import (
	"slices"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
)

// An engine that lists no holders (one exclusive holder in the state's own
// fields) still gets a holders table of one row; a key nobody holds gets
// none.
func TestHoldersOf(t *testing.T) {
	now := goldenNow
	tests := []struct {
		name   string
		st     lock.State
		mode   lock.Mode
		owners []string
		modes  []lock.Mode
	}{
		{"listed", sharedState(), lock.Exclusive, []string{"reader-1", "reader-2"}, []lock.Mode{lock.Shared, lock.Shared}},
		{"state's own fields", lock.State{Resource: lock.Lock("k"), Owner: "solo", Fence: 7, Count: 1, TTL: time.Second, ExpiresAt: now.Add(time.Second), Remaining: time.Second},
			lock.Exclusive, []string{"solo"}, []lock.Mode{lock.Exclusive}},
		{"semaphore without mode", lock.State{Resource: lock.Semaphore("p"), Owner: "w", Fence: 9},
			lock.Permit, []string{"w"}, []lock.Mode{lock.Permit}},
		{"nobody", lock.State{}, lock.Exclusive, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hs := holdersOf(tc.st, tc.mode)
			var owners []string
			var modes []lock.Mode
			for _, h := range hs {
				owners, modes = append(owners, h.Owner), append(modes, h.Mode)
			}
			if !slices.Equal(owners, tc.owners) || !slices.Equal(modes, tc.modes) {
				t.Errorf("holders %v %v, want %v %v", owners, modes, tc.owners, tc.modes)
			}
		})
	}
}

// A semaphore's row: used is the number of holders, the soonest expiry
// is the holder with the least time left, whatever its place in the list.
func TestSemRow(t *testing.T) {
	st := semState()
	slices.Reverse(st.Holders) // the soonest is not the first
	r := newSemRow(st)
	if r.Name != "pool:gpu" || r.Used != 2 || r.Limit != 3 || r.Waiting != 1 {
		t.Errorf("row %+v", r)
	}
	if !r.Expires || r.Soonest.Text != "5 s left" {
		t.Errorf("soonest expiry %+v, want job-7's 5 s left", r.Soonest)
	}
	if r.DetailURL != "/ui/semaphores/pool:gpu" || r.ForceURL != "/ui/semaphores/pool:gpu/force-release" {
		t.Errorf("URLs %s %s", r.DetailURL, r.ForceURL)
	}
	if empty := newSemRow(lock.State{Resource: lock.Semaphore("idle")}); empty.Used != 0 || empty.Expires {
		t.Errorf("a semaphore with no holder: %+v", empty)
	}
}

// The queue keeps the engine's order, numbered from 1, its times against
// Redis's clock (the lease's expiry minus its remaining time).
func TestQueuedRows(t *testing.T) {
	st := sharedState()
	hostNow := goldenNow.Add(time.Hour) // a host clock far off Redis's
	rows := newQueuedRows(st, lock.Exclusive, hostNow)
	if len(rows) != 2 || rows[0].Position != 1 || rows[1].Position != 2 {
		t.Fatalf("rows %+v", rows)
	}
	if rows[0].Owner != st.Queue[0].Owner || rows[0].Mode != "exclusive" || rows[1].Mode != "shared" {
		t.Errorf("rows %+v", rows)
	}
	if rows[0].Since.Text != "3 s ago" {
		t.Errorf("waiting since %q, want 3 s ago by Redis's clock", rows[0].Since.Text)
	}
}

// The confirmation page breaks what the link named: one holder by fence,
// every holder, the only holder, or asks which of several.
func TestConfirmViewTargets(t *testing.T) {
	shared := sharedState()
	single := lock.State{Resource: lock.Lock("k"), Owner: "solo", Fence: 7, Count: 1, TTL: time.Minute,
		ExpiresAt: goldenNow.Add(time.Minute), Remaining: time.Minute, AcquiredAt: goldenNow}
	tests := []struct {
		name   string
		st     lock.State
		held   bool
		t      target
		fence  int64
		all    bool
		choose bool
		gone   int64
		owners []string
	}{
		{name: "one of two by fence", st: shared, held: true, t: target{Fence: 1763805600000051}, fence: 1763805600000051, owners: []string{"reader-2"}},
		{name: "every holder", st: shared, held: true, t: target{All: true}, all: true, owners: []string{"reader-1", "reader-2"}},
		{name: "several, none chosen", st: shared, held: true, choose: true, owners: []string{"reader-1", "reader-2"}},
		{name: "the only holder", st: single, held: true, fence: 7, owners: []string{"solo"}},
		{name: "a fence no holder has", st: shared, held: true, t: target{Fence: 3}, gone: 3, owners: []string{"reader-1", "reader-2"}},
		{name: "nobody holds it", t: target{Fence: 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := newConfirmView(locks, "k", tc.st, tc.held, tc.t, "csrf", "", "")
			var owners []string
			for _, h := range v.Targets {
				owners = append(owners, h.Owner)
			}
			if v.Held != tc.held || v.Fence != tc.fence || v.All != tc.all || v.Choose != tc.choose || v.Gone != tc.gone || !slices.Equal(owners, tc.owners) {
				t.Errorf("held %v fence %d all %v choose %v gone %d targets %v; want %v %d %v %v %d %v",
					v.Held, v.Fence, v.All, v.Choose, v.Gone, owners, tc.held, tc.fence, tc.all, tc.choose, tc.gone, tc.owners)
			}
		})
	}
}
