package lock

// Lock sets' proofs: one for the whole set, so that any lockd restores the
// set (every key's lease and the set's record) from it after Redis lost
// its data together with the lockd that granted or last renewed it, as a
// lease's proof does for one key (proof.go, claims.go).
//
// A set proof is signed with the same secrets as a lease's (Signer, with
// its rotation), under its own version byte, so that neither kind passes
// for the other. The token is not inside: the holder sends it beside the
// proof, and the MAC covers it; the set's record key is the token's hash.
//
// Layout (set version 2), base64url without padding:
//
//	version (1) | secret id (4) | flags (1) | expiry (Unix ms), ttl_ms,
//	number of keys (uvarints) | per key: bytes shared with the previous
//	key, length of the rest (uvarints), the rest, fence less the previous
//	key's (zigzag varint; the first key's whole) | owner | value | MAC (16)
//
// Each key is written as what it does not share with the key before it,
// so that keys with a common prefix ("account:alice", "account:bob") cost
// little more than their differing ends, and each fence as its distance
// from the one before: a set's keys are granted together, so their fences
// (microsecond clocks) differ little or not at all. The owner and the
// value share setTextRoom bytes as a lease proof's share its budget:
// carried whole while they fit, else as the first 16 bytes of their
// SHA-256. So a set proof takes about 4/3 × (45 + owner and value, ≤ 160,
// + per key: its characters not shared with the key before + 3)
// characters (TestSetProofSize: 108 for 2 keys "account:NNNN", 123 for 4,
// 564 for 64; the largest legal set under MaxSetProof). The MAC is
// HMAC-SHA256 over the lease proofs' label, an empty resource id (a lease
// proof's is never empty, so no input of one is an input of the other),
// the token and every byte before the MAC, truncated to 16 bytes.

import (
	"context"
	"crypto/hmac"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"time"
)

// SetClaim is what a set proof vouches for: a lock set as Redis last
// answered it to its holder.
type SetClaim struct {
	// Mode is the scripts' mode of every key: "x" or "s".
	Mode string
	// Owner is the holder's label; "" with OwnerDigest when it was too
	// long to carry.
	Owner       string
	OwnerDigest []byte
	// ExpiresMS is the set's expiry (its first key's), Unix ms.
	ExpiresMS int64
	TTL       time.Duration
	// Keys are the set's keys with their fences, in the set's order.
	Keys []SetKey
	// Value is every key's value (JSON) when carried whole, as a lease
	// claim's (Claim.Value, ValueDigest, ValueUnknown).
	Value        string
	ValueDigest  []byte
	ValueUnknown bool
}

// MaxSetProof is the longest set proof lockd signs, in characters: 64 keys
// of 200 characters that share nothing, every number at its largest
// (TestSetProofSize). Longer is not a proof.
const MaxSetProof = 19 << 10

const (
	setProofVersion = 2
	// setTextRoom is the bytes the owner and the value share.
	setTextRoom   = 160
	flagSetShared = 0x01
	flagSetKnown  = flagSetShared | flagOwnerDigest | 0x03<<flagValueShift
)

