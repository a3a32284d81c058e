package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/client"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/server"
)

// fixture is a real lockd on a real Redis with the MCP endpoint mounted,
// and a Go client of its REST API.
type fixture struct {
	ld    *lockdtest.Lockd
	agent *HTTP
	rest  *client.Client
	ttl   time.Duration
}

type mountFunc func(chi.Router)

func (f mountFunc) Routes(r chi.Router) { f(r) }

func (mountFunc) KindOf(*http.Request) lock.Kind { return 0 }

func start(t *testing.T, ttl time.Duration, authYAML string) *fixture {
	t.Helper()
	var keys *auth.Keyring
	if authYAML != "" {
		var err error
		if keys, err = auth.Parse([]byte(authYAML)); err != nil {
			t.Fatal(err)
		}
	}
	f := &fixture{ttl: ttl}
	f.agent = NewHTTP(context.Background(), Options{TTL: ttl, Version: "test"})
	t.Cleanup(f.agent.Close)
	f.ld = lockdtest.Start(t, lockdtest.Options{
		Configure: func(c *server.Config) { c.Keys = keys },
		Dashboard: func(*lock.Engine, zerolog.Logger) server.Dashboard {
			return mountFunc(func(r chi.Router) {
				// The server is built after its routes are asked for.
				f.agent.Mount(r, func(next http.Handler) http.Handler {
					return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						f.ld.Server.RequireKey(next).ServeHTTP(w, r)
					})
				})
			})
		},
	})
	rest, err := client.New(f.ld.URL, client.WithRetry(0), client.WithAPIKey("admin-key-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	f.rest = rest
	return f
}

// bearer adds an API key to every request, as an agent host configured
// with headers does; cut makes it fail every request and abort the open
// ones, as a vanished agent's network does.
type bearer struct {
	key string
	mu  sync.Mutex
	cut bool
	all []context.CancelFunc
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	b.mu.Lock()
	if b.cut {
		b.mu.Unlock()
		return nil, errors.New("cut")
	}
	ctx, cancel := context.WithCancel(r.Context())
	b.all = append(b.all, cancel)
	key := b.key
	b.mu.Unlock()
	r = r.Clone(ctx)
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (b *bearer) vanish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cut = true
	for _, c := range b.all {
		c()
	}
}

// agentConn is one agent: an MCP client session over a transport.
type agentConn struct {
	cs  *sdk.ClientSession
	net *bearer // HTTP only
}

// connect starts an agent named name over transport ("http" or "stdio")
// with API key key.
func (f *fixture) connect(t *testing.T, transport, name, key string) *agentConn {
	t.Helper()
	ctx := context.Background()
	c := sdk.NewClient(&sdk.Implementation{Name: name, Version: "1"}, nil)
	a := &agentConn{}
	var tr sdk.Transport
	switch transport {
	case "http":
		a.net = &bearer{key: key}
		tr = &sdk.StreamableClientTransport{Endpoint: f.ld.URL + "/mcp", HTTPClient: &http.Client{Transport: a.net}, MaxRetries: -1}
	case "stdio":
		toServer, fromClient := io.Pipe()
		fromServer, toClient := io.Pipe()
		done := make(chan error, 1)
		go func() {
			done <- ServeStdio(ctx, f.ld.URL, key, Options{TTL: f.ttl}, toServer, toClient)
		}()
		t.Cleanup(func() {
			_ = fromClient.Close()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("ServeStdio: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("ServeStdio did not return after its input ended")
			}
		})
		tr = &sdk.IOTransport{Reader: fromServer, Writer: fromClient}
	}
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("%s: connect: %v", name, err)
	}
	a.cs = cs
	t.Cleanup(func() { _ = cs.Close() })
	return a
}

// call calls a tool, which must answer (as a result or a tool error).
func (a *agentConn) call(t *testing.T, tool string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	res, err := a.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", tool, err)
	}
	return res
}

// out decodes a result's structured content; it must not be a tool error.
func out[T any](t *testing.T, res *sdk.CallToolResult) T {
	t.Helper()
	var v T
	if res.IsError {
		t.Fatalf("tool error: %s", textOf(res))
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	if strings.Contains(textOf(res), "\n") || textOf(res) == "" {
		t.Errorf("the text is not one line: %q", textOf(res))
	}
	return v
}

func textOf(res *sdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, " ")
}

