package server

import (
	"net/http"
	"strconv"

	"github.com/lockd/lockd/internal/authlimit"
	"github.com/lockd/lockd/internal/problem"
)

// refuseUnknownKey is the answer to a request whose API key is unknown:
// 401 while its address has tokens left in the limit on unknown keys, 429
// with Retry-After beyond (F12 of the first audit). Only unknown keys come
// here: identify has looked the key up, so a valid key from the same
// address is served as usual however many wrong ones others send (N2 of
// the second audit).
func (s *Server) refuseUnknownKey(r *http.Request) error {
	addr := authlimit.ClientAddr(r)
	if wait, ok := s.unknownKeys.Take(addr); !ok {
		secs := authlimit.RetryAfter(wait)
		requestLog(r.Context()).Warn().Str("remote", addr).Msg("too many refused keys from this address")
		return &problem.Error{Kind: problem.ErrTooManyUnknownKeys, RetryAfter: secs,
			Detail: "too many unknown API keys from this address; retry in " + strconv.Itoa(secs) + " s"}
	}
	requestLog(r.Context()).Info().Str("remote", addr).Msg("API key refused")
	return problem.Errorf(problem.ErrUnauthorized, "unknown API key")
}
