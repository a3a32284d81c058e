// Package mcp serves lockd to AI agents over the Model Context Protocol:
// tools to claim a key (a file, a task) before working on it, renew and
// release it, see who holds what, wait until a key is free, and campaign
// in an election. It is built on the official Go SDK
// (github.com/modelcontextprotocol/go-sdk) and on lockd's Go client, so
// every tool is one or two requests of lockd's REST API: the same auth,
// scopes, prefixes, quotas and validation, whichever transport carries
// the agent.
//
// Two transports share one implementation. `lockd mcp` (ServeStdio) is a
// server on stdin and stdout for an agent host, using the client against
// a remote lockd with one API key. `lockd serve` answers MCP's streamable
// HTTP transport at /mcp (HTTP): each MCP session uses the client with
// the caller's own API key against the serving process itself, through a
// loopback transport into lockd's router, so that a tool call is served
// exactly as the same REST request would be.
//
// Claims belong to the MCP session that made them: each MCP session gets
// a lockd session (created at its first claim, renewed every ttl/3 while
// the MCP session lives, ended when it closes), and a claim is a grant in
// it unless the agent gives it a TTL of its own. An agent that vanishes
// loses everything within the TTL: with stdio its process stops renewing;
// over HTTP an MCP session that shows no sign of life (no open event
// stream, no request) for the TTL is closed.
//
// Caveats: MCP sessions over HTTP live in the memory of the lockd replica
// that began them, so behind a load balancer /mcp needs session affinity
// (on the Mcp-Session-Id header); a replica that stops ends its agents'
// sessions. The 2026-07-28 protocol, which has no sessions, is not
// offered: clients fall back to the initialize handshake of 2025-11-25.
package mcp
