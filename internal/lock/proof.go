package lock

// Proofs: the evidence a holder carries so that any lockd can restore its
// lease after Redis lost it, even when the lockd that granted or last
// renewed it is gone too (Chubby's rebuild from what the clients hold).
//
// A proof is a lease as Redis answered its grant or renewal (fence, mode,
// owner, count, expiry, TTL, limit, session, value), signed with a secret
// every lockd of a deployment shares. The token is not inside: the holder
// sends it beside the proof, and the MAC covers it and the resource, so a
// proof is worth nothing without its own token on its own key. A proof
// vouches for a lease until its expiry and no longer: a restore from it
// gives back no more than the lease had.
//
// Layout (version 1), base64url without padding:
//
//	version (1) | secret id (4) | key hash (4) | flags (1) |
//	fence, count, expiry (Unix ms), ttl_ms [, limit] (uvarints) |
//	[session handle (16)] | owner | value | MAC (16)
//
// The secret id is the first 4 bytes of SHA-256(secret), so that a
// verifier picks the secret (current or previous) at once and tells a
// retired secret from a forgery. The key hash is the first 4 bytes of
// SHA-256(resource id): a proof sent on another key is refused as such,
// not as a forgery. The owner and the value are carried whole while the
// proof stays within proofBudget with them, the owner first; otherwise
// the first 16 bytes of their SHA-256 stand in. A lockd that knows the
// lease restores them whole; a restore from the proof alone restores one
// carried as a digest empty (docs/safety.md, "Proofs"). The MAC is
// HMAC-SHA256 over a label, the resource id, the token and every byte
// before the MAC, truncated to 16 bytes.

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"math"
	"sync"
	"time"
)

// Claim is what a proof vouches for: one lease as Redis last answered it
// to its holder.
type Claim struct {
	// Resource is the resource's id as the engine names it in Redis
	// (Resource.id: a lock's name, "sem/" or "elect/" and the name).
	Resource string
	// Mode is the scripts' mode: "x" exclusive (a lock's or an election's
	// leadership), "s" shared, "p" a semaphore's permit.
	Mode string
	// Fence is the lease's fence, an election's term.
	Fence int64
	// Owner is the holder's label; "" with OwnerDigest when it was too
	// long to carry.
	Owner       string
	OwnerDigest []byte
	// Count is the re-entry depth.
	Count int
	// ExpiresMS is the lease's expiry, Unix ms, as Redis answered it.
	ExpiresMS int64
	TTL       time.Duration
	// Limit is a semaphore's limit (permits only).
	Limit int
	// Session is the handle of the session the grant is bound to
	// (sessionHandle: a hash, never the session's id), or "".
	Session string
	// Value is the grant's value (JSON) when carried whole: "" is no
	// value, unless ValueDigest is set (too long to carry) or
	// ValueUnknown (the signer did not know it: a renewal that kept the
	// value, without a proof to take it from).
	Value        string
	ValueDigest  []byte
	ValueUnknown bool
}

// Proof errors. Each is also errors.Is ErrBadProof.
var (
	// ErrBadProof is any proof that restores nothing.
	ErrBadProof = errors.New("lock: proof refused")
	// ErrProofMalformed is a proof that does not decode.
	ErrProofMalformed = fmt.Errorf("%w: malformed", ErrBadProof)
	// ErrProofRetired is a proof signed with a secret this lockd does not
	// hold: retired by a rotation, or another deployment's.
	ErrProofRetired = fmt.Errorf("%w: signed with an unknown or retired secret", ErrBadProof)
	// ErrProofOtherKey is a proof of another resource.
	ErrProofOtherKey = fmt.Errorf("%w: a proof of another key", ErrBadProof)
	// ErrProofForged is a proof whose MAC does not hold for its
	// resource and the token sent beside it: altered, forged, or sent
	// with another token.
	ErrProofForged = fmt.Errorf("%w: the MAC does not match", ErrBadProof)
	// ErrProofExpired is a proof of a lease whose expiry has passed.
	ErrProofExpired = fmt.Errorf("%w: the lease it vouches for has expired", ErrBadProof)
)

// MinSecret is the shortest proof secret a Signer takes, in bytes.
const MinSecret = 32

