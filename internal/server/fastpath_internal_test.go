package server

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
)

// leaseOps writes its 200 answers itself (writeOK): status, headers and
// body must be byte for byte those of the generated Visit…Response, so
// that a client sees nothing of the shorter path.
func TestLeaseOpsAnswersAsGenerated(t *testing.T) {
	at := time.Date(2026, 11, 29, 4, 5, 6, 789_000_000, time.UTC)
	limit, yes, replayed := 3, true, "true"
	lease := api.Lease{
		AcquiredAt: at, ExpiresAt: at.Add(30 * time.Second), Count: 2, Fence: 41,
		Key: "order:<pay>&1", Mode: api.GrantModeExclusive, Owner: "worker \"7\"",
		Token: "tok-en", TtlMs: 30000,
	}
	permit := lease
	permit.Mode, permit.Limit, permit.Replayed = api.GrantModePermit, &limit, &yes
	tests := []struct {
		name      string
		generated func(http.ResponseWriter) error
		fast      func(http.ResponseWriter) error
	}{
		{"acquire", api.AcquireLock200JSONResponse{Body: lease}.VisitAcquireLockResponse,
			func(w http.ResponseWriter) error { return writeOK(w, &lease, nil) }},
		{"acquire, replayed", api.AcquireLock200JSONResponse{Body: permit, Headers: api.AcquireLock200ResponseHeaders{IdempotentReplayed: &replayed}}.VisitAcquireLockResponse,
			func(w http.ResponseWriter) error {
				return writeOK(w, &permit, http.Header{"Idempotent-Replayed": {replayed}})
			}},
		{"renew", api.RenewLock200JSONResponse(lease).VisitRenewLockResponse,
			func(w http.ResponseWriter) error {
				v := api.RenewLock200JSONResponse(lease)
				return writeOK(w, &v, nil)
			}},
		{"release", api.ReleaseLock200JSONResponse{Key: "a&b", Count: 1}.VisitReleaseLockResponse,
			func(w http.ResponseWriter) error {
				v := api.ReleaseLock200JSONResponse{Key: "a&b", Count: 1}
				return writeOK(w, &v, nil)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Twice: the second answer comes from a pooled encoder.
			for range 2 {
				want, got := httptest.NewRecorder(), httptest.NewRecorder()
				if err := tt.generated(want); err != nil {
					t.Fatal(err)
				}
				if err := tt.fast(got); err != nil {
					t.Fatal(err)
				}
				if got.Code != want.Code || got.Body.String() != want.Body.String() {
					t.Fatalf("got %d %q, want %d %q", got.Code, got.Body, want.Code, want.Body)
				}
				if len(got.Header()) != len(want.Header()) {
					t.Fatalf("headers %v, want %v", got.Header(), want.Header())
				}
				for k, v := range want.Header() {
					if g := got.Header()[k]; len(g) != len(v) || g[0] != v[0] {
						t.Fatalf("header %s: %q, want %q", k, g, v)
					}
				}
			}
		})
	}
}

// writeOK's bytes are encoding/json's for every answer it writes, over
// values with what JSON escapes (HTML, U+2028, quotes, control
// characters, bad UTF-8), times in any zone and to the nanosecond, and
// every optional field set or not.
func TestAnswerBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	texts := []string{"", "k", "order:<pay>&1", `a "quoted" \ one`, "tab\there", "\x01\x1f", "line\u2028sep\u2029",
		"é🔒ü", "bad\xffutf8\xc3", "</script>", strings.Repeat("x", 300)}
	text := func() string { return texts[rng.IntN(len(texts))] }
	zones := []*time.Location{time.UTC, time.FixedZone("", 5*3600+1800), time.FixedZone("X", -7*3600)}
	when := func() time.Time {
		if rng.IntN(8) == 0 {
			return time.Time{}
		}
		return time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)).In(zones[rng.IntN(len(zones))])
	}
	for i := range 2000 {
		l := api.Lease{
			AcquiredAt: when(), ExpiresAt: when(), Count: rng.IntN(1 << 20), Fence: rng.Int64() - rng.Int64(),
			Key: text(), Mode: api.GrantMode(text()), Owner: text(), Token: text(), TtlMs: rng.Int64N(1 << 40),
		}
		if rng.IntN(2) == 0 {
			n := rng.IntN(100) - 50
			l.Limit = &n
		}
		if rng.IntN(2) == 0 {
			p := text()
			l.Proof = &p
		}
		if rng.IntN(2) == 0 {
			yes := rng.IntN(2) == 0
			l.Replayed = &yes
		}
		if rng.IntN(2) == 0 {
			l.ReleaseRequested = &api.ReleaseRequested{At: when(), By: text(), Reason: text()}
		}
		renew := api.RenewLock200JSONResponse(l)
		release := api.ReleaseLock200JSONResponse{Key: text(), Count: rng.IntN(5), Released: rng.IntN(2) == 0}
		for _, v := range []any{&l, &renew, &release} {
			var want bytes.Buffer
			if err := json.NewEncoder(&want).Encode(v); err != nil {
				t.Fatal(err)
			}
			got := httptest.NewRecorder()
			if err := writeOK(got, v, nil); err != nil {
				t.Fatal(err)
			}
			if got.Body.String() != want.String() {
				t.Fatalf("value %d: writeOK wrote\n%s\nencoding/json\n%s", i, got.Body, want.String())
			}
		}
	}
}
