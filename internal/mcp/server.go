package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/client"
)

// Options configure an MCP server.
type Options struct {
	// Agent is the name the agent's claims are shown under; empty: the
	// name its MCP client gives (clientInfo), else lockd's default (the
	// API key's name). A tool call may name another (its agent field).
	Agent string
	// TTL is the agent's lockd session's: how long its claims outlive it
	// when it vanishes without a word. 0: 30 s.
	TTL time.Duration
	// Version is lockd's, told to MCP clients.
	Version string
}

func (o Options) ttl() time.Duration {
	if o.TTL <= 0 {
		return 30 * time.Second
	}
	return o.TTL
}

// instructions tell the agent what the server is for.
const instructions = `lockd coordinates agents that share a repository or a task list: claim a file or task (claim) before you change it, release it (release) when done.
A refused claim names who holds the key and for how long: work on something else, or claim with wait_ms to wait your turn.
Your claims last as long as this MCP session: if you stop or disconnect they are let go within the TTL. Use who_holds and list_claims to see what others work on.`

// protocolVersions are the MCP versions offered: those with sessions.
// Claims belong to a session, so 2026-07-28 (sessionless) is not offered;
// its clients fall back to the initialize handshake, as the spec says.
var protocolVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26"}

func newServer(opts Options, t *tools) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "lockd", Title: "lockd: claims for agents", Version: opts.Version}, &sdk.ServerOptions{
		Instructions: instructions,
		// Tools only: no logging capability.
		Capabilities:              &sdk.ServerCapabilities{},
		SupportedProtocolVersions: protocolVersions,
	})
	t.add(s)
	return s
}

// agentName is the default owner of a session's claims.
func agentName(opts Options, ss *sdk.ServerSession) string {
	if opts.Agent != "" {
		return ownerName(opts.Agent)
	}
	if p := ss.InitializeParams(); p != nil && p.ClientInfo != nil {
		return ownerName(p.ClientInfo.Name)
	}
	return ""
}

// dial is lockd at serverURL through rt (nil: the network), with apiKey.
func dial(serverURL string, rt http.RoundTripper, apiKey string) (lockd, error) {
	hc := &http.Client{Transport: rt}
	// A 503 is retried for a few seconds: an agent asked a question and
	// waits for its answer, and a refusal it can retry is worth more than
	// a long silence.
	c, err := client.New(serverURL, client.WithHTTPClient(hc), client.WithAPIKey(apiKey), client.WithRetry(5*time.Second))
	if err != nil {
		return lockd{}, err
	}
	opts := []api.ClientOption{api.WithHTTPClient(hc)}
	if apiKey != "" {
		opts = append(opts, api.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+apiKey)
			return nil
		}))
	}
	raw, err := api.NewClient(serverURL, opts...)
	if err != nil {
		return lockd{}, err
	}
	return lockd{c: c, raw: raw}, nil
}

// ServeStdio serves one agent on in and out (lockd mcp: stdin and stdout)
// until in ends or ctx does, with the lockd at serverURL and apiKey. When
// it returns, the agent's claims are let go; when its process is killed
// instead, they lapse within opts.TTL.
func ServeStdio(ctx context.Context, serverURL, apiKey string, opts Options, in io.ReadCloser, out io.WriteCloser) error {
	ld, err := dial(serverURL, nil, apiKey)
	if err != nil {
		return err
	}
	// Waits in flight give up when the agent hangs up (in ends), rather
	// than holding the session open for up to a minute.
	gone, hangUp := context.WithCancel(ctx)
	defer hangUp()
	var mu sync.Mutex
	var a *agent
	t := &tools{agentOf: func(_ context.Context, ss *sdk.ServerSession, _ *sdk.RequestExtra) (*agent, error) {
		mu.Lock()
		defer mu.Unlock()
		if a == nil {
			a = newAgent(gone, ld, agentName(opts, ss), opts.ttl())
		}
		return a, nil
	}}
	err = newServer(opts, t).Run(ctx, &sdk.IOTransport{Reader: onEOF{in, hangUp}, Writer: out})
	mu.Lock()
	defer mu.Unlock()
	if a != nil {
		a.end()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// onEOF calls done when the reader ends.
type onEOF struct {
	io.ReadCloser
	done func()
}

func (r onEOF) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if err != nil {
		r.done()
	}
	return n, err
}

// HTTP is the MCP endpoint of lockd serve: MCP's streamable HTTP
// transport, whose tools call the serving lockd's own API with the
// caller's key. Mount it on lockd's router.
type HTTP struct {
	opts    Options
	server  *sdk.Server
	handler http.Handler
	api     http.Handler // lockd's router, set by Mount

	ctx    context.Context // ends with lockd serve: every agent goes
	cancel context.CancelFunc
	done   chan struct{} // closed when the janitor has stopped

	mu     sync.Mutex
	agents map[*sdk.ServerSession]*agent
	life   map[string]*life // by MCP session id
}

// life is what an MCP session over HTTP last showed of its agent.
type life struct {
	open int       // requests in progress, the event stream (GET) included
	last time.Time // when one last began or ended
}

// NewHTTP returns the MCP endpoint; it lets go of every agent's claims
// when ctx ends.
func NewHTTP(ctx context.Context, opts Options) *HTTP {
	h := &HTTP{opts: opts, agents: map[*sdk.ServerSession]*agent{}, life: map[string]*life{}, done: make(chan struct{})}
	h.ctx, h.cancel = context.WithCancel(ctx)
	h.server = newServer(opts, &tools{agentOf: h.agentOf})
	streamable := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return h.server }, &sdk.StreamableHTTPOptions{
		// lockd's router checks the Host (DNS rebinding) by its own
		// rules, --allowed-hosts included.
		DisableLocalhostProtection: true,
		// The API's own limit on a body: a tool call is small.
		MaxRequestBodyBytes: 64 << 10,
	})
	// An MCP session is bound to the API key that began it: a request
	// with its id and another key is refused (403), so that a session id
	// seen in a log cannot be used with another key.
	bound := sdkauth.RequireBearerToken(func(_ context.Context, token string, _ *http.Request) (*sdkauth.TokenInfo, error) {
		sum := sha256.Sum256([]byte(token))
		return &sdkauth.TokenInfo{UserID: hex.EncodeToString(sum[:])}, nil
	}, &sdkauth.RequireBearerTokenOptions{AllowMissingExpiration: true})(streamable)
	h.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
			bound.ServeHTTP(w, r)
			return
		}
		streamable.ServeHTTP(w, r)
	})
	go h.janitor()
	return h
}

