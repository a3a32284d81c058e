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
// After an intended change: go test ./web -run Golden -update
func TestListPage_Golden(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	states := []lock.State{
		{
			Key: "deploy:prod", Owner: "ci-runner-7", Fence: 1763805600000042, Count: 1,
			TTL: 30 * time.Second, Remaining: 12*time.Second + 400*time.Millisecond,
			AcquiredAt: now.Add(-3*time.Minute - 2*time.Second), RenewedAt: now.Add(-17600 * time.Millisecond),
			ExpiresAt: now.Add(12*time.Second + 400*time.Millisecond), Renewals: 9, Waiters: 2,
		},
		{
			Key: "order:pay:12345", Owner: `worker <b>"9"</b>`, Fence: 1763805600000043, Count: 2,
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
		t.Errorf("%s differs from the rendered page; if the change is intended, run go test ./web -run Golden -update\ngot:\n%s", path, got)
	}
}
