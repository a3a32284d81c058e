package lock

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// setClaim is a set of n keys named as users name them
// ("account:<n>"), with fences as lockd makes them.
func setClaim(n int, now time.Time) SetClaim {
	c := SetClaim{Mode: "x", Owner: "transfer-17", ExpiresMS: now.Add(30 * time.Second).UnixMilli(), TTL: 30 * time.Second,
		Value: `{"job":1}`}
	for i := range n {
		// Fences as lockd's clock makes them; a set's keys granted in a few
		// calls.
		c.Keys = append(c.Keys, SetKey{Key: fmt.Sprintf("account:%d", 1000+i*37), Fence: 1_795_945_707_842_817 + int64(i/8*300)})
	}
	return c
}

func sameSetClaim(a, b SetClaim) bool {
	return a.Mode == b.Mode && a.Owner == b.Owner && bytes.Equal(a.OwnerDigest, b.OwnerDigest) && a.ExpiresMS == b.ExpiresMS &&
		a.TTL == b.TTL && slices.Equal(a.Keys, b.Keys) && a.Value == b.Value && bytes.Equal(a.ValueDigest, b.ValueDigest) &&
		a.ValueUnknown == b.ValueUnknown
}

func TestSetProofRoundTrip(t *testing.T) {
	now := time.Now()
	s := testSigner(t, secretA)
	shared := setClaim(3, now)
	shared.Mode, shared.Value, shared.ValueUnknown = "s", "", true
	unsorted := setClaim(2, now)
	unsorted.Keys = []SetKey{{Key: "zeta", Fence: math.MaxInt64}, {Key: "alpha", Fence: 0}, {Key: "beta", Fence: math.MaxInt64}}
	digests := setClaim(4, now)
	digests.Value, digests.ValueDigest = "", bytes.Repeat([]byte{7}, digestLen)
	for _, c := range []SetClaim{setClaim(2, now), setClaim(MaxSetKeys, now), shared, unsorted, digests} {
		p := s.SignSet(c, "tok")
		got, err := s.VerifySet(p, "tok", now)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if !sameSetClaim(got, c) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, c)
		}
	}
}

// TestSetProofSize measures set proofs by their keys (the figures in
// docs/api.md) and holds the largest legal set to MaxSetProof.
func TestSetProofSize(t *testing.T) {
	now := time.Now()
	s := testSigner(t, secretA)
	for _, c := range []struct {
		keys int
		most int
	}{{2, 120}, {4, 140}, {64, 600}} {
		p := s.SignSet(setClaim(c.keys, now), strings.Repeat("t", 32))
		t.Logf("a set of %d keys (account:NNNN): a proof of %d characters", c.keys, len(p))
		if len(p) > c.most {
			t.Errorf("a set of %d keys: a proof of %d characters, more than %d", c.keys, len(p), c.most)
		}
	}

	largest := SetClaim{Mode: "s", Owner: strings.Repeat("😀", 128), ExpiresMS: math.MaxInt64, TTL: time.Duration(math.MaxInt64),
		Value: `"` + strings.Repeat("v", MaxValue-2) + `"`}
	for i := range MaxSetKeys {
		// Keys that share no prefix.
		key := string(rune('A'+i%26)) + string(rune('a'+i/26)) + strings.Repeat("k", MaxKeyLen-2)
		// Fences as far apart as can be: each one's distance takes 10 bytes.
		largest.Keys = append(largest.Keys, SetKey{Key: key, Fence: int64(i%2) * math.MaxInt64})
	}
	p := s.SignSet(largest, "t")
	t.Logf("the largest set: a proof of %d characters", len(p))
	if len(p) > MaxSetProof {
		t.Fatalf("the largest set's proof has %d characters, more than MaxSetProof %d", len(p), MaxSetProof)
	}
	got, err := s.VerifySet(p, "t", now)
	if err != nil {
		t.Fatal(err)
	}
	if got.Owner != "" || len(got.OwnerDigest) != digestLen || got.Value != "" || len(got.ValueDigest) != digestLen ||
		!slices.Equal(got.Keys, largest.Keys) {
		t.Fatalf("an owner and a value too long to carry go as digests, the keys whole: %+v", got)
	}
	// An owner of 128 ASCII characters goes whole, and a value of 16
	// bytes beside it.
	c := setClaim(2, now)
	c.Owner, c.Value = strings.Repeat("o", 128), `"`+strings.Repeat("v", 14)+`"`
	if got, err := s.VerifySet(s.SignSet(c, "t"), "t", now); err != nil || got.Owner != c.Owner || got.Value != c.Value {
		t.Fatalf("owner %q value %q (%v): want both whole", got.Owner, got.Value, err)
	}
}

