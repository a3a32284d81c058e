package server

import (
	"testing"

	"github.com/lockd/lockd/api"
)

// Each operation that takes a body, and no other, has its body type
// (api.NewRequestBody, generated from openapi.yaml): a new operation
// cannot slip past the strict body check.
func TestBodyTypes(t *testing.T) {
	for _, op := range api.Operations() {
		ok := api.NewRequestBody(op.ID) != nil
		// getMetrics and getOpenAPI are served by hand, without a body.
		if ok != op.Body {
			t.Errorf("%s: body in openapi.yaml %v, body type %v", op.ID, op.Body, ok)
		}
	}
	if v := api.NewRequestBody("noSuchOperation"); v != nil {
		t.Errorf("NewRequestBody(noSuchOperation) = %T, want nil", v)
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
