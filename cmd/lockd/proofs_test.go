package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
)

var (
	leaseSecretA = strings.Repeat("A", 40)
	leaseSecretB = strings.Repeat("B", 32)
)

func TestParseLeaseSecrets(t *testing.T) {
	claim := lock.Claim{Resource: "k", Mode: "x", Fence: 1, Count: 1, ExpiresMS: time.Now().Add(time.Minute).UnixMilli(), TTL: time.Minute}
	signedBy := func(secret string) string {
		s, err := lock.NewSigner([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return s.Sign(claim, "tok")
	}
	for _, tc := range []struct {
		name     string
		file     string
		err      string // a part of the usage error, "" for none
		verifies []string
		retired  []string
	}{
		{name: "one secret", file: leaseSecretA + "\n", verifies: []string{leaseSecretA}, retired: []string{leaseSecretB}},
		{name: "spaces and CRLF", file: "  " + leaseSecretA + " \r\n\r\n", verifies: []string{leaseSecretA}},
		{name: "rotation", file: leaseSecretB + "\n" + leaseSecretA + "\n", verifies: []string{leaseSecretA, leaseSecretB}},
		{name: "empty", file: "\n \n", err: "--lease-secret-file is empty"},
		{name: "short", file: "hunter2-too-short\n", err: "line 1 has 17 bytes"},
		{name: "short previous", file: leaseSecretA + "\nhunter2-too-short\n", err: "line 2 has 17 bytes"},
		{name: "three", file: leaseSecretA + "\n" + leaseSecretB + "\n" + leaseSecretA + "\n", err: "has 3 secrets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseLeaseSecrets([]byte(tc.file))
			if tc.err != "" {
				var ee *exitError
				if !errors.As(err, &ee) || ee.code != exitUsage || !strings.Contains(ee.msg, tc.err) || !strings.Contains(ee.msg, "--lease-secret-file") {
					t.Fatalf("err = %v, want a usage error naming --lease-secret-file with %q", err, tc.err)
				}
				if strings.Contains(ee.msg, "hunter2") || strings.Contains(ee.msg, leaseSecretA) {
					t.Fatalf("the message shows a secret: %s", ee.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, secret := range tc.verifies {
				if _, err := s.Verify(signedBy(secret), "k", "tok", time.Now()); err != nil {
					t.Errorf("a proof signed with %.4s…: %v", secret, err)
				}
			}
			for _, secret := range tc.retired {
				if _, err := s.Verify(signedBy(secret), "k", "tok", time.Now()); !errors.Is(err, lock.ErrProofRetired) {
					t.Errorf("a proof signed with %.4s…: %v, want retired", secret, err)
				}
			}
			// New proofs are signed with the first line's secret.
			first := strings.Fields(tc.file)[0]
			only, _ := lock.NewSigner([]byte(first))
			if _, err := only.Verify(s.Sign(claim, "tok"), "k", "tok", time.Now()); err != nil {
				t.Errorf("a new proof is not signed with the first line's secret: %v", err)
			}
		})
	}
}

// TestDerivedLeaseSecretIsStable pins the secret derived from an auth
// file's content: every process, of this build or another, with the same
// file derives the same one; another file, another secret.
func TestDerivedLeaseSecretIsStable(t *testing.T) {
	sum := sha256.Sum256(derivedLeaseSecret([]byte(mcpKeysYAML)))
	if got, want := hex.EncodeToString(sum[:8]), "622b570fba5f4479"; got != want {
		t.Fatalf("the secret derived from the auth file changed (its hash %s, was %s): every replica of another version would refuse this one's proofs", got, want)
	}
	if bytes.Equal(derivedLeaseSecret([]byte(mcpKeysYAML)), derivedLeaseSecret([]byte(dashKeysYAML))) {
		t.Fatal("two auth files derive one secret")
	}
}

func TestServeRefusesABadLeaseSecretFile(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	_ = os.WriteFile(short, []byte("hunter2\n"), 0o600)
	for _, path := range []string{short, filepath.Join(dir, "missing")} {
		var out, errOut lockdtest.Buffer
		err := run(context.Background(), []string{"lockd", "serve", "--listen", "127.0.0.1:0", "--lease-secret-file", path},
			func(string) string { return "" }, &out, &errOut)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitUsage || !strings.Contains(ee.msg, "--lease-secret-file") {
			t.Fatalf("%s: err = %v, want a usage error naming --lease-secret-file", path, err)
		}
		if strings.Contains(ee.msg+out.String()+errOut.String(), "hunter2") {
			t.Fatal("the secret was printed")
		}
	}
}

// keyedPost posts body to url with an API key and decodes the answer.
func keyedPost(t *testing.T, url, key, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(res.Body).Decode(&m)
	return res.StatusCode, m
}

// TestServeReplicasShareLeaseSecret: two replicas with the same secret
// (one lease secret file, or one auth file) verify each other's proofs:
// a renewal through the second takes the value from the first's proof,
// which it can do only if the proof verifies there. Replicas with random
// secrets cannot, and say so at start. No secret or proof is logged.
func TestServeReplicasShareLeaseSecret(t *testing.T) {
	rs := redistest.Start(t)
	secretFile := filepath.Join(t.TempDir(), "lease-secret")
	_ = os.WriteFile(secretFile, []byte(leaseSecretA+"\n"), 0o600)
	fileSigner, _ := parseLeaseSecrets([]byte(leaseSecretA))
	authSigner, _ := loadLeaseProofs("", []byte(mcpKeysYAML))
	for _, tc := range []struct {
		name   string
		env    map[string]string
		args   []string
		key    string
		signer *lock.Signer // nil: random secrets
	}{
		{"secret file", map[string]string{"LOCKD_REDIS": rs.URL()}, []string{"--lease-secret-file", secretFile}, "", fileSigner},
		{"secret file from the environment", map[string]string{"LOCKD_REDIS": rs.URL(), "LOCKD_LEASE_SECRET_FILE": secretFile}, nil, "", fileSigner},
		{"auth file", map[string]string{"LOCKD_REDIS": rs.URL(), "LOCKD_AUTH_YAML": mcpKeysYAML}, nil, "ops-admin-key-0123456789", authSigner.signer},
		{"random", map[string]string{"LOCKD_REDIS": rs.URL()}, nil, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := startServe(t, tc.env, tc.args...), startServe(t, tc.env, tc.args...)
			key := "proof:" + strings.ReplaceAll(tc.name, " ", "-")
			status, l := keyedPost(t, a.url+"/v1/locks/"+key+"/acquire", tc.key, `{"ttl_ms":20000,"value":{"n":1}}`)
			proof, _ := l["proof"].(string)
			if status != 200 || proof == "" {
				t.Fatalf("acquire: %d %v", status, l)
			}
			token := l["token"].(string)
			status, r := keyedPost(t, b.url+"/v1/locks/"+key+"/renew", tc.key, `{"token":"`+token+`","proof":"`+proof+`"}`)
			renewed, _ := r["proof"].(string)
			if status != 200 || renewed == "" || renewed == proof {
				t.Fatalf("renew through the other replica: %d %v", status, r)
			}
			if tc.signer != nil {
				c, err := tc.signer.Verify(renewed, key, token, time.Now())
				if err != nil || c.Value != `{"n":1}` || c.ValueUnknown {
					t.Fatalf("the second replica's proof: %+v, %v: it did not verify the first's", c, err)
				}
			}
			for _, inst := range []*instance{a, b} {
				out := inst.out.String()
				if strings.Contains(out, proof) || strings.Contains(out, renewed) || strings.Contains(out, leaseSecretA) {
					t.Fatalf("the log shows a proof or the secret:\n%s", out)
				}
				if warned := strings.Contains(out, "random secret of this process"); warned != (tc.signer == nil) {
					t.Fatalf("warned of a random secret: %v, want %v:\n%s", warned, tc.signer == nil, out)
				}
			}
		})
	}
}

// TestCLIProofs: `acquire --json` and `renew --json` print the lease's
// proof; renew and release take it back with --proof or LOCKD_PROOF, and
// the server got it (the renewal's proof carries the value from it), for
// a lock and a semaphore's permit.
func TestCLIProofs(t *testing.T) {
	ls := startCLIServer(t)
	for _, tc := range []struct {
		name     string
		noun     []string
		acquire  []string
		resource string
	}{
		{"lock", nil, nil, "cli:proof"},
		{"permit", []string{"sem"}, []string{"--limit", "2"}, "sem/cli:proof"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"LOCKD_SERVER": ls.url}
			key := strings.TrimPrefix(tc.resource, "sem/")
			args := append(append(append([]string{}, tc.noun...), "acquire", "--json", "--value", `{"n":1}`), tc.acquire...)
			code, out, errOut := cli(t, env, append(args, key)...)
			var l struct{ Token, Proof string }
			if code != exitOK || json.Unmarshal([]byte(out), &l) != nil || l.Proof == "" {
				t.Fatalf("acquire --json: %d %s %s", code, out, errOut)
			}
			renew := func(env map[string]string, extra ...string) string {
				t.Helper()
				code, out, errOut := cli(t, env, append(append(append(append([]string{}, tc.noun...), "renew", "--json", "--token", l.Token), extra...), key)...)
				var r struct{ Proof string }
				if code != exitOK || json.Unmarshal([]byte(out), &r) != nil || r.Proof == "" {
					t.Fatalf("renew --json: %d %s %s", code, out, errOut)
				}
				c, err := lockdtest.Signer().Verify(r.Proof, tc.resource, l.Token, time.Now())
				if err != nil {
					t.Fatalf("renewal's proof: %v", err)
				}
				if c.Value != `{"n":1}` {
					t.Fatalf("renewal's claim %+v: the server did not get the proof sent", c)
				}
				return r.Proof
			}
			p := renew(env, "--proof", l.Proof)
			p = renew(map[string]string{"LOCKD_SERVER": ls.url, "LOCKD_PROOF": p})
			if code, out, errOut := cli(t, env, append(append(append([]string{}, tc.noun...), "release", "--token", l.Token, "--proof", p), key)...); code != exitOK {
				t.Fatalf("release --proof: %d %s %s", code, out, errOut)
			}
		})
	}
}