// proofBudget is the most characters a proof takes with its owner and
// value carried whole; past it they are carried as digests. With a
// digest for each, the largest legal claim stays under it too
// (TestProofSize).
const proofBudget = 300

const (
	proofVersion = 1
	proofIDLen   = 4
	proofMACLen  = 16
	digestLen    = 16
	handleLen    = 16
	// maxProofLen bounds what Verify decodes: more is not a proof.
	maxProofLen = 512
)

// flags bits.
const (
	flagModeMask    = 0x03 // 0 x, 1 s, 2 p
	flagOwnerDigest = 0x04
	flagValueShift  = 3 // 2 bits: valueNone, valueWhole, valueDigest, valueUnknown
	flagSession     = 0x20
	flagKnown       = 0x3f
)

const (
	valueNone = iota
	valueWhole
	valueDigest
	valueUnknown
)

var proofModes = [...]string{"x", "s", "p"}

// Signer signs proofs with the current secret and verifies them with the
// current or the previous one (a rotation: every lockd first takes the
// new secret as current with the old as previous, and drops the old once
// every proof signed with it has expired). A nil Signer signs nothing and
// verifies nothing.
type Signer struct {
	keys []proofKey // current first
}

type proofKey struct {
	id   [proofIDLen]byte
	macs *sync.Pool // of *macState keyed with the secret
}

// NewSigner returns a Signer that signs with current and also accepts
// proofs signed with previous (at most one). Each secret has at least
// MinSecret bytes.
func NewSigner(current []byte, previous ...[]byte) (*Signer, error) {
	if len(previous) > 1 {
		return nil, errors.New("lock: proofs: at most two secrets, the current and the previous")
	}
	s := &Signer{}
	for i, secret := range append([][]byte{current}, previous...) {
		if len(secret) < MinSecret {
			which := "current"
			if i > 0 {
				which = "previous"
			}
			return nil, fmt.Errorf("lock: proofs: the %s secret has %d bytes, at least %d are needed", which, len(secret), MinSecret)
		}
		s.keys = append(s.keys, newProofKey(secret))
	}
	return s, nil
}

// Sign is the proof of c for the holder of token ("" for a nil Signer).
// Owner and value go whole while the proof stays within proofBudget,
// else as digests.
func (s *Signer) Sign(c Claim, token string) string {
	if s == nil {
		return ""
	}
	k := s.keys[0]
	// One buffer for the whole proof: within the budget it never grows.
	b := make([]byte, 0, proofBudget*3/4+digestLen)
	b = append(b, proofVersion)
	b = append(b, k.id[:]...)
	b = append(b, keyHash(c.Resource)...)
	flags := byte(modeIndex(c.Mode))
	if c.Session != "" {
		flags |= flagSession
	}
	b = append(b, 0) // flags, set below
	b = binary.AppendUvarint(b, uint64(max(c.Fence, 0)))
	b = binary.AppendUvarint(b, uint64(max(c.Count, 0)))
	b = binary.AppendUvarint(b, uint64(max(c.ExpiresMS, 0)))
	b = binary.AppendUvarint(b, uint64(max(c.TTL.Milliseconds(), 0)))
	if c.Mode == "p" {
		b = binary.AppendUvarint(b, uint64(max(c.Limit, 0)))
	}
	if c.Session != "" {
		b = appendHandle(b, c.Session)
	}
	// Budget in raw bytes: base64 takes 4 characters per 3.
	room := proofBudget*3/4 - len(b) - proofMACLen
	// The owner leaves room for the value's digest.
	n := len(b)
	b, ownerWhole := appendText(b, c.Owner, room-digestLen)
	if !ownerWhole {
		flags |= flagOwnerDigest
	}
	room -= len(b) - n
	vk := valueNone
	switch {
	case c.ValueUnknown:
		vk = valueUnknown
	case c.ValueDigest != nil:
		vk = valueDigest
		b = append(b, digestOf(c.ValueDigest)...)
	case c.Value != "":
		var whole bool
		b, whole = appendText(b, c.Value, room)
		vk = valueWhole
		if !whole {
			vk = valueDigest
		}
	}
	flags |= byte(vk) << flagValueShift
	b[1+proofIDLen+4] = flags
	b = k.appendMAC(b, c.Resource, token, b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// appendText appends s whole (uvarint length, bytes) when that takes at
// most room bytes, else the first digestLen bytes of its SHA-256.
func appendText(b []byte, s string, room int) ([]byte, bool) {
	if l := uvarintLen(uint64(len(s))) + len(s); l <= room {
		b = binary.AppendUvarint(b, uint64(len(s)))
		return append(b, s...), true
	}
	sum := sha256.Sum256([]byte(s))
	return append(b, sum[:digestLen]...), false
}

// digestOf is d as a proof carries a digest: digestLen bytes.
func digestOf(d []byte) []byte {
	out := make([]byte, digestLen)
	copy(out, d)
	return out
}

func uvarintLen(v uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], v)
}

