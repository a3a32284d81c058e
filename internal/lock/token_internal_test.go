package lock

import "testing"

// TestTokensStartWithALetterOrDigit: a session id (or a token) that began
// with "-" was read as a flag by `lockd session renew ID` (TestCLISession
// failed so, once in about 64 runs).
func TestTokensStartWithALetterOrDigit(t *testing.T) {
	for range 20_000 {
		tok, err := newToken()
		if err != nil {
			t.Fatal(err)
		}
		if len(tok) != 32 || tok[0] == '-' || tok[0] == '_' {
			t.Fatalf("token %q", tok[:1]+"…")
		}
	}
}
