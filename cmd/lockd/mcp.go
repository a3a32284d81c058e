package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/mcp"
	"github.com/lockd/lockd/internal/server"
)

// mcpCmd is lockd mcp: an MCP server on stdin and stdout for an agent
// host, whose tools claim and release keys on the lockd at --server.
// stdout carries the protocol alone; messages go to stderr.
func mcpCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cf := newClientFlags("mcp", "[--owner NAME] [--ttl 30s]", getenv, stderr)
	owner := cf.fs.String("owner", cf.env.str("owner", ""), "the name the agent's claims are shown under (default: the name its MCP client gives)")
	ttl := cf.fs.Duration("ttl", cf.env.dur("ttl", 30*time.Second), "how long the agent's claims outlive it when it is killed (its lockd session's TTL; renewed every ttl/3 while it runs)")
	if _, err := cf.parse(args); err != nil {
		return err
	}
	if _, err := cf.client(); err != nil {
		return err // a --server that is no URL
	}
	if *ttl < 100*time.Millisecond {
		return usageError("--ttl must be at least 100ms, got %v", *ttl)
	}
	v, _ := buildVersion()
	err := mcp.ServeStdio(ctx, cf.server, cf.apiKey, mcp.Options{Agent: *owner, TTL: *ttl, Version: v}, os.Stdin, nopWriteCloser{stdout})
	if err != nil {
		return fmt.Errorf("mcp: %w", err)
	}
	return nil
}

// withMCP mounts the MCP endpoint (/mcp) beside the dashboard, behind the
// API's own check of the caller's key.
type withMCP struct {
	dash   server.Dashboard
	agents *mcp.HTTP
	gate   func(http.Handler) http.Handler
}

func (m withMCP) Routes(r chi.Router) {
	if m.dash != nil {
		m.dash.Routes(r)
	}
	m.agents.Mount(r, m.gate)
}

// KindOf is the dashboard's: /mcp names no key.
func (m withMCP) KindOf(r *http.Request) lock.Kind {
	if m.dash == nil {
		return 0
	}
	return m.dash.KindOf(r)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
