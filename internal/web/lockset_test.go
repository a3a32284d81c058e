package web

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
)

// A key taken by a lock set is marked so in the list and on its page; a
// lone grant is not.
func TestLockSetMark(t *testing.T) {
	e := newEnv(t)
	set, err := e.engine.AcquireSet(context.Background(), lock.SetRequest{Keys: []string{"set:a", "set:b", "set:c"}, Owner: "mover", TTL: 30 * time.Second, Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.engine.ReleaseSet(context.Background(), set.Token, "test") })
	e.acquire("set:lone", "worker", 30*time.Second)

	p := e.get("/ui/locks/set:b")
	if p.status != http.StatusOK {
		t.Fatalf("status %d", p.status)
	}
	if g := text(p.doc.Find(`[data-testid="state"] [data-testid="set"]`)); g != "one of 3 keys taken together, all or nothing" {
		t.Errorf("the set's mark on the key's page: %q", g)
	}
	list := e.get("/ui/fragments/locks")
	marks := map[string]string{}
	for key, row := range rows(list.doc) {
		marks[key] = text(row.Find(`[data-testid="set"]`))
	}
	if marks["set:a"] != "in a set of 3" || marks["set:lone"] != "" {
		t.Errorf("marks in the list: %v", marks)
	}
}
