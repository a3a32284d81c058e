package lock

import "time"

// ResourceID is r's id, as proofs name it.
func ResourceID(r Resource) string { return r.id() }

// ClaimOf calls the restore hook's verification (claims.go).
func (e *Engine) ClaimOf(res Resource, token, proof string, now time.Time) (Claim, error) {
	return e.n.claimOf(res.id(), token, proof, now)
}