var transports = []string{"http", "stdio"}

func TestToolsList(t *testing.T) {
	f := start(t, 5*time.Second, "")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			a := f.connect(t, tr, "lister", "")
			res, err := a.cs.ListTools(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"claim", "renew", "release", "who_holds", "list_claims", "wait_until_free", "campaign", "leader", "resign", "request_release"}
			got := map[string]*sdk.Tool{}
			for _, tool := range res.Tools {
				got[tool.Name] = tool
			}
			for _, name := range want {
				tool := got[name]
				switch {
				case tool == nil:
					t.Errorf("no tool %s", name)
				case len(tool.Description) < 40:
					t.Errorf("%s: description %q tells an agent little", name, tool.Description)
				case tool.InputSchema == nil || tool.OutputSchema == nil:
					t.Errorf("%s: input or output schema missing", name)
				}
			}
			if len(got) != len(want) {
				t.Errorf("tools %v, want %v", res.Tools, want)
			}
			b, _ := json.Marshal(got["claim"].InputSchema)
			for _, field := range []string{`"key"`, `"wait_ms"`, `"ttl_ms"`, `"note"`, `"required":["key"]`} {
				if !strings.Contains(string(b), field) {
					t.Errorf("claim's input schema lacks %s: %s", field, b)
				}
			}
		})
	}
}

// Two agents, one file: the second is refused with the holder's name and
// time left, waits, and is granted when the first releases; then granted
// again when the holder's MCP session ends.
func TestTwoAgentsOneFile(t *testing.T) {
	f := start(t, 5*time.Second, "")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			key := "mcp:" + tr + ":src:main.go"
			a := f.connect(t, tr, "agent-a", "")
			b := f.connect(t, tr, "agent-b", "")

			got := out[Claim](t, a.call(t, "claim", map[string]any{"key": key, "note": "refactoring the parser"}))
			if !got.Granted || got.Owner != "agent-a" || got.Fence == 0 || got.Lives != "session" {
				t.Fatalf("a's claim: %+v", got)
			}
			// The dashboard and REST show the claim under the agent's name,
			// with its note.
			st, err := f.rest.State(context.Background(), key)
			if err != nil || st.Owner != "agent-a" || st.Value == nil || string(*st.Value) != `"refactoring the parser"` {
				t.Fatalf("state: %+v %v", st, err)
			}

			res := b.call(t, "claim", map[string]any{"key": key})
			refused := out[Claim](t, res)
			if refused.Granted || refused.Code != "lock_held" || refused.Holder != "agent-a" || refused.RemainingMs <= 0 || refused.HolderNote != "refactoring the parser" {
				t.Fatalf("b's refusal: %+v", refused)
			}
			if !strings.Contains(textOf(res), "agent-a") {
				t.Errorf("the refusal's text names no holder: %q", textOf(res))
			}
			who := out[KeyState](t, b.call(t, "who_holds", map[string]any{"key": key}))
			if !who.Held || len(who.Holders) != 1 || who.Holders[0].Owner != "agent-a" || who.Holders[0].Note != "refactoring the parser" || who.Holders[0].Yours {
				t.Fatalf("who_holds: %+v", who)
			}

			// b waits; a releases; b is granted.
			granted := make(chan Claim, 1)
			go func() {
				res, err := b.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "claim", Arguments: map[string]any{"key": key, "wait_ms": 30000}})
				var c Claim
				if err == nil && !res.IsError {
					bb, _ := json.Marshal(res.StructuredContent)
					_ = json.Unmarshal(bb, &c)
				}
				granted <- c
			}()
			lockdtest.Eventually(t, func() bool {
				st, err := f.rest.State(context.Background(), key)
				return err == nil && len(st.Queue) == 1
			}, 10*time.Second, "b waiting")
			if r := out[Released](t, a.call(t, "release", map[string]any{"key": key})); !r.Released {
				t.Fatalf("release: %+v", r)
			}
			select {
			case c := <-granted:
				if !c.Granted || c.Owner != "agent-b" {
					t.Fatalf("b's wait: %+v", c)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("b was not granted within 10 s of a's release")
			}

			// a waits; b's MCP session ends; a is granted at once.
			granted2 := make(chan Claim, 1)
			go func() {
				res, err := a.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "claim", Arguments: map[string]any{"key": key, "wait_ms": 30000}})
				var c Claim
				if err == nil && !res.IsError {
					bb, _ := json.Marshal(res.StructuredContent)
					_ = json.Unmarshal(bb, &c)
				}
				granted2 <- c
			}()
			lockdtest.Eventually(t, func() bool {
				st, err := f.rest.State(context.Background(), key)
				return err == nil && len(st.Queue) == 1
			}, 10*time.Second, "a waiting")
			closed := time.Now()
			if err := b.cs.Close(); err != nil {
				t.Logf("close: %v", err)
			}
			select {
			case c := <-granted2:
				if !c.Granted || c.Owner != "agent-a" {
					t.Fatalf("a's wait: %+v", c)
				}
				t.Logf("%s: b's session closed, a granted %v later", tr, time.Since(closed))
			case <-time.After(10 * time.Second):
				t.Fatal("a was not granted within 10 s of b's session ending")
			}
		})
	}
}

