package auth_test

import (
	"testing"

	"github.com/lockd/lockd/internal/auth"
)

func TestByNameAndFingerprint(t *testing.T) {
	parse := func(yaml string) *auth.Keyring {
		t.Helper()
		r, err := auth.Parse([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := parse(`
keys:
  - {name: ops, key: "ops-secret-0123456789", scopes: [admin]}
  - {name: ci, key: "ci-secret-0123456789", scopes: [write], prefixes: ["ci:"]}
`)
	k, ok := r.ByName("ci")
	if !ok || k.Name != "ci" || k.Scope != auth.Write || len(k.Prefixes) != 1 {
		t.Fatalf("ByName(ci) = %+v, %v", k, ok)
	}
	if _, ok := r.ByName("nobody"); ok {
		t.Error("ByName found a key that is not configured")
	}
	if _, ok := (*auth.Keyring)(nil).ByName("ops"); ok {
		t.Error("a nil keyring found a key")
	}

	ops, _ := r.ByName("ops")
	looked, _ := r.Lookup("ops-secret-0123456789")
	if ops.Fingerprint() != looked.Fingerprint() {
		t.Error("the same key has two fingerprints")
	}
	if ops.Fingerprint() == k.Fingerprint() {
		t.Error("two keys share a fingerprint")
	}
	rotated, _ := parse(`
keys:
  - {name: ops, key: "ops-new-secret-0123456789", scopes: [admin]}
`).ByName("ops")
	if rotated.Fingerprint() == ops.Fingerprint() {
		t.Error("replacing a key's secret kept its fingerprint")
	}
}
