package server

import (
	"net/http"
	"net/http/httptest"
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
