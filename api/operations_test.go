package api_test

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/lockd/lockd/api"
)

// The policy table read from openapi.yaml: every operation, its scope and
// whether it takes a body. A scope changed in the document shows up here.
func TestOperations(t *testing.T) {
	want := map[string]api.Operation{
		"acquireLock":      {Method: "POST", Path: "/v1/locks/{key}/acquire", Scope: "write", Kind: "lock", Body: true},
		"renewLock":        {Method: "POST", Path: "/v1/locks/{key}/renew", Scope: "write", Kind: "lock", Body: true},
		"releaseLock":      {Method: "POST", Path: "/v1/locks/{key}/release", Scope: "write", Kind: "lock", Body: true},
		"forceReleaseLock": {Method: "POST", Path: "/v1/locks/{key}/force-release", Scope: "admin", Kind: "lock", Body: true},
		"holdLock":         {Method: "POST", Path: "/v1/locks/{key}/hold", Scope: "write", Kind: "lock", Body: true},
		// Asking the holder to step aside is a write, as taking the key is.
		"requestReleaseLock": {Method: "POST", Path: "/v1/locks/{key}/request-release", Scope: "write", Kind: "lock", Body: true},
		"getLock":            {Method: "GET", Path: "/v1/locks/{key}", Scope: "read", Kind: "lock"},
		"listLocks":          {Method: "GET", Path: "/v1/locks", Scope: "read", Kind: "lock"},
		"getLockHistory":     {Method: "GET", Path: "/v1/locks/{key}/history", Scope: "read", Kind: "lock"},
		// Semaphores: the same scopes as locks.
		"acquireSemaphore":      {Method: "POST", Path: "/v1/semaphores/{key}/acquire", Scope: "write", Kind: "semaphore", Body: true},
		"renewSemaphore":        {Method: "POST", Path: "/v1/semaphores/{key}/renew", Scope: "write", Kind: "semaphore", Body: true},
		"releaseSemaphore":      {Method: "POST", Path: "/v1/semaphores/{key}/release", Scope: "write", Kind: "semaphore", Body: true},
		"forceReleaseSemaphore": {Method: "POST", Path: "/v1/semaphores/{key}/force-release", Scope: "admin", Kind: "semaphore", Body: true},
		"holdSemaphore":         {Method: "POST", Path: "/v1/semaphores/{key}/hold", Scope: "write", Kind: "semaphore", Body: true},
		"getSemaphore":          {Method: "GET", Path: "/v1/semaphores/{key}", Scope: "read", Kind: "semaphore"},
		"listSemaphores":        {Method: "GET", Path: "/v1/semaphores", Scope: "read", Kind: "semaphore"},
		"getSemaphoreHistory":   {Method: "GET", Path: "/v1/semaphores/{key}/history", Scope: "read", Kind: "semaphore"},
		// Elections: the same scopes as locks.
		"campaign":             {Method: "POST", Path: "/v1/elections/{key}/campaign", Scope: "write", Kind: "election", Body: true},
		"campaignHold":         {Method: "POST", Path: "/v1/elections/{key}/campaign/hold", Scope: "write", Kind: "election", Body: true},
		"proclaim":             {Method: "POST", Path: "/v1/elections/{key}/proclaim", Scope: "write", Kind: "election", Body: true},
		"renewLeadership":      {Method: "POST", Path: "/v1/elections/{key}/renew", Scope: "write", Kind: "election", Body: true},
		"resign":               {Method: "POST", Path: "/v1/elections/{key}/resign", Scope: "write", Kind: "election", Body: true},
		"forceReleaseElection": {Method: "POST", Path: "/v1/elections/{key}/force-release", Scope: "admin", Kind: "election", Body: true},
		"getElection":          {Method: "GET", Path: "/v1/elections/{key}", Scope: "read", Kind: "election"},
		"listElections":        {Method: "GET", Path: "/v1/elections", Scope: "read", Kind: "election"},
		"getElectionHistory":   {Method: "GET", Path: "/v1/elections/{key}/history", Scope: "read", Kind: "election"},
		"observeElection":      {Method: "GET", Path: "/v1/elections/{key}/observe", Scope: "read", Kind: "election"},
		"livez":                {Method: "GET", Path: "/livez", Scope: "none"},
		"createSession":        {Method: "POST", Path: "/v1/sessions", Scope: "write", Body: true},
		"getSession":           {Method: "GET", Path: "/v1/sessions/{id}", Scope: "write"},
		"renewSession":         {Method: "POST", Path: "/v1/sessions/{id}/renew", Scope: "write"},
		"endSession":           {Method: "DELETE", Path: "/v1/sessions/{id}", Scope: "write"},
		"endSessionPost":       {Method: "POST", Path: "/v1/sessions/{id}/end", Scope: "write"},
		"holdSession":          {Method: "POST", Path: "/v1/sessions/{id}/hold", Scope: "write"},
		"healthz":              {Method: "GET", Path: "/healthz", Scope: "none"},
		"readyz":               {Method: "GET", Path: "/readyz", Scope: "none"},
		"getMetrics":           {Method: "GET", Path: "/metrics", Scope: "read"},
		"getOpenAPI":           {Method: "GET", Path: "/openapi.yaml", Scope: "none"},
		"streamEvents":         {Method: "GET", Path: "/v1/events", Scope: "read"},
		"endQuarantine":        {Method: "POST", Path: "/v1/admin/quarantine/end", Scope: "admin", Body: true},
		// A leader hands over with its token: write, as resign.
		"handover": {Method: "POST", Path: "/v1/elections/{key}/handover", Scope: "write", Kind: "election", Body: true},
		// Lock sets: writes, as a lock's operations; their keys are in the
		// body (each checked against the caller's prefixes), so no kind.
		"acquireLockSet": {Method: "POST", Path: "/v1/lock-sets/acquire", Scope: "write", Body: true},
		"renewLockSet":   {Method: "POST", Path: "/v1/lock-sets/renew", Scope: "write", Body: true},
		"releaseLockSet": {Method: "POST", Path: "/v1/lock-sets/release", Scope: "write", Body: true},
		"holdLockSet":    {Method: "POST", Path: "/v1/lock-sets/hold", Scope: "write", Body: true},
	}
	ops := api.Operations()
	if len(ops) != len(want) {
		t.Errorf("%d operations, want %d: %+v", len(ops), len(want), ops)
	}
	for _, op := range ops {
		w, ok := want[op.ID]
		w.ID = op.ID
		if !ok || op != w {
			t.Errorf("operation %+v, want %+v", op, w)
		}
		if got, ok := api.OperationFor(op.Method, op.Path); !ok || got != op {
			t.Errorf("OperationFor(%s, %s) = %+v, %v", op.Method, op.Path, got, ok)
		}
	}
	if _, ok := api.OperationFor(http.MethodGet, "/v1/locks/{key}/acquire"); ok {
		t.Error("OperationFor found an operation for a method the path does not have")
	}
}

// Every route the generated code registers finds its operation by the
// route pattern that chi reports, which is how the server looks it up.
func TestGeneratedRoutesHaveOperations(t *testing.T) {
	r := chi.NewRouter()
	api.HandlerWithOptions(nil, api.ChiServerOptions{BaseRouter: r})
	n := 0
	err := chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		n++
		if _, ok := api.OperationFor(method, route); !ok {
			t.Errorf("route %s %s has no operation in openapi.yaml", method, route)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every operation but /metrics and /openapi.yaml, which the server
	// serves itself.
	if want := len(api.Operations()) - 2; n != want {
		t.Errorf("%d generated routes, want %d", n, want)
	}
}