// Verify checks proof for the lease with token on the resource with id
// resourceID and returns its claim, or the reason it restores nothing:
// ErrProofMalformed, ErrProofRetired, ErrProofOtherKey, ErrProofForged or
// ErrProofExpired (now at or past the claim's expiry). A nil Signer
// verifies nothing (ErrProofRetired).
func (s *Signer) Verify(proof, resourceID, token string, now time.Time) (Claim, error) {
	c, err := s.open(proof, resourceID, token)
	if err != nil {
		return Claim{}, err
	}
	if now.UnixMilli() >= c.ExpiresMS {
		return Claim{}, ErrProofExpired
	}
	return c, nil
}

// open is Verify without the expiry check: a renewal of a live lease
// takes what its previous proof knew (the value), whatever the clocks
// say of its expiry.
func (s *Signer) open(proof, resourceID, token string) (Claim, error) {
	if len(proof) > maxProofLen {
		return Claim{}, ErrProofMalformed
	}
	b, err := base64.RawURLEncoding.DecodeString(proof)
	if err != nil || len(b) < 1+proofIDLen+4+1+proofMACLen || b[0] != proofVersion {
		return Claim{}, ErrProofMalformed
	}
	body, mac := b[:len(b)-proofMACLen], b[len(b)-proofMACLen:]
	c, err := decodeClaim(body)
	if err != nil {
		return Claim{}, err
	}
	k, ok := s.key(body[1 : 1+proofIDLen])
	if !ok {
		return Claim{}, ErrProofRetired
	}
	if !bytes.Equal(body[1+proofIDLen:1+proofIDLen+4], keyHash(resourceID)) {
		return Claim{}, ErrProofOtherKey
	}
	var want [proofMACLen]byte
	if !hmac.Equal(mac, k.appendMAC(want[:0], resourceID, token, body)) {
		return Claim{}, ErrProofForged
	}
	c.Resource = resourceID
	return c, nil
}

// key is the secret whose id is id.
func (s *Signer) key(id []byte) (proofKey, bool) {
	if s == nil {
		return proofKey{}, false
	}
	for _, k := range s.keys {
		if bytes.Equal(k.id[:], id) {
			return k, true
		}
	}
	return proofKey{}, false
}

// decodeClaim reads a proof's body (every byte before the MAC), strictly:
// unknown flags, bad lengths, out-of-range numbers or bytes left over are
// ErrProofMalformed.
func decodeClaim(body []byte) (Claim, error) {
	flags := body[1+proofIDLen+4]
	rest := body[1+proofIDLen+4+1:]
	if flags&^flagKnown != 0 || int(flags&flagModeMask) >= len(proofModes) {
		return Claim{}, ErrProofMalformed
	}
	c := Claim{Mode: proofModes[flags&flagModeMask]}
	var nums [5]uint64
	n := 4
	if c.Mode == "p" {
		n = 5
	}
	for i := range n {
		v, l := binary.Uvarint(rest)
		if l <= 0 || v > math.MaxInt64 {
			return Claim{}, ErrProofMalformed
		}
		nums[i], rest = v, rest[l:]
	}
	if nums[1] > math.MaxInt32 || nums[4] > math.MaxInt32 || nums[3] > math.MaxInt64/uint64(time.Millisecond) {
		return Claim{}, ErrProofMalformed
	}
	c.Fence, c.Count, c.ExpiresMS = int64(nums[0]), int(nums[1]), int64(nums[2])
	c.TTL, c.Limit = time.Duration(nums[3])*time.Millisecond, int(nums[4])
	if flags&flagSession != 0 {
		if len(rest) < handleLen {
			return Claim{}, ErrProofMalformed
		}
		c.Session, rest = hex.EncodeToString(rest[:handleLen]), rest[handleLen:]
	}
	h, ok := readHolder(flags, rest)
	if !ok {
		return Claim{}, ErrProofMalformed
	}
	c.Owner, c.OwnerDigest, c.Value, c.ValueDigest, c.ValueUnknown = h.owner, h.ownerDigest, h.value, h.valueDigest, h.valueUnknown
	return c, nil
}

