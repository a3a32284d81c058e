package server

import (
	"testing"

	"github.com/lockd/lockd/api"
)

// Each operation that takes a body, and no other, has its body type: a new
// operation in openapi.yaml cannot slip past the strict body check.
func TestBodyTypes(t *testing.T) {
	seen := 0
	for _, op := range api.Operations() {
		_, ok := bodyTypes[op.ID]
		// getMetrics and getOpenAPI are served by hand, without a body.
		if ok != op.Body {
			t.Errorf("%s: body in openapi.yaml %v, body type %v", op.ID, op.Body, ok)
		}
		if ok {
			seen++
		}
	}
	if seen != len(bodyTypes) {
		t.Errorf("bodyTypes has %d entries, %d of them operations", len(bodyTypes), seen)
	}
}

// Scopes come from x-lockd-scope; anything else needs admin (closed).
func TestRequiredScope(t *testing.T) {
	for scope, want := range map[string]string{"read": "read", "write": "write", "admin": "admin", "": "admin", "bogus": "admin"} {
		if got := requiredScope(api.Operation{Scope: scope}).String(); got != want {
			t.Errorf("requiredScope(%q) = %s, want %s", scope, got, want)
		}
	}
}
