package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lockd/lockd/internal/redistest"
)

const mcpKeysYAML = `
keys:
  - {name: ops, key: "ops-admin-key-0123456789", scopes: [admin]}
  - {name: agents, key: "agents-key-0123456789", scopes: [write], prefixes: ["repo:", "task:"]}
`

// keyed adds an API key to every request, as an agent host's configured
// headers do.
type keyed string

func (k keyed) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(k))
	return http.DefaultTransport.RoundTrip(r)
}

// mcpAgent connects an MCP client named name to t, the SDK's own client.
func mcpAgent(t *testing.T, name string, tr sdk.Transport) *sdk.ClientSession {
	t.Helper()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: name, Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatalf("%s: connect: %v", name, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func httpAgent(t *testing.T, url, name, key string) *sdk.ClientSession {
	return mcpAgent(t, name, &sdk.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: &http.Client{Transport: keyed(key)}, MaxRetries: -1})
}

// claimResult is what the tests read of a claim's structured answer.
type claimResult struct {
	Granted     bool   `json:"granted"`
	Owner       string `json:"owner"`
	Holder      string `json:"holder"`
	RemainingMs int64  `json:"remaining_ms"`
}

func claimTool(ctx context.Context, cs *sdk.ClientSession, args map[string]any) (claimResult, string, error) {
	var c claimResult
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "claim", Arguments: args})
	if err != nil {
		return c, "", err
	}
	var text string
	for _, ct := range res.Content {
		if tc, ok := ct.(*sdk.TextContent); ok {
			text += tc.Text
		}
	}
	if res.IsError {
		return c, text, nil
	}
	b, _ := json.Marshal(res.StructuredContent)
	return c, text, json.Unmarshal(b, &c)
}

// lockd serve answers MCP at /mcp, behind its API keys, on a real Redis:
// tools/list, a refusal naming the holder, a wait granted on release, a
// claim shown on the dashboard under the agent's name with its note.
func TestMCPOverHTTP(t *testing.T) {
	inst := startServe(t, map[string]string{"LOCKD_AUTH_YAML": mcpKeysYAML, "LOCKD_SESSION_SECRET": strings.Repeat("s", 32)},
		"--redis", redistest.Start(t).URL())
	ctx := context.Background()

	res, err := http.Post(inst.url+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), `"code":"unauthorized"`) {
		t.Fatalf("POST /mcp without a key: %d %s", res.StatusCode, body)
	}

	a := httpAgent(t, inst.url, "agent-a", "agents-key-0123456789")
	b := httpAgent(t, inst.url, "agent-b", "agents-key-0123456789")
	tools, err := a.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) < 9 {
		t.Fatalf("tools/list: %v %v", tools, err)
	}
	const key = "repo:src:main.go"
	if c, text, err := claimTool(ctx, a, map[string]any{"key": key, "note": "fixing issue 32"}); err != nil || !c.Granted || c.Owner != "agent-a" {
		t.Fatalf("a's claim: %+v %q %v", c, text, err)
	}
	c, text, err := claimTool(ctx, b, map[string]any{"key": key})
	if err != nil || c.Granted || c.Holder != "agent-a" || c.RemainingMs <= 0 || !strings.Contains(text, "agent-a") {
		t.Fatalf("b's refusal: %+v %q %v", c, text, err)
	}
	if _, text, _ := claimTool(ctx, b, map[string]any{"key": "deploy:prod"}); !strings.Contains(text, "prefixes") {
		t.Fatalf("a claim outside the key's prefixes: %q", text)
	}

	// The dashboard shows the claim under the agent's name, with its note.
	web := noRedirects(t)
	dashLogin(t, web, inst.url, "ops-admin-key-0123456789")
	page, err := web.Get(inst.url + "/ui/locks/" + key)
	if err != nil {
		t.Fatal(err)
	}
	html, _ := io.ReadAll(page.Body)
	page.Body.Close()
	if !strings.Contains(string(html), "agent-a") || !strings.Contains(string(html), "fixing issue 32") {
		t.Fatalf("the dashboard's page of %s lacks the agent or its note:\n%.2000s", key, html)
	}

	granted := make(chan claimResult, 1)
	go func() {
		c, _, _ := claimTool(ctx, b, map[string]any{"key": key, "wait_ms": 30000})
		granted <- c
	}()
	mcpWaitQueued(t, inst.url, key)
	released := time.Now()
	if res, err := a.CallTool(ctx, &sdk.CallToolParams{Name: "release", Arguments: map[string]any{"key": key}}); err != nil || res.IsError {
		t.Fatalf("release: %v %v", res, err)
	}
	select {
	case c := <-granted:
		if !c.Granted || c.Owner != "agent-b" {
			t.Fatalf("b's wait: %+v", c)
		}
		t.Logf("a released; b granted %v later", time.Since(released))
	case <-time.After(15 * time.Second):
		t.Fatal("b was not granted within 15 s of a's release")
	}
}

// mcpWaitQueued waits until a request waits for key (read with the admin key).
func mcpWaitQueued(t *testing.T, url, key string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, url+"/v1/locks/"+key, nil)
		req.Header.Set("Authorization", "Bearer ops-admin-key-0123456789")
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			var st struct{ Queue []any }
			_ = json.NewDecoder(res.Body).Decode(&st)
			res.Body.Close()
			if len(st.Queue) > 0 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("nobody waits for %s after 15 s", key)
}

