package web

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.html")

// TestListPage_Golden renders "/" from fixed lock states and compares the
// HTML byte for byte, so that any change to the page shows up in review.
// After an intended change: go test ./internal/web -run Golden -update
func TestListPage_Golden(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	states := []lock.State{
		{
			Resource: lock.Lock("deploy:prod"), Owner: "ci-runner-7", Fence: 1763805600000042, Count: 1,
			TTL: 30 * time.Second, Remaining: 12*time.Second + 400*time.Millisecond,
			AcquiredAt: now.Add(-3*time.Minute - 2*time.Second), RenewedAt: now.Add(-17600 * time.Millisecond),
			ExpiresAt: now.Add(12*time.Second + 400*time.Millisecond), Renewals: 9, Waiters: 2,
		},
		{
			Resource: lock.Lock("order:pay:12345"), Owner: `worker <b>"9"</b>`, Fence: 1763805600000043, Count: 2,
			TTL: 2 * time.Hour, Remaining: 90 * time.Minute,
			AcquiredAt: now.Add(-30 * time.Minute), RenewedAt: now.Add(-30 * time.Minute),
			ExpiresAt: now.Add(90 * time.Minute),
		},
	}
	v := newListView(lock.Page{Locks: states, NextCursor: "eyJzIjo0Mn0"}, "", "", now, true)
	var buf bytes.Buffer
	if err := listPage(v).Render(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	golden(t, "list.golden.html", buf.Bytes())
}

// TestListPage_EmptyGolden is the empty state with a prefix.
func TestListPage_EmptyGolden(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	v := newListView(lock.Page{}, "deploy:", "", now, true)
	var buf bytes.Buffer
	if err := listPage(v).Render(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	golden(t, "list-empty.golden.html", buf.Bytes())
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the rendered page; if the change is intended, run go test ./internal/web -run Golden -update\ngot:\n%s", path, got)
	}
}

// goldenNow is the render time of the golden pages (Redis's clock in the
// states below).
var goldenNow = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// sharedState is a lock held by two shared holders, with an exclusive
// request and a shared one queued behind them (the shared one waits: no
// writer starvation).
func sharedState() lock.State {
	now := goldenNow
	return lock.State{
		Resource: lock.Lock("reports:db"), Mode: lock.Shared, Owner: "reader-2", Fence: 1763805600000051, Count: 1,
		TTL: 30 * time.Second, Remaining: 25 * time.Second, AcquiredAt: now.Add(-5 * time.Second),
		ExpiresAt: now.Add(25 * time.Second), Waiters: 2,
		Holders: []lock.Holder{
			{Owner: "reader-1", Mode: lock.Shared, Fence: 1763805600000050, Count: 2, TTL: time.Minute,
				AcquiredAt: now.Add(-40 * time.Second), ExpiresAt: now.Add(20 * time.Second), Remaining: 20 * time.Second},
			{Owner: "reader-2", Mode: lock.Shared, Fence: 1763805600000051, Count: 1, TTL: 30 * time.Second,
				AcquiredAt: now.Add(-5 * time.Second), ExpiresAt: now.Add(25 * time.Second), Remaining: 25 * time.Second},
		},
		Queue: []lock.Queued{
			{Owner: `migrator <i>"1"</i>`, Mode: lock.Exclusive, WaitingSince: now.Add(-3 * time.Second)},
			{Owner: "reader-3", Mode: lock.Shared, WaitingSince: now.Add(-1 * time.Second)},
		},
	}
}

// semState is a semaphore with two of its three permits held and one
// request waiting.
func semState() lock.State {
	now := goldenNow
	return lock.State{
		Resource: lock.Semaphore("pool:gpu"), Mode: lock.Permit, Limit: 3, Owner: "job-8", Fence: 1763805600000061, Count: 1,
		TTL: time.Minute, Remaining: 50 * time.Second, AcquiredAt: now.Add(-10 * time.Second),
		ExpiresAt: now.Add(50 * time.Second), Waiters: 1,
		Holders: []lock.Holder{
			{Owner: "job-7", Mode: lock.Permit, Fence: 1763805600000060, Count: 1, TTL: time.Minute,
				AcquiredAt: now.Add(-55 * time.Second), ExpiresAt: now.Add(5 * time.Second), Remaining: 5 * time.Second},
			{Owner: "job-8", Mode: lock.Permit, Fence: 1763805600000061, Count: 1, TTL: time.Minute,
				AcquiredAt: now.Add(-10 * time.Second), ExpiresAt: now.Add(50 * time.Second), Remaining: 50 * time.Second},
		},
		Queue: []lock.Queued{{Owner: "job-9", Mode: lock.Permit, WaitingSince: now.Add(-2 * time.Second)}},
	}
}

// TestDetailPage_HoldersAndQueueGolden is a shared lock's page: both
// holders with their own fence and TTL, and the queue in grant order.
func TestDetailPage_HoldersAndQueueGolden(t *testing.T) {
	events := []lock.Event{
		{Type: "acquired", At: goldenNow.Add(-5 * time.Second), Owner: "reader-2", Fence: 1763805600000051, TTL: 30 * time.Second, Count: 1},
		{Type: "acquired", At: goldenNow.Add(-40 * time.Second), Owner: "reader-1", Fence: 1763805600000050, TTL: time.Minute, Count: 1},
	}
	v := newDetailView("reports:db", sharedState(), true, events, goldenNow, true)
	var buf bytes.Buffer
	if err := detailPage(v).Render(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	golden(t, "detail-shared.golden.html", buf.Bytes())
}

// TestSemaphorePages_Golden is the semaphores list (one full, one not)
// and a semaphore's page.
func TestSemaphorePages_Golden(t *testing.T) {
	full := lock.State{
		Resource: lock.Semaphore("pool:db"), Mode: lock.Permit, Limit: 1, Owner: "migrator", Fence: 1763805600000070, Count: 1,
		TTL: 10 * time.Minute, Remaining: 9 * time.Minute, AcquiredAt: goldenNow.Add(-time.Minute), ExpiresAt: goldenNow.Add(9 * time.Minute),
	}
	v := newSemListView(lock.Page{Locks: []lock.State{full, semState()}}, "pool:", "", goldenNow, true)
	var buf bytes.Buffer
	if err := semListPage(v).Render(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	golden(t, "semaphores.golden.html", buf.Bytes())

	d := newKindDetailView(semaphores, "pool:gpu", semState(), true, nil, goldenNow, true)
	buf.Reset()
	if err := detailPage(d).Render(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	golden(t, "semaphore-detail.golden.html", buf.Bytes())
}

// electState is an election led by host-a with a value, one candidate in
// line.
func electState() lock.State {
	now := goldenNow
	return lock.State{
		Resource: lock.Election("billing:leader"), Mode: lock.Exclusive, Owner: "host-a", Fence: 1763805600000081, Count: 1,
		TTL: 10 * time.Second, Remaining: 8 * time.Second, AcquiredAt: now.Add(-2 * time.Minute), ExpiresAt: now.Add(8 * time.Second),
		Value: `{"addr":"10.0.0.7:8080","state":"<serving>"}`, Waiters: 1,
		Queue: []lock.Queued{{Owner: "host-b", Mode: lock.Exclusive, WaitingSince: now.Add(-90 * time.Second)}},
	}
}

// TestElectionPages_Golden is the elections list (one with a value, one
// without) and an election's page with its terms: the current one with a
// proclaim, one resigned, one force-released and one expired.
func TestElectionPages_Golden(t *testing.T) {
	bare := lock.State{
		Resource: lock.Election("search:leader"), Mode: lock.Exclusive, Owner: "host-c", Fence: 1763805600000090, Count: 1,
		TTL: time.Minute, Remaining: 45 * time.Second, AcquiredAt: goldenNow.Add(-15 * time.Second), ExpiresAt: goldenNow.Add(45 * time.Second),
	}
	v := newElectListView(lock.Page{Locks: []lock.State{electState(), bare}}, "", "", goldenNow, true)
	var buf bytes.Buffer
	if err := electListPage(v).Render(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	golden(t, "elections.golden.html", buf.Bytes())

	at := func(d time.Duration) time.Time { return goldenNow.Add(-d) }
	events := []lock.Event{
		{Type: "proclaimed", At: at(time.Minute), Owner: "host-a", Fence: 1763805600000081, TTL: 10 * time.Second, Count: 1, Actor: "host-a"},
		{Type: "acquired", At: at(2 * time.Minute), Owner: "host-a", Fence: 1763805600000081, TTL: 10 * time.Second, Count: 1, Actor: "host-a"},
		{Type: "force_released", At: at(2 * time.Minute), Owner: `host-<z>`, Fence: 1763805600000080, TTL: 10 * time.Second, Actor: "ops", Reason: "hung"},
		{Type: "acquired", At: at(5 * time.Minute), Owner: `host-<z>`, Fence: 1763805600000080, TTL: 10 * time.Second, Count: 1, Actor: "host-z"},
		{Type: "expired", At: at(6 * time.Minute), Owner: "host-b", Fence: 1763805600000079, TTL: 10 * time.Second},
		{Type: "released", At: at(8 * time.Minute), Owner: "host-a", Fence: 1763805600000078, Actor: "host-a"},
		{Type: "acquired", At: at(9 * time.Minute), Owner: "host-a", Fence: 1763805600000078, TTL: 10 * time.Second, Count: 1, Actor: "host-a"},
	}
	d := newKindDetailView(elections, "billing:leader", electState(), true, events, goldenNow, true)
	buf.Reset()
	if err := detailPage(d).Render(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	golden(t, "election-detail.golden.html", buf.Bytes())
}
