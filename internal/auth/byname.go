package auth

import "crypto/sha256"

// ByName finds the key called name. It is for sessions that remember a
// key's name (the dashboard's cookie), never its secret; the caller checks
// the key's current scope and prefixes on every request, so removing a key
// from the file ends its sessions.
func (r *Keyring) ByName(name string) (Key, bool) {
	if r == nil {
		return Key{}, false
	}
	for _, k := range r.keys {
		if k.Name == name {
			return k, true
		}
	}
	return Key{}, false
}

// Fingerprint is a one-way digest of the key's secret, for binding a
// session to this secret: it changes when the key is replaced under the
// same name. It reveals nothing usable about the key (SHA-256 of the
// stored SHA-256, under a fixed label) and is not a credential.
func (k Key) Fingerprint() [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte("lockd key fingerprint\x00"))
	h.Write(k.hash[:])
	var out [sha256.Size]byte
	copy(out[:], h.Sum(nil))
	return out
}
