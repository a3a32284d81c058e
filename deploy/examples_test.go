package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/web"
)

// exampleFiles are the files of the repository that show credentials:
// everything under deploy/, the Compose file, the README and docs/.
func exampleFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"../docker-compose.yml", "../README.md"}
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("docs/*.md: %v", err)
	}
	files = append(files, docs...)
	err = filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		switch filepath.Ext(p) {
		case ".yaml", ".yml", ".md", ".json":
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// The shown secrets: an API key (a plain key has at least 16
// characters, so a Secret's key name such as session-secret is none), a
// key's SHA-256, a session secret (at least web.MinSecretLen bytes), a
// Redis password, a key in a curl example. "…" and shell variables are placeholders, not
// secrets.
var (
	shownKey     = regexp.MustCompile(`\bkey:\s*"?([^"\s,}#]{16,})`)
	shownHash    = regexp.MustCompile(`\bsha256:\s*"?([0-9a-fA-F]{64})\b`)
	shownSession = regexp.MustCompile(`(?:session-secret|LOCKD_SESSION_SECRET)["']?\s*[:=]\s*["']?([^"'\s$(]{` + strconv.Itoa(web.MinSecretLen) + `,})`)
	shownRedis   = regexp.MustCompile(`(?:redis-password|LOCKD_REDIS_PASSWORD|LOCKD_SENTINEL_PASSWORD|requirepass)["']?(?:[ \t]*[:=][ \t]*|[ \t]+)["']?([^"'\s$(]{8,})`)
	shownBearer  = regexp.MustCompile(`Bearer\s+([^\s'"$\\]{16,})`)
)

// N21: every API key, key hash and session secret that the repository's
// deploy files and docs show is one that lockd refuses to start with
// (auth.IsExample, auth.ExampleKeys): an example added to deploy/ or the
// docs that lockd would accept fails here.
func TestExampleCredentialsRefused(t *testing.T) {
	found := map[string]bool{}
	for _, f := range exampleFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, re := range []*regexp.Regexp{shownKey, shownSession, shownRedis, shownBearer} {
			for _, m := range re.FindAllStringSubmatch(text, -1) {
				found[m[1]] = true
				if !auth.IsExample(m[1]) {
					t.Errorf("%s shows a secret (%.4s…) that lockd would accept: add it to internal/auth's exampleSecrets, or start it with %q",
						f, m[1], auth.ExamplePrefix)
				}
			}
		}
		for _, m := range shownHash.FindAllStringSubmatch(text, -1) {
			found[m[1]] = true
			if ex := auth.ExampleKeys([]byte("keys:\n  - {name: shown, sha256: \"" + m[1] + "\", scopes: [read]}\n")); len(ex) != 1 {
				t.Errorf("%s shows a key hash (%.8s…) that lockd would accept: add its key to internal/auth's exampleSecrets", f, m[1])
			}
		}
	}
	// The scan reads what the shipped files show (else the patterns broke).
	for _, s := range []string{"change-me-writer-key", "change-me-admin-key!", "change-me-change-me-change-me-change-me", "s3cret-plaintext", "change-me-redis-password-change-me"} {
		if !found[s] {
			t.Errorf("the scan did not find %.9s… in the shipped files", s)
		}
	}
	// Every key of the auth files shipped is refused, by name.
	b, err := os.ReadFile("auth.yaml")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if ex := auth.ExampleKeys(b); len(ex) != keys.Len() {
		t.Errorf("deploy/auth.yaml has %d keys; lockd refuses only %v", keys.Len(), ex)
	}
}
