package lock

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// Without a scope (auth off) a session's handle is what it was before
// sessions had scopes, so that live sessions survive an upgrade; with one,
// it differs for each scope.
func TestSessionHandleScopes(t *testing.T) {
	id := "AJKyq3Tz0fN6wP2mLr8cVb4sXe1dEXf9"
	sum := sha256.Sum256([]byte("lockd session\x00" + id))
	if got, want := sessionHandle("", id), hex.EncodeToString(sum[:16]); got != want {
		t.Fatalf("unscoped handle %s, before scopes %s", got, want)
	}
	seen := map[string]string{}
	for _, scope := range []string{"", "a", "b", "tenant-a", "tenant-a\x00x"} {
		h := sessionHandle(scope, id)
		if other, ok := seen[h]; ok {
			t.Fatalf("scopes %q and %q share handle %s", scope, other, h)
		}
		seen[h] = scope
	}
}
