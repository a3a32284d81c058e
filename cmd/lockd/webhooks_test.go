package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockd/lockd/internal/redistest"
)

// Bad webhook files and metrics flags are usage errors that say what is
// wrong, never showing a webhook's secret.
func TestServeWebhooksAndMetricsFlags(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("good.yaml", "webhooks:\n  - url: https://ops.example.com/hook\n    secret: very-secret-0123456789\n    events: [expired, force_released]\n")
	short := file("short.yaml", "webhooks:\n  - url: https://ops.example.com/hook\n    secret: tiny\n")
	local := file("local.yaml", "webhooks:\n  - url: http://127.0.0.1:9000/hook\n    secret: very-secret-0123456789\n")
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string // "" : accepted
	}{
		{[]string{"--webhooks-file", good}, nil, ""},
		{nil, map[string]string{"LOCKD_WEBHOOKS_FILE": good, "LOCKD_METRICS_PREFIX_DEPTH": "2"}, ""},
		{[]string{"--webhooks-file", short}, nil, "secret must be at least 16"},
		{[]string{"--webhooks-file", local}, nil, "needs allow_private: true"},
		{[]string{"--webhooks-file", filepath.Join(dir, "missing.yaml")}, nil, "--webhooks-file"},
		{[]string{"--metrics-prefix-depth", "0"}, nil, "--metrics-prefix-depth"},
		{[]string{"--metrics-max-prefixes", "0"}, nil, "--metrics-max-prefixes"},
		{[]string{"--events-max", "10"}, nil, "--events-max"},
		{[]string{"--events-resume-max", "0"}, nil, "--events-resume-max"},
		{[]string{"--max-event-streams", "0"}, nil, "--max-event-streams"},
		{nil, map[string]string{"LOCKD_MAX_EVENT_STREAMS_PER_API_KEY": "-1"}, "--max-event-streams-per-api-key"},
	} {
		c, err := parseServe(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v %v: %v", tc.args, tc.env, err)
		case tc.want == "" && len(c.webhooks) != 1:
			t.Errorf("%v %v: %d webhooks", tc.args, tc.env, len(c.webhooks))
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		case err != nil && strings.Contains(err.Error(), "tiny"):
			t.Errorf("the error shows the secret: %v", err)
		}
	}
}

// N9 of the second audit: lockd serve warns at start of each webhook
// that goes over plain http:// to another host, and of no other.
func TestServeWarnsOfPlaintextWebhooks(t *testing.T) {
	dir := t.TempDir()
	hooks := filepath.Join(dir, "hooks.yaml")
	if err := os.WriteFile(hooks, []byte(`webhooks:
  - {name: plain, url: "http://ops.example.com/h", secret: very-secret-0123456789}
  - {name: tls, url: "https://ops.example.com/h", secret: very-secret-0123456789}
  - {name: local, url: "http://127.0.0.1:9/h", secret: very-secret-0123456789, allow_private: true}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	inst := startServe(t, nil, "--redis", redistest.Start(t).URL(), "--webhooks-file", hooks)
	var warned []string
	for _, line := range strings.Split(inst.out.String(), "\n") {
		var l struct{ Level, Webhook, Message string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Level == "warn" && strings.Contains(l.Message, "plain http://") {
			warned = append(warned, l.Webhook)
		}
	}
	if fmt.Sprint(warned) != "[plain]" {
		t.Fatalf("warned of %v, want [plain]\n%s", warned, inst.out)
	}
}
