package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"os"

	"github.com/rs/zerolog"

	"github.com/lockd/lockd/internal/lock"
)

// leaseProofs is the signer of lease proofs (internal/lock/proof.go) and
// where its secret came from, for the start-up log line. The secret itself
// is never logged.
type leaseProofs struct {
	signer *lock.Signer
	source string // "file", "auth" or "random"
}

// loadLeaseProofs is the proofs' signer: from --lease-secret-file (its
// first line the current secret, a second the previous one during a
// rotation), else derived from the auth file's content, else a random
// secret of this process.
func loadLeaseProofs(path string, authData []byte) (leaseProofs, error) {
	switch {
	case path != "":
		b, err := os.ReadFile(path)
		if err != nil {
			return leaseProofs{}, usageError("--lease-secret-file: %v", err)
		}
		s, err := parseLeaseSecrets(b)
		if err != nil {
			return leaseProofs{}, err
		}
		return leaseProofs{signer: s, source: "file"}, nil
	case len(authData) > 0:
		s, err := lock.NewSigner(derivedLeaseSecret(authData))
		return leaseProofs{signer: s, source: "auth"}, err
	default:
		secret := make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return leaseProofs{}, err
		}
		s, err := lock.NewSigner(secret)
		return leaseProofs{signer: s, source: "random"}, err
	}
}

// parseLeaseSecrets reads a lease secret file: one or two non-empty
// lines (the current secret, then the previous), each at least
// lock.MinSecret bytes once the spaces around it are trimmed. The
// messages name the flag and the line, never a secret.
func parseLeaseSecrets(b []byte) (*lock.Signer, error) {
	var secrets [][]byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		if line = bytes.TrimSpace(line); len(line) > 0 {
			secrets = append(secrets, line)
		}
	}
	switch {
	case len(secrets) == 0:
		return nil, usageError("--lease-secret-file is empty: put a secret of at least %d bytes on its first line (e.g. `openssl rand -hex 32`)", lock.MinSecret)
	case len(secrets) > 2:
		return nil, usageError("--lease-secret-file has %d secrets: one, or two during a rotation (the current, then the previous)", len(secrets))
	}
	for i, s := range secrets {
		if len(s) < lock.MinSecret {
			return nil, usageError("--lease-secret-file: the secret on line %d has %d bytes; at least %d are needed (e.g. `openssl rand -hex 32`)", i+1, len(s), lock.MinSecret)
		}
	}
	return lock.NewSigner(secrets[0], secrets[1:]...)
}

// leaseSecretLabel keeps the secret derived from the auth file apart from
// anything else that file's content might key.
const leaseSecretLabel = "lockd lease-proof secret v1"

// derivedLeaseSecret is the lease secret of replicas that share an auth
// file and no --lease-secret-file: HKDF's extract step (HMAC-SHA256 keyed
// by a fixed label over the file's content). Every edit of the file
// changes it.
func derivedLeaseSecret(authData []byte) []byte {
	m := hmac.New(sha256.New, []byte(leaseSecretLabel))
	m.Write(authData)
	return m.Sum(nil)
}

// log says where the proofs' secret came from; a random one warns, since
// its proofs restore leases only through this process.
func (p leaseProofs) log(log zerolog.Logger) {
	switch p.source {
	case "random":
		log.Warn().Msg("lease proofs are signed with a random secret of this process, so they restore leases only through it; " +
			"give every replica the same --lease-secret-file (or auth file)")
	case "auth":
		log.Info().Msg("lease proofs are signed with a secret derived from the auth file: every replica with the same file verifies them")
	default:
		log.Info().Msg("lease proofs are signed with the secret of --lease-secret-file")
	}
}