// An agent over HTTP that vanishes (no DELETE, its connections cut) lets
// go of its claims within the TTL.
func TestVanishedAgentLetsGo(t *testing.T) {
	const ttl = 2 * time.Second
	f := start(t, ttl, "")
	key := "mcp:vanish:task:7"
	a := f.connect(t, "http", "agent-a", "")
	b := f.connect(t, "http", "agent-b", "")
	if c := out[Claim](t, a.call(t, "claim", map[string]any{"key": key})); !c.Granted {
		t.Fatalf("a: %+v", c)
	}
	// b keeps its session alive while it waits: its wait is a request
	// in progress.
	granted := make(chan time.Time, 1)
	go func() {
		res, err := b.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "claim", Arguments: map[string]any{"key": key, "wait_ms": 20000}})
		if err == nil && !res.IsError {
			granted <- time.Now()
		}
		close(granted)
	}()
	lockdtest.Eventually(t, func() bool {
		st, err := f.rest.State(context.Background(), key)
		return err == nil && len(st.Queue) == 1
	}, 10*time.Second, "b waiting")
	gone := time.Now()
	a.net.vanish()
	at, ok := <-granted
	if !ok {
		t.Fatal("b was not granted")
	}
	d := at.Sub(gone)
	t.Logf("a vanished; b granted %v later (TTL %v)", d, ttl)
	// The contract: within the TTL. Allow the scheduling of a loaded
	// machine on top.
	if d > ttl+2*time.Second {
		t.Fatalf("b granted %v after a vanished; the TTL is %v", d, ttl)
	}
}

// A claim with a TTL of its own lapses unless renewed, and renew moves it.
func TestClaimWithTTL(t *testing.T) {
	f := start(t, 5*time.Second, "")
	a := f.connect(t, "http", "agent-a", "")
	key := "mcp:ttl:task:1"
	c := out[Claim](t, a.call(t, "claim", map[string]any{"key": key, "ttl_ms": 60000}))
	if !c.Granted || c.Lives != "ttl" || c.TTLMs != 60000 {
		t.Fatalf("claim: %+v", c)
	}
	r := out[Claim](t, a.call(t, "renew", map[string]any{"key": key, "ttl_ms": 120000, "note": map[string]any{"step": 2}}))
	if !r.Granted || r.Fence != c.Fence {
		t.Fatalf("renew: %+v", r)
	}
	st, err := f.rest.State(context.Background(), key)
	if err != nil || st.TtlMs != 120000 || st.Value == nil || string(*st.Value) != `{"step":2}` {
		t.Fatalf("state after renew: %+v %v", st, err)
	}
	// Again: the same claim, no re-entry.
	if again := out[Claim](t, a.call(t, "claim", map[string]any{"key": key})); !again.Granted || again.Fence != c.Fence {
		t.Fatalf("claim again: %+v", again)
	}
	// Closing the session releases it too.
	_ = a.cs.Close()
	lockdtest.Eventually(t, func() bool {
		_, err := f.rest.State(context.Background(), key)
		return errors.Is(err, client.ErrNotFound)
	}, 10*time.Second, "the TTL claim released with the session")
}