// SignSet is the proof of c for the holder of token ("" for a nil Signer).
func (s *Signer) SignSet(c SetClaim, token string) string {
	if s == nil {
		return ""
	}
	k := s.keys[0]
	b := make([]byte, 0, 64+setTextRoom+16*len(c.Keys))
	b = append(b, setProofVersion)
	b = append(b, k.id[:]...)
	var flags byte
	if c.Mode == "s" {
		flags |= flagSetShared
	}
	b = append(b, 0) // flags, set below
	b = binary.AppendUvarint(b, uint64(max(c.ExpiresMS, 0)))
	b = binary.AppendUvarint(b, uint64(max(c.TTL.Milliseconds(), 0)))
	b = binary.AppendUvarint(b, uint64(len(c.Keys)))
	prev, prevFence := "", int64(0)
	for _, sk := range c.Keys {
		n := sharedPrefix(prev, sk.Key)
		b = binary.AppendUvarint(b, uint64(n))
		b = binary.AppendUvarint(b, uint64(len(sk.Key)-n))
		b = append(b, sk.Key[n:]...)
		fence := max(sk.Fence, 0)
		b = binary.AppendVarint(b, fence-prevFence)
		prev, prevFence = sk.Key, fence
	}
	n := len(b)
	b, ownerWhole := appendText(b, c.Owner, setTextRoom-digestLen)
	if !ownerWhole {
		flags |= flagOwnerDigest
	}
	room := setTextRoom - (len(b) - n)
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
	b[1+proofIDLen] = flags
	b = k.appendMAC(b, "", token, b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// sharedPrefix is how many leading bytes a and b share.
func sharedPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// VerifySet checks proof for the lock set of token and returns its claim,
// or the reason it restores nothing, as Verify does a lease's
// (ErrProofMalformed, ErrProofRetired, ErrProofForged, ErrProofExpired).
func (s *Signer) VerifySet(proof, token string, now time.Time) (SetClaim, error) {
	c, err := s.openSet(proof, token)
	if err != nil {
		return SetClaim{}, err
	}
	if now.UnixMilli() >= c.ExpiresMS {
		return SetClaim{}, ErrProofExpired
	}
	return c, nil
}

// openSet is VerifySet without the expiry check (a renewal takes the value
// from the proof it was sent).
func (s *Signer) openSet(proof, token string) (SetClaim, error) {
	if len(proof) > MaxSetProof {
		return SetClaim{}, ErrProofMalformed
	}
	b, err := base64.RawURLEncoding.DecodeString(proof)
	if err != nil || len(b) < 1+proofIDLen+1+proofMACLen || b[0] != setProofVersion {
		return SetClaim{}, ErrProofMalformed
	}
	body, mac := b[:len(b)-proofMACLen], b[len(b)-proofMACLen:]
	c, err := decodeSetClaim(body)
	if err != nil {
		return SetClaim{}, err
	}
	k, ok := s.key(body[1 : 1+proofIDLen])
	if !ok {
		return SetClaim{}, ErrProofRetired
	}
	var want [proofMACLen]byte
	if !hmac.Equal(mac, k.appendMAC(want[:0], "", token, body)) {
		return SetClaim{}, ErrProofForged
	}
	return c, nil
}

// decodeSetClaim reads a set proof's body strictly: unknown flags, bad
// lengths, a set of another size than lock sets have, a bad key, numbers
// out of range or bytes left over are ErrProofMalformed.
func decodeSetClaim(body []byte) (SetClaim, error) {
	flags := body[1+proofIDLen]
	rest := body[1+proofIDLen+1:]
	if flags&^flagSetKnown != 0 {
		return SetClaim{}, ErrProofMalformed
	}
	c := SetClaim{Mode: "x"}
	if flags&flagSetShared != 0 {
		c.Mode = "s"
	}
	var nums [3]uint64
	for i := range nums {
		v, l := binary.Uvarint(rest)
		if l <= 0 || v > math.MaxInt64 {
			return SetClaim{}, ErrProofMalformed
		}
		nums[i], rest = v, rest[l:]
	}
	if nums[1] > math.MaxInt64/uint64(time.Millisecond) || nums[2] < MinSetKeys || nums[2] > MaxSetKeys {
		return SetClaim{}, ErrProofMalformed
	}
	c.ExpiresMS, c.TTL = int64(nums[0]), time.Duration(nums[1])*time.Millisecond
	prev, prevFence := "", int64(0)
	for range nums[2] {
		shared, l := binary.Uvarint(rest)
		if l <= 0 || shared > uint64(len(prev)) {
			return SetClaim{}, ErrProofMalformed
		}
		tail, rest2, ok := readText(rest[l:])
		if !ok {
			return SetClaim{}, ErrProofMalformed
		}
		delta, l := binary.Varint(rest2)
		if l <= 0 || delta < -prevFence || delta > math.MaxInt64-prevFence {
			return SetClaim{}, ErrProofMalformed
		}
		key := prev[:shared] + tail
		if !ValidKey(key) {
			return SetClaim{}, ErrProofMalformed
		}
		fence := prevFence + delta
		c.Keys = append(c.Keys, SetKey{Key: key, Fence: fence})
		prev, prevFence, rest = key, fence, rest2[l:]
	}
	h, ok := readHolder(flags, rest)
	if !ok {
		return SetClaim{}, ErrProofMalformed
	}
	c.Owner, c.OwnerDigest, c.Value, c.ValueDigest, c.ValueUnknown = h.owner, h.ownerDigest, h.value, h.valueDigest, h.valueUnknown
	return c, nil
}

// setClaimOf is the claim of l, held in mode ("x" or "s").
func setClaimOf(l SetLease, mode string) SetClaim {
	return SetClaim{Mode: mode, Owner: l.Owner, ExpiresMS: l.ExpiresAt.UnixMilli(), TTL: l.TTL, Keys: l.Leases}
}

// grantedSetProof is the proof of a set AcquireSet granted, in mode with
// value.
func (s *Signer) grantedSetProof(l SetLease, mode, value string) string {
	if s == nil {
		return ""
	}
	c := setClaimOf(l, mode)
	c.Value = value
	return s.SignSet(c, l.Token)
}

// renewedSetProof is the proof of a set RenewSet renewed (its keys'
// leases, which say the mode): the value is the one prev, the proof the
// holder sent, vouches for, or unknown without it.
func (s *Signer) renewedSetProof(l SetLease, leases []Lease, prev string) string {
	if s == nil || len(leases) == 0 {
		return ""
	}
	c := setClaimOf(l, scriptMode(leases[0].Mode))
	p, err := s.openSet(prev, l.Token)
	if prev == "" || err != nil {
		c.ValueUnknown = true
		return s.SignSet(c, l.Token)
	}
	c.Value, c.ValueDigest, c.ValueUnknown = p.Value, p.ValueDigest, p.ValueUnknown
	return s.SignSet(c, l.Token)
}

// readSetRecordOrProof is readSetRecord, which puts the set back from the
// holder's proof in ctx (WithProof) when Redis no longer has its record.
func (n *node) readSetRecordOrProof(ctx context.Context, token string) (setRecord, error) {
	r, err := n.readSetRecord(ctx, token)
	if errors.Is(err, ErrLeaseLost) && n.restoreSetFromProof(ctx, token, proofFrom(ctx)) {
		return n.readSetRecord(ctx, token)
	}
	return r, err
}

// restoreSetFromProof puts back the lock set of token that proof vouches
// for, whose record Redis no longer has: each key's lease
// (restoreSetKeys), then the set's record, if some key is the set's. It
// reports whether it put the record back; a key that was not put back
// ends the set at its next renewal, which gives the others back.
func (n *node) restoreSetFromProof(ctx context.Context, token, proof string) bool {
	c, ok := n.setClaim(token, proof)
	if !ok {
		return false
	}
	if _, ours := n.restoreSetKeys(ctx, token, c, keysOfSet(c.Keys)); ours == 0 {
		return false
	}
	record, err := json.Marshal(setRecord{Keys: keysOfSet(c.Keys), Owner: c.Owner, TTLMS: c.TTL.Milliseconds()})
	left := time.Until(time.UnixMilli(c.ExpiresMS))
	if err != nil || left <= 0 {
		return false
	}
	rctx, cancel := n.bound(ctx)
	defer cancel()
	if err := n.st.Cmd().SetNX(rctx, setRecordKey(token), record, left).Err(); err != nil {
		return false
	}
	n.ledger.setSeen(token, record, time.Now().Add(left))
	return true
}

// renewSetKey renews key, one of the keys of the set of req.Token, and
// puts its lease back from the set's proof in ctx (WithProof) should
// Redis have lost it but not the set's record (a Cluster's master that
// lost its data holds some of the set's keys, not the record).
func (n *node) renewSetKey(ctx context.Context, key string, req RenewRequest) (Lease, error) {
	l, err := n.renewAs(ctx, key, req, renewBySet)
	if !missing(err) {
		return l, err
	}
	c, ok := n.setClaim(req.Token, proofFrom(ctx))
	if !ok || !slices.ContainsFunc(c.Keys, func(k SetKey) bool { return k.Key == key }) {
		return l, err
	}
	if restored, ours := n.restoreSetKeys(ctx, req.Token, c, []string{key}); restored == 0 && ours == 0 {
		return l, err
	}
	return n.renewAs(ctx, key, req, renewBySet)
}

// setClaim is what proof, sent with token, vouches for, if it verifies
// and this process saw none of the set's keys' leases end.
func (n *node) setClaim(token, proof string) (SetClaim, bool) {
	if proof == "" {
		return SetClaim{}, false
	}
	c, err := n.opts.Proofs.VerifySet(proof, token, time.Now())
	if err != nil {
		return SetClaim{}, false
	}
	for _, k := range c.Keys {
		if n.ledger.isEnded(k.Key, token) {
			return SetClaim{}, false
		}
	}
	return c, true
}

// restoreSetKeys puts back the leases of keys, keys of the set c of
// token, as restore.lua puts back a lease's: a key held by a lease with a
// higher fence keeps it; a key whose lease ended before the loss (its
// tombstone) restores nothing. It answers how many were put back, and how
// many hold the set's lease now (put back, or there already).
func (n *node) restoreSetKeys(ctx context.Context, token string, c SetClaim, keys []string) (restored, ours int) {
	fences := make(map[string]int64, len(c.Keys))
	for _, k := range c.Keys {
		fences[k.Key] = k.Fence
	}
	value := c.Value
	if len(c.ValueDigest) != 0 || c.ValueUnknown {
		value = ""
	}
	signed := time.UnixMilli(c.ExpiresMS - c.TTL.Milliseconds())
	// No loss since the proof was signed: Redis kept its data, and a key
	// may have ended by its holder's or an operator's hand (restore.lua,
	// one).
	one := !n.lostSince(signed)
	answers := make([]string, len(keys))
	eachKey(keys, func(i int, key string) error {
		r := restorable{key: key, token: token, known: known{mode: c.Mode, owner: c.Owner, fence: fences[key], count: 1,
			ttl: c.TTL, acquired: signed, value: value, set: len(keys)}}
		rc := restoreCallOf(key, n.sharedOf(key), r, "a holder's proof after redis lost its data")
		rc.leftMS = "@" + strconv.FormatInt(c.ExpiresMS, 10)
		if one {
			rc.one = "1"
		}
		keys, argv := rc.args()
		v, err := n.st.Run(ctx, n.scripts.restore, keys, argv...)
		if out, _ := v.([]any); err == nil && len(out) > 0 {
			answers[i], _ = out[0].(string)
		}
		return nil
	})
	for _, a := range answers {
		switch a {
		case "restored":
			restored++
			ours++
		case "present":
			ours++
		}
	}
	n.restoredMu.Lock()
	n.restoredSum.Restored += restored
	n.restoredMu.Unlock()
	return restored, ours
}

// keysOfSet is the keys of ks, in order.
func keysOfSet(ks []SetKey) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.Key
	}
	return out
}
