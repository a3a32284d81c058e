package server

import (
	"net/http"

	"github.com/lockd/lockd/internal/problem"
)

// RequireKey guards an endpoint outside the API (the MCP endpoint) that
// acts only through the API itself: with API keys configured, a request
// without one is answered 401, one with an unknown key 401 or 429 (the
// limit on unknown keys), as the API answers them. Scopes and prefixes are
// left to the API operations the endpoint makes with the caller's key.
func (s *Server) RequireKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.cfg.Keys.Enabled() {
			next.ServeHTTP(w, r)
			return
		}
		c := callerOf(r.Context())
		switch {
		case c.key == nil && c.presented:
			writeError(w, r, s.refuseUnknownKey(r))
		case c.key == nil:
			writeError(w, r, problem.ErrUnauthorized)
		default:
			next.ServeHTTP(w, r)
		}
	})
}