func TestListAndElection(t *testing.T) {
	f := start(t, 5*time.Second, "")
	a := f.connect(t, "stdio", "agent-a", "")
	b := f.connect(t, "http", "agent-b", "")
	for _, k := range []string{"mcp:list:a", "mcp:list:b"} {
		out[Claim](t, a.call(t, "claim", map[string]any{"key": k, "note": "busy"}))
	}
	l := out[Listing](t, b.call(t, "list_claims", map[string]any{"prefix": "mcp:list:"}))
	if len(l.Claims) != 2 || l.Claims[0].Holders[0].Owner != "agent-a" {
		t.Fatalf("list: %+v", l)
	}
	if fr := out[Free](t, b.call(t, "wait_until_free", map[string]any{"key": "mcp:list:a", "wait_ms": 100})); fr.Free || fr.Holder != "agent-a" {
		t.Fatalf("wait_until_free while held: %+v", fr)
	}
	out[Released](t, a.call(t, "release", map[string]any{"key": "mcp:list:a"}))
	if fr := out[Free](t, b.call(t, "wait_until_free", map[string]any{"key": "mcp:list:a", "wait_ms": 5000})); !fr.Free {
		t.Fatalf("wait_until_free after release: %+v", fr)
	}

	if ld := out[Leadership](t, a.call(t, "campaign", map[string]any{"election": "mcp:coordinator", "note": "a"})); !ld.Leading || ld.Leader != "agent-a" || ld.Term == 0 {
		t.Fatalf("campaign: %+v", ld)
	}
	if ld := out[Leadership](t, b.call(t, "campaign", map[string]any{"election": "mcp:coordinator"})); ld.Leading || ld.Leader != "agent-a" {
		t.Fatalf("b's campaign: %+v", ld)
	}
	if st := out[ElectionState](t, b.call(t, "leader", map[string]any{"election": "mcp:coordinator"})); st.Leader != "agent-a" || st.Note != "a" {
		t.Fatalf("leader: %+v", st)
	}
	out[Resigned](t, a.call(t, "resign", map[string]any{"election": "mcp:coordinator"}))
	if ld := out[Leadership](t, b.call(t, "campaign", map[string]any{"election": "mcp:coordinator", "wait_ms": 5000})); !ld.Leading || ld.Leader != "agent-b" {
		t.Fatalf("b's campaign after a resigned: %+v", ld)
	}
}

// Bad input is a tool error that names the field: never a protocol error.
func TestBadArguments(t *testing.T) {
	f := start(t, 5*time.Second, "")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			a := f.connect(t, tr, "agent-a", "")
			tests := []struct {
				tool  string
				args  map[string]any
				field string
			}{
				{"claim", map[string]any{}, "key"},
				{"claim", map[string]any{"key": "src/main.go"}, "src:main.go"},
				{"claim", map[string]any{"key": ""}, "key"},
				{"claim", map[string]any{"key": "ok", "wait_ms": "soon"}, "wait_ms"},
				{"claim", map[string]any{"key": "ok", "wait_ms": -1}, "wait_ms"},
				{"claim", map[string]any{"key": "ok", "wait_ms": 3600000}, "wait_ms"},
				{"claim", map[string]any{"key": "ok", "ttl_ms": 5}, "ttl_ms"},
				{"claim", map[string]any{"key": "ok", "note": strings.Repeat("x", 5000)}, "note"},
				{"claim", map[string]any{"key": "ok", "agent": strings.Repeat("\x01", 3)}, "agent"},
				{"claim", map[string]any{"key": "ok", "colour": "red"}, "colour"},
				{"release", map[string]any{"key": "mcp:never:held"}, "mcp:never:held"},
				{"renew", map[string]any{"key": "mcp:never:held"}, "mcp:never:held"},
				{"list_claims", map[string]any{"limit": 5000}, "limit"},
				{"list_claims", map[string]any{"prefix": "a/b"}, "prefix"},
				{"wait_until_free", map[string]any{"key": "ok", "wait_ms": 9999999}, "wait_ms"},
				{"campaign", map[string]any{"election": "no/slash"}, "election"},
				{"who_holds", map[string]any{"key": strings.Repeat("k", 201)}, "key"},
				{"request_release", map[string]any{"key": "a/b"}, "a:b"},
				{"request_release", map[string]any{"key": "ok", "reason": strings.Repeat("r", 600)}, "reason"},
			}
			for _, tt := range tests {
				res := a.call(t, tt.tool, tt.args)
				if !res.IsError {
					t.Errorf("%s %v: not a tool error: %s", tt.tool, tt.args, textOf(res))
					continue
				}
				if msg := textOf(res); !strings.Contains(msg, tt.field) {
					t.Errorf("%s %v: the error does not name %s: %s", tt.tool, tt.args, tt.field, msg)
				}
			}
		})
	}
}

