package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestRangeErrorsSayDurations: a millisecond field out of range says the
// bounds and the value as durations too, so that `lockd acquire --ttl
// 100h` reads "got 360000000 (100h0m0s)" (newcomer #12); a value too large
// for a duration still gets a 400, never a panic.
func TestRangeErrorsSayDurations(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct{ body, field, want string }{
		{`{"ttl_ms":360000000}`, "ttl_ms", "must be between 100 and 86400000 (100ms and 24h0m0s), got 360000000 (100h0m0s)"},
		{`{"ttl_ms":5}`, "ttl_ms", "got 5 (5ms)"},
		{`{"ttl_ms":9223372036854775807}`, "ttl_ms", "got 9223372036854775807 (9223372036854775807 ms)"},
		{`{"wait_ms":-1}`, "wait_ms", "got -1 (-1 ms)"},
	} {
		res, body, err := do(http.MethodPost, f.url+"/v1/locks/dur:k/acquire", "application/json", c.body)
		if err != nil {
			t.Fatal(err)
		}
		var p struct{ Detail, Field string }
		_ = json.Unmarshal(body, &p)
		if res.StatusCode != http.StatusBadRequest || p.Field != c.field || !strings.Contains(p.Detail, c.want) {
			t.Errorf("%s: %d %s, want 400 on %s saying %q", c.body, res.StatusCode, body, c.field, c.want)
		}
	}
}