// Mount adds the endpoint at /mcp to lockd's router r, behind gate (the
// server's RequireKey): its tools call the API through r itself.
func (h *HTTP) Mount(r chi.Router, gate func(http.Handler) http.Handler) {
	h.api = r
	r.Handle("/mcp", gate(h))
}

// ServeHTTP serves one MCP request, and notes that its session's agent is
// alive.
func (h *HTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id := r.Header.Get("Mcp-Session-Id"); id != "" {
		h.seen(id, 1)
		defer h.seen(id, -1)
		if r.Method == http.MethodDelete {
			// The agent hangs up: its waits in flight give up, so that
			// closing the session does not wait for them.
			h.hangUp(id)
		}
	}
	// The server's write timeout suits the API's waits. The event stream
	// (GET) carries nothing but what this server sends, which is nothing
	// unasked; a tool call may wait up to maxWaitFree.
	deadline := time.Time{}
	if r.Method != http.MethodGet {
		deadline = time.Now().Add(maxWaitFree + 15*time.Second)
	}
	_ = http.NewResponseController(w).SetWriteDeadline(deadline)
	ctx := context.WithValue(r.Context(), originKey{}, origin{remoteAddr: r.RemoteAddr, host: r.Host, tls: r.TLS})
	h.handler.ServeHTTP(w, r.WithContext(ctx))
}

// Close ends every MCP session, letting go of every agent's claims.
func (h *HTTP) Close() {
	h.cancel()
	<-h.done
}

func (h *HTTP) seen(id string, open int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.life[id]
	if l == nil {
		l = &life{}
		h.life[id] = l
	}
	l.open += open
	l.last = time.Now()
}

func (h *HTTP) hangUp(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ss, a := range h.agents {
		if ss.ID() == id {
			a.cancel()
		}
	}
}

// janitor closes, every ttl/4, the MCP sessions that showed no sign of
// life for 3/4 of the TTL, so that a vanished agent's claims are let go
// within the TTL of its last request (or of its event stream's end).
// Agents that keep the event stream open (the Go SDK's client does), or
// call at least every 3/4 TTL, keep their session.
func (h *HTTP) janitor() {
	defer close(h.done)
	ttl := h.opts.ttl()
	tick := time.NewTicker(max(ttl/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-h.ctx.Done():
			var wg sync.WaitGroup
			for ss := range h.server.Sessions() {
				wg.Go(func() { h.close(ss) })
			}
			wg.Wait()
			return
		case <-tick.C:
		}
		now := time.Now()
		live := map[string]bool{}
		for ss := range h.server.Sessions() {
			live[ss.ID()] = true
			if !h.alive(ss.ID(), now, ttl*3/4) {
				go h.close(ss)
			}
		}
		h.forget(live, now, ttl*3/4)
	}
}

// forget drops what was seen of session ids that name no live session
// (ended, or never begun: any id a client sends is counted), once they
// are quiet.
func (h *HTTP) forget(live map[string]bool, now time.Time, gone time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, l := range h.life {
		if !live[id] && l.open == 0 && now.Sub(l.last) >= gone {
			delete(h.life, id)
		}
	}
}

func (h *HTTP) alive(id string, now time.Time, gone time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.life[id]
	switch {
	case l == nil:
		// Just begun (its first answer gave it its id): from now on.
		h.life[id] = &life{last: now}
		return true
	case l.open > 0 || now.Sub(l.last) < gone:
		return true
	}
	delete(h.life, id)
	return false
}

// close ends an MCP session, and with it its agent's claims.
func (h *HTTP) close(ss *sdk.ServerSession) {
	h.mu.Lock()
	a := h.agents[ss]
	h.mu.Unlock()
	if a != nil {
		a.cancel()
	}
	_ = ss.Close()
	if a != nil {
		a.end()
	}
}

// agentOf is the agent of an MCP session, begun at its first tool call
// with the API key of that call (the session is bound to it).
func (h *HTTP) agentOf(ctx context.Context, ss *sdk.ServerSession, extra *sdk.RequestExtra) (*agent, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a := h.agents[ss]; a != nil {
		return a, nil
	}
	if h.ctx.Err() != nil {
		return nil, errClosed
	}
	if h.api == nil {
		return nil, errors.New("the MCP endpoint is not mounted on lockd's router")
	}
	var key string
	if extra != nil {
		key, _ = strings.CutPrefix(extra.Header.Get("Authorization"), "Bearer ")
	}
	ld, err := dial("http://lockd", loopback{api: h.api, origin: originOf(ctx)}, strings.TrimSpace(key))
	if err != nil {
		return nil, err
	}
	a := newAgent(h.ctx, ld, agentName(h.opts, ss), h.opts.ttl())
	h.agents[ss] = a
	go func() {
		_ = ss.Wait()
		a.end()
		h.mu.Lock()
		delete(h.agents, ss)
		delete(h.life, ss.ID())
		h.mu.Unlock()
	}()
	return a, nil
}
