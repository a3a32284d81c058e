package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lockd/lockd/internal/lockdtest"
)

// realAuthYAML is an auth file with no example key.
const realAuthYAML = `
keys:
  - {name: ops, key: "4c1d0e5a9b7f2e8d6c3a1f0b9e8d7c6a", scopes: [admin]}
`

// k8sSecret is what deploy/kubernetes/lockd-secret.yaml gives lockd: its
// auth file, its session secret and the Redis password.
func k8sSecret(t *testing.T) (authYAML, sessionSecret, redisPassword string) {
	t.Helper()
	b, err := os.ReadFile("../../deploy/kubernetes/lockd-secret.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		StringData map[string]string `yaml:"stringData"`
	}
	if err := yaml.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if s.StringData["auth.yaml"] == "" || s.StringData["session-secret"] == "" || s.StringData["redis-password"] == "" {
		t.Fatalf("lockd-secret.yaml has no auth.yaml, session-secret or redis-password: %v", s.StringData)
	}
	return s.StringData["auth.yaml"], s.StringData["session-secret"], s.StringData["redis-password"]
}

// N21: lockd refuses to start with the credentials its own files ship
// (deploy/auth.yaml, which docker-compose mounts; the Kubernetes Secret's
// auth file, session secret and Redis password; a key that starts with
// change-me), naming
// the key or the variable and never the secret. --allow-example-credentials
// starts it anyway, with a warning.
func TestServeRefusesExampleCredentials(t *testing.T) {
	k8sAuth, k8sSession, k8sRedis := k8sSecret(t)
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		names   []string // what the message must name
		secrets []string // what it must not show
	}{
		{"deploy/auth.yaml", []string{"--auth-file", "../../deploy/auth.yaml"}, nil,
			[]string{`"writer"`, `"ops"`, `"dashboard-viewer"`}, []string{"change-me-writer-key", "change-me-admin-key!"}},
		{"the Kubernetes Secret's auth file", nil, map[string]string{"LOCKD_AUTH_YAML": k8sAuth},
			[]string{`"writer"`, `"ops"`, `"dashboard-viewer"`}, []string{"change-me-admin-key!"}},
		{"the Kubernetes Secret's session secret", nil, map[string]string{"LOCKD_AUTH_YAML": realAuthYAML, "LOCKD_SESSION_SECRET": k8sSession},
			[]string{"LOCKD_SESSION_SECRET"}, []string{k8sSession}},
		{"the Kubernetes Secret's Redis password", nil, map[string]string{"LOCKD_AUTH_YAML": realAuthYAML, "LOCKD_REDIS_PASSWORD": k8sRedis},
			[]string{"LOCKD_REDIS_PASSWORD"}, []string{k8sRedis}},
		{"a key starting with change-me", nil, map[string]string{"LOCKD_AUTH_YAML": "keys:\n  - {name: mine, key: change-me-please-0123, scopes: [read]}\n"},
			[]string{`"mine"`}, []string{"change-me-please-0123"}},
		{"the hash of an example key", nil, map[string]string{"LOCKD_AUTH_YAML": "keys:\n  - {name: hashed, sha256: " +
			"\"" + sha256hex("change-me-admin-key!") + "\", scopes: [admin]}\n"}, []string{`"hashed"`}, nil},
		{"the key of docs/operations.md", nil, map[string]string{"LOCKD_AUTH_YAML": "keys:\n  - {name: ci-runner, key: s3cret-plaintext, scopes: [write]}\n"},
			[]string{`"ci-runner"`}, []string{"s3cret-plaintext"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut lockdtest.Buffer
			getenv := func(k string) string { return tc.env[k] }
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			err := run(ctx, append([]string{"lockd", "serve", "--listen", "127.0.0.1:0"}, tc.args...), getenv, &out, &errOut)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != exitUsage || !strings.Contains(ee.msg, "example credentials") ||
				!strings.Contains(ee.msg, "openssl rand") {
				t.Fatalf("err = %v, want a usage error refusing example credentials", err)
			}
			for _, n := range tc.names {
				if !strings.Contains(ee.msg, n) {
					t.Errorf("the refusal does not name %s: %s", n, ee.msg)
				}
			}
			for _, s := range tc.secrets {
				if strings.Contains(ee.msg+out.String()+errOut.String(), s) {
					t.Errorf("a secret was printed: %s", ee.msg)
				}
			}

			// With the override lockd starts, and warns.
			inst := startServe(t, tc.env, append([]string{"--allow-example-credentials"}, tc.args...)...)
			var warned bool
			for _, line := range strings.Split(inst.out.String(), "\n") {
				warned = warned || (strings.Contains(line, `"level":"warn"`) && strings.Contains(line, "example credentials"))
			}
			if !warned {
				t.Errorf("no warning with --allow-example-credentials:\n%s", inst.out)
			}
			for _, s := range tc.secrets {
				if strings.Contains(inst.out.String(), s) {
					t.Errorf("a secret was logged:\n%s", inst.out)
				}
			}
		})
	}
	// Real credentials start without the warning.
	inst := startServe(t, map[string]string{"LOCKD_AUTH_YAML": realAuthYAML, "LOCKD_SESSION_SECRET": "4c1d0e5a9b7f2e8d6c3a1f0b9e8d7c6a5b4c3d2e"})
	if strings.Contains(inst.out.String(), "example credentials") {
		t.Fatalf("a warning for real credentials:\n%s", inst.out)
	}
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