// TestSetProofRefusals has one row per reason a set proof restores
// nothing.
func TestSetProofRefusals(t *testing.T) {
	now := time.Now()
	c := setClaim(3, now)
	signedA := testSigner(t, secretA).SignSet(c, "tok")
	raw, _ := base64.RawURLEncoding.DecodeString(signedA)
	withRaw := func(f func([]byte) []byte) string {
		return base64.RawURLEncoding.EncodeToString(f(bytes.Clone(raw)))
	}
	flip := func(i int) string {
		return withRaw(func(b []byte) []byte { b[i] ^= 1; return b })
	}
	expired := c
	expired.ExpiresMS = now.UnixMilli()
	lease := testSigner(t, secretA).Sign(Claim{Resource: "account:1000", Mode: "x", Fence: 1, Count: 1,
		ExpiresMS: c.ExpiresMS, TTL: c.TTL}, "tok")
	for _, tc := range []struct {
		name     string
		verifier *Signer
		proof    string
		token    string
		want     error
	}{
		{"empty", testSigner(t, secretA), "", "tok", ErrProofMalformed},
		{"not base64url", testSigner(t, secretA), "!!" + signedA, "tok", ErrProofMalformed},
		{"too long", testSigner(t, secretA), strings.Repeat("A", MaxSetProof+1), "tok", ErrProofMalformed},
		{"a lease's proof", testSigner(t, secretA), lease, "tok", ErrProofMalformed},
		{"unknown flags", testSigner(t, secretA), withRaw(func(b []byte) []byte { b[1+proofIDLen] |= 0x80; return b }), "tok", ErrProofMalformed},
		{"bytes left over", testSigner(t, secretA), withRaw(func(b []byte) []byte {
			return append(b[:len(b)-proofMACLen:len(b)-proofMACLen], append([]byte{0}, b[len(b)-proofMACLen:]...)...)
		}), "tok", ErrProofMalformed},
		{"cut short", testSigner(t, secretA), withRaw(func(b []byte) []byte { return b[:len(b)-proofMACLen-3] }), "tok", ErrProofMalformed},
		{"altered fence", testSigner(t, secretA), flip(len(raw) - proofMACLen - 12), "tok", ErrBadProof},
		{"altered MAC", testSigner(t, secretA), flip(len(raw) - 1), "tok", ErrProofForged},
		{"another token", testSigner(t, secretA), signedA, "tok2", ErrProofForged},
		{"a retired secret", testSigner(t, secretB), signedA, "tok", ErrProofRetired},
		{"a forger's secret under a known id", forgedID(t), signedA, "tok", ErrProofForged},
		{"expired", testSigner(t, secretA), testSigner(t, secretA).SignSet(expired, "tok"), "tok", ErrProofExpired},
		{"no signer", nil, signedA, "tok", ErrProofRetired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.verifier.VerifySet(tc.proof, tc.token, now)
			if !errors.Is(err, tc.want) || !errors.Is(err, ErrBadProof) {
				t.Fatalf("VerifySet: %v, want %v", err, tc.want)
			}
		})
	}
	// A rotation: signed with the previous secret, still accepted.
	if _, err := testSigner(t, secretB, secretA).VerifySet(signedA, "tok", now); err != nil {
		t.Fatalf("a proof signed with the previous secret: %v", err)
	}
	// A set's proof is no lease's.
	if _, err := testSigner(t, secretA).Verify(signedA, "account:1000", "tok", now); !errors.Is(err, ErrProofMalformed) {
		t.Fatalf("a set's proof verified as a lease's: %v", err)
	}
}