const authYAML = `
keys:
  - name: admin
    key: admin-key-0123456789
    scopes: [admin]
  - name: agent-ci
    key: agent-key-0123456789
    scopes: [write]
    prefixes: ["task:"]
    max_waiters: 1
`

// /mcp is behind the API's auth: 401 without a key or with a wrong one;
// a key's scopes, prefixes and quotas bound its tools as they bound REST.
func TestAuth(t *testing.T) {
	f := start(t, 5*time.Second, authYAML)
	for _, key := range []string{"", "wrong-key"} {
		req, _ := http.NewRequest(http.MethodPost, f.ld.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Bearer") || !strings.Contains(string(body), "unauthorized") {
			t.Errorf("key %q: %d %s %s", key, res.StatusCode, res.Header.Get("WWW-Authenticate"), body)
		}
		c := sdk.NewClient(&sdk.Implementation{Name: "intruder", Version: "1"}, nil)
		tr := &sdk.StreamableClientTransport{Endpoint: f.ld.URL + "/mcp", HTTPClient: &http.Client{Transport: &bearer{key: key}}, MaxRetries: -1}
		if cs, err := c.Connect(context.Background(), tr, nil); err == nil {
			_ = cs.Close()
			t.Errorf("key %q: the SDK's client connected", key)
		}
	}

	// lockd mcp without a key (or a wrong one) serves the protocol, and
	// every tool says why lockd refuses it.
	for _, key := range []string{"", "wrong-key-0123456789"} {
		a := f.connect(t, "stdio", "keyless", key)
		res := a.call(t, "claim", map[string]any{"key": "task:x"})
		if !res.IsError || !strings.Contains(textOf(res), "API key") {
			t.Errorf("stdio with key %q: %s", key, textOf(res))
		}
	}

	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			a := f.connect(t, tr, "agent-a", "agent-key-0123456789")
			if c := out[Claim](t, a.call(t, "claim", map[string]any{"key": "task:" + tr})); !c.Granted {
				t.Fatalf("claim in its prefix: %+v", c)
			}
			res := a.call(t, "claim", map[string]any{"key": "deploy:prod"})
			if !res.IsError || !strings.Contains(textOf(res), "prefixes") {
				t.Fatalf("claim outside its prefixes: %s", textOf(res))
			}
			// Its quota of waiting requests is 1: a second wait at once is
			// refused, as REST refuses it.
			b := f.connect(t, tr, "agent-b", "admin-key-0123456789")
			out[Claim](t, b.call(t, "claim", map[string]any{"key": "task:q:" + tr}))
			out[Claim](t, b.call(t, "claim", map[string]any{"key": "task:r:" + tr}))
			var refused atomic.Int32
			var wg sync.WaitGroup
			for _, k := range []string{"task:q:" + tr, "task:r:" + tr} {
				wg.Go(func() {
					res, err := a.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "claim", Arguments: map[string]any{"key": k, "wait_ms": 3000}})
					if err == nil && res.IsError && strings.Contains(textOf(res), "waiting requests") {
						refused.Add(1)
					}
				})
			}
			wg.Wait()
			if refused.Load() != 1 {
				t.Fatalf("%d of two waits over a quota of one were refused, want 1", refused.Load())
			}
		})
	}
}

