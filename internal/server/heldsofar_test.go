package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lockd/lockd/api"
)

// A renewal reports how long its lease has been held so far, so that a lock
// held too long is seen while it is held.
func TestRenewalReportsHeldSoFar(t *testing.T) {
	f := newFixture(t)
	l := f.acquire(t, "batch:nightly", api.AcquireRequest{Owner: ptr("job")})
	if _, err := f.client.RenewLockWithResponse(context.Background(), "batch:nightly", api.RenewRequest{Token: l.Token}); err != nil {
		t.Fatal(err)
	}
	res, err := http.Get(f.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if !strings.Contains(string(body), `lockd_held_at_renewal_seconds_count{kind="lock",prefix="batch:"} 1`) {
		t.Fatalf("no held-so-far sample for the renewal in:\n%s", grep(string(body), "held_at_renewal"))
	}
}

func grep(text, sub string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