// holderText is what ends every proof's body: the owner (or its digest)
// and the value (whole, its digest, or unknown).
type holderText struct {
	owner, value             string
	ownerDigest, valueDigest []byte
	valueUnknown             bool
}

// readHolder reads the end of a proof's body, rest, as flags say it is
// written; ok is false when it is malformed or bytes are left over.
func readHolder(flags byte, rest []byte) (h holderText, ok bool) {
	if flags&flagOwnerDigest != 0 {
		h.ownerDigest, rest, ok = cut(rest, digestLen)
	} else {
		h.owner, rest, ok = readText(rest)
	}
	if !ok {
		return h, false
	}
	switch (flags >> flagValueShift) & 0x03 {
	case valueWhole:
		h.value, rest, ok = readText(rest)
	case valueDigest:
		h.valueDigest, rest, ok = cut(rest, digestLen)
	case valueUnknown:
		h.valueUnknown = true
	}
	return h, ok && len(rest) == 0
}

// readText reads a uvarint length and that many bytes.
func readText(b []byte) (string, []byte, bool) {
	n, l := binary.Uvarint(b)
	if l <= 0 || n > uint64(len(b)-l) {
		return "", nil, false
	}
	return string(b[l : l+int(n)]), b[l+int(n):], true
}

// cut splits off the first n bytes of b.
func cut(b []byte, n int) ([]byte, []byte, bool) {
	if len(b) < n {
		return nil, nil, false
	}
	return bytes.Clone(b[:n]), b[n:], true
}

// newProofKey is secret as a Signer holds it: its id, and its MAC states.
func newProofKey(secret []byte) proofKey {
	key := bytes.Clone(secret)
	k := proofKey{macs: &sync.Pool{New: func() any { return &macState{h: hmac.New(sha256.New, key)} }}}
	sum := sha256.Sum256(secret)
	copy(k.id[:], sum[:proofIDLen])
	return k
}

// appendMAC appends to b the proof's MAC over the resource, the token
// and body, with a hash state from k's pool: a proof is signed on every
// grant and renewal.
func (k proofKey) appendMAC(b []byte, resourceID, token string, body []byte) []byte {
	st := k.macs.Get().(*macState)
	st.in = append(append(append(append(append(st.in[:0], macLabel...), resourceID...), 0), token...), 0)
	st.in = append(st.in, body...)
	st.h.Reset()
	st.h.Write(st.in)
	b = append(b, st.h.Sum(st.sum[:0])[:proofMACLen]...)
	if cap(st.in) <= 4<<10 {
		k.macs.Put(st)
	}
	return b
}

// macLabel starts every MAC's input: version 1 of the layout.
const macLabel = "lockd proof v1\x00"

// macState is one HMAC-SHA256 of a secret and its buffers, reused.
type macState struct {
	h   hash.Hash
	in  []byte
	sum [sha256.Size]byte
}

// keyHash is the first 4 bytes of SHA-256 of a resource id.
func keyHash(resourceID string) []byte {
	sum := sha256.Sum256([]byte(resourceID))
	return sum[:4]
}

// modeIndex is mode's number in the flags; an unknown mode signs as
// exclusive, the scripts' default.
func modeIndex(mode string) int {
	for i, m := range proofModes {
		if m == mode {
			return i
		}
	}
	return 0
}

// appendHandle appends a session handle (32 hex digits) as 16 bytes; a
// handle of another shape (none is made) is hashed to that length.
func appendHandle(b []byte, handle string) []byte {
	if len(handle) == 2*handleLen {
		if out, err := hex.AppendDecode(b, []byte(handle)); err == nil {
			return out
		}
	}
	sum := sha256.Sum256([]byte(handle))
	return append(b, sum[:handleLen]...)
}