// An MCP session over HTTP belongs to the key that began it.
func TestSessionBoundToKey(t *testing.T) {
	f := start(t, 5*time.Second, authYAML)
	a := f.connect(t, "http", "agent-a", "agent-key-0123456789")
	out[Claim](t, a.call(t, "claim", map[string]any{"key": "task:bound"}))
	a.net.mu.Lock()
	a.net.key = "admin-key-0123456789"
	a.net.mu.Unlock()
	if _, err := a.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "release", Arguments: map[string]any{"key": "task:bound"}}); err == nil {
		t.Fatal("another key used the session")
	}
}

// Session ids that name no session (any client may send one) are not
// remembered for ever.
func TestForgetsUnknownSessionIDs(t *testing.T) {
	f := start(t, 400*time.Millisecond, "")
	for i := range 20 {
		req, _ := http.NewRequest(http.MethodPost, f.ld.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", "bogus-"+strings.Repeat("x", i))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound {
			t.Fatalf("an unknown session: %d", res.StatusCode)
		}
	}
	lockdtest.Eventually(t, func() bool {
		f.agent.mu.Lock()
		defer f.agent.mu.Unlock()
		return len(f.agent.life) == 0
	}, 10*time.Second, "the unknown ids forgotten")
}

// An agent over HTTP that keeps its event stream open but calls nothing
// keeps its claims for longer than the TTL: only silence ends a session.
func TestIdleAgentKeepsClaims(t *testing.T) {
	const ttl = 2 * time.Second
	f := start(t, ttl, "")
	a := f.connect(t, "http", "agent-a", "")
	out[Claim](t, a.call(t, "claim", map[string]any{"key": "mcp:idle:task"}))
	time.Sleep(2 * ttl)
	st, err := f.rest.State(context.Background(), "mcp:idle:task")
	if err != nil || st.Owner != "agent-a" {
		t.Fatalf("after %v idle: %+v %v", 2*ttl, st, err)
	}
	if c := out[Claim](t, a.call(t, "claim", map[string]any{"key": "mcp:idle:task"})); !c.Granted {
		t.Fatalf("the agent's session after %v idle: %+v", 2*ttl, c)
	}
}

// TestRequestRelease: an agent that needs a key another holds asks it to
// step aside, with a reason; the holder sees the request on its claim
// (who_holds), and a key nobody holds says so.
func TestRequestRelease(t *testing.T) {
	f := start(t, 5*time.Second, "")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			key := "mcp:" + tr + ":task:7"
			a := f.connect(t, tr, "agent-a", "")
			b := f.connect(t, tr, "agent-b", "")
			if c := out[Claim](t, a.call(t, "claim", map[string]any{"key": key, "note": "long refactor"})); !c.Granted {
				t.Fatalf("a's claim: %+v", c)
			}
			res := b.call(t, "request_release", map[string]any{"key": key, "reason": "release blocker"})
			rq := out[ReleaseRequest](t, res)
			if !rq.Requested || rq.Holder != "agent-a" || rq.Fence == 0 || !strings.Contains(textOf(res), "agent-a") {
				t.Fatalf("request: %+v %q", rq, textOf(res))
			}
			who := out[KeyState](t, a.call(t, "who_holds", map[string]any{"key": key}))
			if len(who.Holders) != 1 || !who.Holders[0].Yours || who.Holders[0].ReleaseRequested == nil ||
				who.Holders[0].ReleaseRequested.By != "agent-b" || who.Holders[0].ReleaseRequested.Reason != "release blocker" {
				t.Fatalf("the holder's view: %+v", who)
			}
			// The holder decides: it still holds the key.
			if c := out[Claim](t, b.call(t, "claim", map[string]any{"key": key})); c.Granted || c.Holder != "agent-a" {
				t.Fatalf("a request is not a release: %+v", c)
			}
			free := out[ReleaseRequest](t, b.call(t, "request_release", map[string]any{"key": key + ":free"}))
			if free.Requested {
				t.Fatalf("a key nobody holds: %+v", free)
			}
		})
	}
}
