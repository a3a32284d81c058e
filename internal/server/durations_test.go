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
	// max_ms: the bound a value above it broke, so that a client may wait
	// in rounds of the server's longest wait (issue 35, item 2).
	for _, c := range []struct {
		body, field, want string
		max               int64
	}{
		{`{"ttl_ms":360000000}`, "ttl_ms", "must be between 100 and 86400000 (100ms and 24h0m0s), got 360000000 (100h0m0s)", 86400000},
		{`{"ttl_ms":5}`, "ttl_ms", "got 5 (5ms)", 0},
		{`{"ttl_ms":9223372036854775807}`, "ttl_ms", "got 9223372036854775807 (9223372036854775807 ms)", 86400000},
		{`{"wait_ms":-1}`, "wait_ms", "got -1 (-1 ms)", 0},
		{`{"wait_ms":600000}`, "wait_ms", "must be between 0 and 60000 (0s and 1m0s), got 600000 (10m0s)", 60000},
	} {
		res, body, err := do(http.MethodPost, f.url+"/v1/locks/dur:k/acquire", "application/json", c.body)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Detail, Field string
			MaxMs         int64 `json:"max_ms"`
		}
		_ = json.Unmarshal(body, &p)
		if res.StatusCode != http.StatusBadRequest || p.Field != c.field || !strings.Contains(p.Detail, c.want) || p.MaxMs != c.max {
			t.Errorf("%s: %d %s, want 400 on %s saying %q", c.body, res.StatusCode, body, c.field, c.want)
		}
	}
}
