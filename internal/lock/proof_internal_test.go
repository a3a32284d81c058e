package lock

import (
	"bytes"
	"encoding/base64"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func testSigner(t testing.TB, secrets ...string) *Signer {
	t.Helper()
	var prev [][]byte
	for _, s := range secrets[1:] {
		prev = append(prev, []byte(s))
	}
	s, err := NewSigner([]byte(secrets[0]), prev...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var (
	secretA = strings.Repeat("a", 32)
	secretB = strings.Repeat("b", 40)
	secretC = strings.Repeat("c", 32)
)

func sampleClaim(now time.Time) Claim {
	return Claim{
		Resource: Semaphore("pool").id(), Mode: "p", Fence: 42, Owner: "worker-7", Count: 2,
		ExpiresMS: now.Add(30 * time.Second).UnixMilli(), TTL: 30 * time.Second, Limit: 5,
		Session: sessionHandle("", strings.Repeat("s", 32)), Value: `{"job":1}`,
	}
}

func TestProofRoundTrip(t *testing.T) {
	now := time.Now()
	s := testSigner(t, secretA)
	for _, c := range []Claim{
		sampleClaim(now),
		{Resource: Lock("a").id(), Mode: "x", Fence: 1, Owner: "o", Count: 1, ExpiresMS: now.Add(time.Second).UnixMilli(), TTL: time.Second},
		{Resource: Lock("a").id(), Mode: "s", Fence: math.MaxInt64, Owner: "", Count: math.MaxInt32, ExpiresMS: now.Add(time.Second).UnixMilli(), TTL: 24 * time.Hour, ValueUnknown: true},
		{Resource: Election("e").id(), Mode: "x", Fence: 9, Owner: "leader", Count: 1, ExpiresMS: now.Add(time.Minute).UnixMilli(), TTL: time.Minute, ValueDigest: bytes.Repeat([]byte{7}, 16)},
	} {
		p := s.Sign(c, "tok")
		got, err := s.Verify(p, c.Resource, "tok", now)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if got.Resource != c.Resource || got.Mode != c.Mode || got.Fence != c.Fence || got.Owner != c.Owner || got.Count != c.Count ||
			got.ExpiresMS != c.ExpiresMS || got.TTL != c.TTL || got.Limit != c.Limit || got.Session != c.Session ||
			got.Value != c.Value || !bytes.Equal(got.ValueDigest, c.ValueDigest) || got.ValueUnknown != c.ValueUnknown {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, c)
		}
	}
}

// TestProofSize holds the largest legal claim (an owner of 128 four-byte
// characters, a value of MaxValue bytes, every number at its largest, a
// session) to proofBudget, and a common one's value whole.
func TestProofSize(t *testing.T) {
	s := testSigner(t, secretA)
	largest := Claim{
		Resource: Semaphore(strings.Repeat("k", MaxKeyLen)).id(), Mode: "p", Fence: math.MaxInt64, Count: math.MaxInt32,
		Owner: strings.Repeat("😀", 128), ExpiresMS: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli(),
		TTL: 24 * time.Hour, Limit: MaxLimit, Session: sessionHandle("scope", strings.Repeat("s", 32)),
		Value: `"` + strings.Repeat("v", MaxValue-2) + `"`,
	}
	p := s.Sign(largest, strings.Repeat("t", 32))
	t.Logf("largest proof: %d bytes", len(p))
	if len(p) > proofBudget {
		t.Fatalf("the largest claim's proof has %d bytes, more than %d", len(p), proofBudget)
	}
	got, err := s.Verify(p, largest.Resource, strings.Repeat("t", 32), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got.Owner != "" || len(got.OwnerDigest) != digestLen || got.Value != "" || len(got.ValueDigest) != digestLen {
		t.Fatalf("an owner and a value too long to carry go as digests: %+v", got)
	}

	// An owner of 128 ASCII characters goes whole even in the largest
	// claim; a common claim carries a value of 128 bytes whole.
	for _, c := range []Claim{
		{Resource: largest.Resource, Mode: "p", Fence: math.MaxInt64, Count: math.MaxInt32, Owner: strings.Repeat("o", 128),
			ExpiresMS: largest.ExpiresMS, TTL: 24 * time.Hour, Limit: MaxLimit, Session: largest.Session},
		{Resource: Lock("orders:42").id(), Mode: "x", Fence: 1_000_000, Count: 1, Owner: "worker-7",
			ExpiresMS: time.Now().Add(time.Minute).UnixMilli(), TTL: time.Minute, Session: largest.Session,
			Value: `"` + strings.Repeat("v", 126) + `"`},
	} {
		p = s.Sign(c, "t")
		if len(p) > proofBudget {
			t.Fatalf("proof of %d bytes", len(p))
		}
		got, err = s.Verify(p, c.Resource, "t", time.Now())
		if err != nil || got.Owner != c.Owner || got.Value != c.Value {
			t.Fatalf("owner %q value %q (%v): want both whole", got.Owner, got.Value, err)
		}
	}
}

// forgedID is a Signer with another secret under the id of secretA.
func forgedID(t *testing.T) *Signer {
	k := newProofKey([]byte(secretC))
	k.id = testSigner(t, secretA).keys[0].id
	return &Signer{keys: []proofKey{k}}
}

// TestProofRefusals has one row per reason a proof restores nothing.
func TestProofRefusals(t *testing.T) {
	now := time.Now()
	c := sampleClaim(now)
	signedA := testSigner(t, secretA).Sign(c, "tok")
	raw, _ := base64.RawURLEncoding.DecodeString(signedA)
	flip := func(i int) string {
		b := bytes.Clone(raw)
		b[i] ^= 1
		return base64.RawURLEncoding.EncodeToString(b)
	}
	withRaw := func(f func([]byte) []byte) string {
		return base64.RawURLEncoding.EncodeToString(f(bytes.Clone(raw)))
	}
	expired := c
	expired.ExpiresMS = now.UnixMilli()
	for _, tc := range []struct {
		name     string
		verifier *Signer
		proof    string
		resource string
		token    string
		want     error
	}{
		{"empty", testSigner(t, secretA), "", c.Resource, "tok", ErrProofMalformed},
		{"not base64url", testSigner(t, secretA), "!!!" + signedA, c.Resource, "tok", ErrProofMalformed},
		{"padded", testSigner(t, secretA), signedA + "=", c.Resource, "tok", ErrProofMalformed},
		{"too long", testSigner(t, secretA), strings.Repeat("A", maxProofLen+1), c.Resource, "tok", ErrProofMalformed},
		{"truncated", testSigner(t, secretA), signedA[:20], c.Resource, "tok", ErrProofMalformed},
		{"other version", testSigner(t, secretA), withRaw(func(b []byte) []byte { b[0] = 2; return b }), c.Resource, "tok", ErrProofMalformed},
		{"unknown flag", testSigner(t, secretA), withRaw(func(b []byte) []byte { b[9] |= 0x80; return b }), c.Resource, "tok", ErrProofMalformed},
		{"bytes left over", testSigner(t, secretA), withRaw(func(b []byte) []byte {
			return append(append(b[:len(b)-proofMACLen:len(b)-proofMACLen], 0), b[len(b)-proofMACLen:]...)
		}), c.Resource, "tok", ErrProofMalformed},
		{"retired secret", testSigner(t, secretB), signedA, c.Resource, "tok", ErrProofRetired},
		{"no signer", nil, signedA, c.Resource, "tok", ErrProofRetired},
		{"another key", testSigner(t, secretA), signedA, Semaphore("pool2").id(), "tok", ErrProofOtherKey},
		{"another kind", testSigner(t, secretA), signedA, Lock("pool").id(), "tok", ErrProofOtherKey},
		{"another token", testSigner(t, secretA), signedA, c.Resource, "tok2", ErrProofForged},
		{"altered fence", testSigner(t, secretA), flip(10), c.Resource, "tok", ErrProofForged},
		{"altered MAC", testSigner(t, secretA), flip(len(raw) - 1), c.Resource, "tok", ErrProofForged},
		{"same id, other secret", forgedID(t), signedA, c.Resource, "tok", ErrProofForged},
		{"expired", testSigner(t, secretA), testSigner(t, secretA).Sign(expired, "tok"), c.Resource, "tok", ErrProofExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.verifier.Verify(tc.proof, tc.resource, tc.token, now)
			if !errors.Is(err, tc.want) || !errors.Is(err, ErrBadProof) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// TestProofRotation: during a rotation (new current, old previous) both
// verify and new proofs are signed with the new secret; once the old
// one is dropped its proofs are retired.
func TestProofRotation(t *testing.T) {
	now := time.Now()
	c := sampleClaim(now)
	old := testSigner(t, secretA)
	rotating := testSigner(t, secretB, secretA)
	after := testSigner(t, secretB)

	oldProof := old.Sign(c, "tok")
	if _, err := rotating.Verify(oldProof, c.Resource, "tok", now); err != nil {
		t.Fatalf("an old proof during the rotation: %v", err)
	}
	newProof := rotating.Sign(c, "tok")
	if _, err := after.Verify(newProof, c.Resource, "tok", now); err != nil {
		t.Fatalf("a proof signed during the rotation, after it: %v", err)
	}
	if _, err := old.Verify(newProof, c.Resource, "tok", now); !errors.Is(err, ErrProofRetired) {
		t.Fatalf("a new proof on a lockd with the old secret only: %v, want ErrProofRetired", err)
	}
	if _, err := after.Verify(oldProof, c.Resource, "tok", now); !errors.Is(err, ErrProofRetired) {
		t.Fatalf("an old proof after the rotation: %v, want ErrProofRetired", err)
	}
}

func TestNewSignerRefuses(t *testing.T) {
	short := []byte(strings.Repeat("x", MinSecret-1))
	for _, tc := range []struct {
		name string
		cur  []byte
		prev [][]byte
	}{
		{"short current", short, nil},
		{"short previous", []byte(secretA), [][]byte{short}},
		{"three secrets", []byte(secretA), [][]byte{[]byte(secretB), []byte(secretC)}},
	} {
		if _, err := NewSigner(tc.cur, tc.prev...); err == nil {
			t.Errorf("%s: NewSigner took it", tc.name)
		}
	}
	var nilSigner *Signer
	if p := nilSigner.Sign(sampleClaim(time.Now()), "t"); p != "" {
		t.Fatalf("a nil Signer signed %q", p)
	}
}

// FuzzVerify: no input panics Verify, and whatever it accepts signs back
// to the same proof.
func FuzzVerify(f *testing.F) {
	now := time.Now()
	s := testSigner(f, secretA, secretB)
	c := sampleClaim(now)
	f.Add(s.Sign(c, "tok"), "tok")
	f.Add(testSigner(f, secretB).Sign(Claim{Resource: c.Resource, Mode: "x", Owner: strings.Repeat("o", 200), Value: `"x"`}, "tok"), "tok")
	f.Add("", "")
	f.Add("AQ", "tok")
	f.Fuzz(func(t *testing.T, proof, token string) {
		got, err := s.Verify(proof, c.Resource, token, now)
		if err != nil {
			if !errors.Is(err, ErrBadProof) {
				t.Fatalf("an error that is not ErrBadProof: %v", err)
			}
			return
		}
		if got.Resource != c.Resource {
			t.Fatalf("claim of %q", got.Resource)
		}
	})
}

func BenchmarkProof(b *testing.B) {
	s := testSigner(b, secretA)
	c := sampleClaim(time.Now())
	p := s.Sign(c, "tok")
	b.Run("sign", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_ = s.Sign(c, "tok")
		}
	})
	b.Run("verify", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := s.Verify(p, c.Resource, "tok", time.Now()); err != nil {
				b.Fatal(err)
			}
		}
	})
}
