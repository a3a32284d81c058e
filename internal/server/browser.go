package server

import (
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/lockd/lockd/internal/problem"
)

// Browser safety (spec: "Browser safety (all modes)"). A web page that a
// lockd user visits may send requests to lockd's address: cross-site
// "simple" requests need no CORS preflight, and a DNS-rebinding page even
// reads the answers. Three checks keep such pages out, while programs
// (curl, the CLI, the Go client), which send neither Origin nor
// Sec-Fetch-* headers, are unaffected:
//
//   - crossOrigin refuses state-changing requests from another site;
//   - checkBody (validate.go) asks browsers for a JSON content type, which a
//     cross-site page cannot send without a preflight;
//   - checkHost, with auth off, refuses Host names that are not loopback,
//     configured or (beyond loopback) IP addresses (DNS rebinding).

// crossOrigin refuses POST, PUT, DELETE … whose Sec-Fetch-Site or Origin
// says they come from another site, with a 403 problem. GET, HEAD and
// OPTIONS pass: they change nothing.
func crossOrigin() func(http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, problem.ErrCrossOrigin)
	}))
	return cop.Handler
}

// fromBrowser reports whether r carries the headers that only browsers
// send.
func fromBrowser(r *http.Request) bool {
	if r.Header.Get("Origin") != "" {
		return true
	}
	for k := range r.Header {
		if strings.HasPrefix(k, "Sec-Fetch-") {
			return true
		}
	}
	return false
}

// checkHost refuses requests whose Host header is not one this server
// answers to, when Config.CheckHost is set. A DNS-rebinding page reaches
// 127.0.0.1 under its own name, so its requests carry that name as Host.
// The open endpoints are exempt: orchestrators call the probes by IP
// address. They reveal nothing to such a Host (/readyz leaves out the
// Redis nodes: foreignHost).
func (s *Server) checkHost(next http.Handler) http.Handler {
	if !s.cfg.CheckHost {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.hostAllowed(r.Host) {
			next.ServeHTTP(w, r)
			return
		}
		if openPath(r.URL.Path) {
			if x := exchangeOf(r.Context()); x != nil {
				x.foreignHost = true
			}
			next.ServeHTTP(w, r)
			return
		}
		writeError(w, r, problem.ErrUnknownHost)
	})
}

// openPath reports whether path is one of the endpoints that need no key
// and reveal nothing about locks: the probes and the contract.
func openPath(path string) bool {
	return path == "/livez" || path == "/healthz" || path == "/readyz" || path == "/openapi.yaml"
}

// hostAllowed reports whether host (a Host header, with or without a port)
// is localhost, a loopback address (any address with AllowIPHosts) or one
// of Config.AllowedHosts.
func (s *Server) hostAllowed(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), "."))
	if host == "localhost" {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && (ip.IsLoopback() || s.cfg.AllowIPHosts) {
		return true
	}
	return slices.ContainsFunc(s.cfg.AllowedHosts, func(a string) bool { return strings.EqualFold(a, host) })
}
