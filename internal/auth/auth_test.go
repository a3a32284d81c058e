package auth_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/lockd/lockd/internal/auth"
)

func TestParseAndLookup(t *testing.T) {
	sum := sha256.Sum256([]byte("ops-secret-0123456789"))
	r, err := auth.Parse([]byte(`
keys:
  - name: ci-runner
    key: "s3cret-plaintext-key"
    scopes: [write]
    prefixes: ["ci:", "deploy:"]
  - name: ops
    sha256: "` + hex.EncodeToString(sum[:]) + `"
    scopes: [admin]
  - name: viewer
    key: "viewer-key-0123456789"
    scopes: [read]
`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		presented string
		name      string
		scope     auth.Scope
		ok        bool
	}{
		{"s3cret-plaintext-key", "ci-runner", auth.Write, true},
		{"ops-secret-0123456789", "ops", auth.Admin, true},
		{"viewer-key-0123456789", "viewer", auth.Read, true},
		{"s3cret-plaintext-ke", "", 0, false},
		{"", "", 0, false},
		{hex.EncodeToString(sum[:]), "", 0, false}, // the hash is not the key
	}
	for _, tc := range tests {
		k, ok := r.Lookup(tc.presented)
		if ok != (k != nil) {
			t.Errorf("Lookup(%q) = %+v %v", tc.presented, k, ok)
			continue
		}
		if k == nil {
			k = &auth.Key{}
		}
		if ok != tc.ok || k.Name != tc.name || k.Scope != tc.scope {
			t.Errorf("Lookup(%q) = %+v %v", tc.presented, k, ok)
		}
	}
	ci, _ := r.Lookup("s3cret-plaintext-key")
	for lk, want := range map[string]bool{"ci:build:1": true, "deploy:prod": true, "order:1": false, "ci": false} {
		if ci.MayTouch(lk) != want {
			t.Errorf("ci-runner MayTouch(%q) = %v", lk, !want)
		}
	}
	if !ci.Can(auth.Read) || !ci.Can(auth.Write) || ci.Can(auth.Admin) {
		t.Error("write must imply read and not admin")
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"no keys", `keys: []`, "no keys"},
		{"no name", "keys:\n  - key: 0123456789abcdef\n    scopes: [read]", "name is required"},
		{"short key", "keys:\n  - name: a\n    key: short\n    scopes: [read]", "at least 16"},
		{"both", "keys:\n  - name: a\n    key: 0123456789abcdef\n    sha256: ab\n    scopes: [read]", "not both"},
		{"bad hash", "keys:\n  - name: a\n    sha256: xyz\n    scopes: [read]", "64 hex"},
		{"bad scope", "keys:\n  - name: a\n    key: 0123456789abcdef\n    scopes: [root]", "unknown scope"},
		{"no scope", "keys:\n  - name: a\n    key: 0123456789abcdef", "scopes is required"},
		{"unknown field", "keys:\n  - name: a\n    key: 0123456789abcdef\n    scopes: [read]\n    role: x", "role"},
		{"duplicate name", "keys:\n  - name: a\n    key: 0123456789abcdef\n    scopes: [read]\n  - name: a\n    key: 0123456789abcdeg\n    scopes: [read]", "used twice"},
		{"duplicate key", "keys:\n  - name: a\n    key: 0123456789abcdef\n    scopes: [read]\n  - name: b\n    key: 0123456789abcdef\n    scopes: [read]", "same key"},
		{"negative quota", "keys:\n  - name: a\n    key: 0123456789abcdef\n    scopes: [read]\n    max_event_streams: -1", "must not be negative"},
		{"negative grants", "keys:\n  - name: a\n    key: 0123456789abcdef\n    scopes: [read]\n    max_grants: -1", "must not be negative"},
		{"max_ttl in ms", "keys:\n  - name: a\n    key: 0123456789abcdef\n    scopes: [read]\n    max_ttl: 3000", "max_ttl must be a duration"},
		{"max_ttl too short", "keys:\n  - name: a\n    key: 0123456789abcdef\n    scopes: [read]\n    max_ttl: 10ms", "at least 100ms"},
		{"empty prefix", "keys:\n  - name: a\n    key: 0123456789abcdef\n    scopes: [read]\n    prefixes: [\"\"]", "empty prefix"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := auth.Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "0123456789abcdef") {
				t.Fatal("the error shows a key")
			}
		})
	}
}

// The example keys shipped for docker compose must stay a valid file.
func TestDeployExampleParses(t *testing.T) {
	b, err := os.ReadFile("../../deploy/auth.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := auth.Parse(b)
	if err != nil || r.Len() != 3 {
		t.Fatalf("deploy/auth.yaml: %v", err)
	}
}

// What a listing walks for a key: all of a prefix it may see, its one
// prefix inside a broader one (so that the pages do not tell how many
// other tenants' names there are), or a filtered walk when several are.
// The API and the dashboard both list by it.
func TestListScope(t *testing.T) {
	key := auth.Key{Prefixes: []string{"ci:", "deploy:"}}
	for _, tc := range []struct {
		key          auth.Key
		prefix, scan string
		filter, ok   bool
	}{
		{auth.Key{}, "", "", false, true},
		{auth.Key{}, "x", "x", false, true},
		{key, "", "", true, true},
		{key, "ci:a", "ci:a", false, true},
		{key, "ci:", "ci:", false, true},
		{key, "c", "ci:", false, true},
		{key, "d", "deploy:", false, true},
		{key, "other", "", false, false},
		{key, "ci", "ci:", false, true},
		{auth.Key{Prefixes: []string{"ci:"}}, "", "ci:", false, true},
	} {
		scan, filter, err := tc.key.ListScope(tc.prefix)
		if scan != tc.scan || filter != tc.filter || (err == nil) != tc.ok {
			t.Errorf("ListScope(%v, %q) = %q %v %v, want %q %v ok=%v", tc.key.Prefixes, tc.prefix, scan, filter, err, tc.scan, tc.filter, tc.ok)
		}
		if err != nil && !errors.Is(err, auth.ErrOutsidePrefixes) {
			t.Errorf("ListScope(%v, %q): %v, want ErrOutsidePrefixes", tc.key.Prefixes, tc.prefix, err)
		}
	}
}
