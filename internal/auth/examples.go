package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"gopkg.in/yaml.v3"
)

// ExamplePrefix starts every placeholder secret of lockd's own files
// (change-me-writer-key, …): a secret that starts with it was never
// replaced.
const ExamplePrefix = "change-me"

// exampleSecrets are the API keys and session secrets that lockd's
// repository shows (deploy/, docker-compose.yml, docs/): anyone can read
// them, so a server that accepts them is open to anyone. They are listed
// here rather than read from those files at build time, because a build
// from a checkout whose deploy/auth.yaml holds real keys would then refuse
// those. deploy's TestExampleCredentialsRefused fails when a file there
// shows a secret that IsExample does not recognise.
var exampleSecrets = []string{
	"change-me-writer-key",
	"change-me-admin-key!",
	"change-me-viewer-key",
	"change-me-change-me-change-me-change-me",
	"s3cret-plaintext", // docs/operations.md
}

// IsExample reports whether secret (an API key or a session secret) is
// one that lockd's own files show, or starts with ExamplePrefix.
func IsExample(secret string) bool {
	if strings.HasPrefix(secret, ExamplePrefix) {
		return true
	}
	for _, s := range exampleSecrets {
		if secret == s {
			return true
		}
	}
	return false
}

// isExampleHash reports whether the hex SHA-256 h is that of an example
// secret.
func isExampleHash(h string) bool {
	for _, s := range exampleSecrets {
		sum := sha256.Sum256([]byte(s))
		if strings.EqualFold(h, hex.EncodeToString(sum[:])) {
			return true
		}
	}
	return false
}

// ExampleKeys are the names of the keys of the auth YAML data (Parse's
// layout) whose key IsExample or whose sha256 is the hash of an example,
// in the file's order. It names keys only, never a secret. A file Parse
// refuses yields what could be read of it.
func ExampleKeys(data []byte) []string {
	var f file
	_ = yaml.Unmarshal(data, &f)
	var names []string
	for _, e := range f.Keys {
		if (e.Key != "" && IsExample(e.Key)) || (e.SHA256 != "" && isExampleHash(e.SHA256)) {
			names = append(names, e.Name)
		}
	}
	return names
}