// lockd mcp on stdio, as an agent host runs it: its claims are let go at
// once when the host closes its stdin, and within --ttl when the process
// is killed. The other agent (over HTTP) is granted then.
func TestMCPStdioProcess(t *testing.T) {
	bin := buildLockd(t)
	inst := startServe(t, map[string]string{"LOCKD_AUTH_YAML": mcpKeysYAML, "LOCKD_SESSION_SECRET": strings.Repeat("s", 32)},
		"--redis", redistest.Start(t).URL())
	const ttl = 2 * time.Second
	ctx := context.Background()
	b := httpAgent(t, inst.url, "agent-b", "agents-key-0123456789")

	for _, end := range []string{"stdin closed", "killed"} {
		t.Run(strings.ReplaceAll(end, " ", "_"), func(t *testing.T) {
			key := "task:" + strings.ReplaceAll(end, " ", "-")
			cmd := exec.Command(bin, "mcp", "--server", inst.url, "--ttl", ttl.String())
			cmd.Env = []string{"LOCKD_API_KEY=agents-key-0123456789"}
			tr := &sdk.CommandTransport{Command: cmd}
			a := mcpAgent(t, "agent-a", tr)
			if c, text, err := claimTool(ctx, a, map[string]any{"key": key}); err != nil || !c.Granted || c.Owner != "agent-a" {
				t.Fatalf("a's claim: %+v %q %v", c, text, err)
			}
			granted := make(chan time.Time, 1)
			go func() {
				if c, _, _ := claimTool(ctx, b, map[string]any{"key": key, "wait_ms": 30000}); c.Granted {
					granted <- time.Now()
				}
				close(granted)
			}()
			mcpWaitQueued(t, inst.url, key)
			stopped := time.Now()
			if end == "killed" {
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			} else {
				_ = a.Close()
			}
			at, ok := <-granted
			if !ok {
				t.Fatal("b was not granted")
			}
			d := at.Sub(stopped)
			t.Logf("lockd mcp %s; b granted %v later (--ttl %v)", end, d, ttl)
			limit := ttl + 2*time.Second // the TTL, and a loaded machine's scheduling
			if end == "stdin closed" {
				limit = 5 * time.Second // at once: the session is ended
			}
			if d > limit {
				t.Fatalf("b granted %v after lockd mcp %s", d, end)
			}
			if c, _, _ := claimTool(ctx, b, map[string]any{"key": key}); !c.Granted {
				t.Fatalf("b's claim again: %+v", c)
			}
			if res, err := b.CallTool(ctx, &sdk.CallToolParams{Name: "release", Arguments: map[string]any{"key": key}}); err != nil || res.IsError {
				t.Fatalf("b's release: %v %v", res, err)
			}
		})
	}
}

// On Redlock, which has no sessions, a claim renews itself while the
// agent's MCP session lives, and goes when it ends.
func TestMCPOnRedlock(t *testing.T) {
	masters := []string{redistest.Start(t).URL(), redistest.Start(t).URL(), redistest.Start(t).URL()}
	inst := startServe(t, nil, "--redlock", strings.Join(masters, ","), "--default-ttl", "3s")
	ctx := context.Background()
	a := httpAgent(t, inst.url, "agent-a", "")
	b := httpAgent(t, inst.url, "agent-b", "")
	if c, text, err := claimTool(ctx, a, map[string]any{"key": "rl:task:1"}); err != nil || !c.Granted {
		t.Fatalf("a's claim: %+v %q %v", c, text, err)
	}
	// Kept past its TTL (3 s) by its watchdog.
	time.Sleep(4 * time.Second)
	if c, text, _ := claimTool(ctx, b, map[string]any{"key": "rl:task:1"}); c.Granted || c.Holder != "agent-a" {
		t.Fatalf("b's claim while a's session lives: %+v %q", c, text)
	}
	_ = a.Close()
	if c, text, _ := claimTool(ctx, b, map[string]any{"key": "rl:task:1", "wait_ms": 5000}); !c.Granted {
		t.Fatalf("b's claim after a's session ended: %+v %q", c, text)
	}
}

// A lockd serve that stops ends its MCP sessions first, while it can still
// release their claims: they do not wait out their TTL (30 s here).
func TestMCPShutdownReleases(t *testing.T) {
	rs := redistest.Start(t)
	inst := startServe(t, nil, "--redis", rs.URL())
	a := httpAgent(t, inst.url, "agent-a", "")
	if c, text, err := claimTool(context.Background(), a, map[string]any{"key": "task:shutdown"}); err != nil || !c.Granted {
		t.Fatalf("claim: %+v %q %v", c, text, err)
	}
	inst.stop()
	select {
	case err := <-inst.result:
		inst.result <- err // for the cleanup's check
	case <-time.After(15 * time.Second):
		t.Fatal("lockd serve did not stop")
	}
	next := startServe(t, nil, "--redis", rs.URL())
	res, err := http.Get(next.url + "/v1/locks/task:shutdown")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Fatalf("the claim after its lockd stopped: %d, want 404 (released)", res.StatusCode)
	}
}
