package web

import (
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
)

// The detail page shows each holder's value, as text: markup in a value
// is never markup on the page. Without values there is no Value column.
func TestHolderValuesShown(t *testing.T) {
	e := newEnv(t)
	e.acquireReq(lock.Lock("val:x"), lock.AcquireRequest{Owner: "w", TTL: time.Minute, Value: `{"note":"<b>hi</b>"}`})
	p := e.get("/ui/locks/val:x")
	if got := text(p.doc.Find(`[data-testid="holder-value"]`)); got != `{"note":"<b>hi</b>"}` {
		t.Fatalf("holder value %q\n%s", got, p.body)
	}
	if strings.Contains(p.body, "<b>hi</b>") {
		t.Fatal("a value's markup reached the page unescaped")
	}
	e.acquire("val:none", "w", time.Minute)
	if p := e.get("/ui/locks/val:none"); p.doc.Find(`[data-testid="holder-value"]`).Length() != 0 {
		t.Fatal("a Value column without values")
	}
}
