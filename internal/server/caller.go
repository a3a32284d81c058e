package server

import (
	"context"
	"net"
	"net/http"
	"strings"

	"github.com/rs/zerolog"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/auth"
	"github.com/lockd/lockd/internal/problem"
)

type callerKey struct{}

// caller is who sends a request: the API key's name when auth is on, else
// the client's address. It is the actor in history and the default owner.
type caller struct {
	name string
	key  *auth.Key // nil: auth is off, or no valid key was presented
	// presented is true when an Authorization header was sent.
	presented bool
}

// mayTouch reports whether the caller may act on lock key lk.
func (c caller) mayTouch(keys *auth.Keyring, lk string) bool {
	return !keys.Enabled() || (c.key != nil && c.key.MayTouch(lk))
}

// identify puts the caller into the request's context. It decides nothing:
// each route says what it needs.
func (s *Server) identify(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		c := caller{name: host}
		if h := r.Header.Get("Authorization"); h != "" {
			c.presented = true
			if bearer, ok := strings.CutPrefix(h, "Bearer "); ok && s.cfg.Keys.Enabled() {
				if k, ok := s.cfg.Keys.Lookup(strings.TrimSpace(bearer)); ok {
					c.key, c.name = k, k.Name
				}
			}
		}
		if x := exchangeOf(r.Context()); x != nil {
			x.caller = c
			next.ServeHTTP(w, r)
			return
		}
		ctx := context.WithValue(r.Context(), callerKey{}, &exchange{caller: c})
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// exchange is what the middleware learns of one request for the handlers:
// who sends it, and where it was sent.
type exchange struct {
	caller caller
	// foreignHost is set by checkHost on an open endpoint (served to any
	// Host) when the Host is not one the server answers to.
	foreignHost bool
	// body is the request's body as checkBody decoded it (nil for an
	// empty one) when bodyChecked, for leaseOps.
	body        any
	bodyChecked bool

	// Set by observe: what the request's log lines carry.
	base    *zerolog.Logger // the server's
	reqID   [1]string       // X-Request-Id's value, and the header's slice
	traceID string
	// owner and holder go on the access log line: the lease's owner
	// (logOwner) and the holder named by a refusal (writeError).
	owner, holder string
	log           *zerolog.Logger // requestLog's, once made
	w             statusWriter
}

func exchangeOf(ctx context.Context) *exchange {
	x, _ := ctx.Value(callerKey{}).(*exchange)
	return x
}

func callerOf(ctx context.Context) caller {
	var c caller
	if x := exchangeOf(ctx); x != nil {
		c = x.caller
	}
	if c.name == "" {
		c.name = "unknown"
	}
	return c
}

// requiredScope is what an operation needs: its x-lockd-scope in
// openapi.yaml. An unknown one needs admin, so that a route added without
// a scope is closed rather than open.
func requiredScope(op api.Operation) auth.Scope {
	switch op.Scope {
	case "read":
		return auth.Read
	case "write":
		return auth.Write
	default:
		return auth.Admin
	}
}

// authorize answers 401 or 403 unless the caller may run this operation on
// this lock key; 429 instead of 401 when the caller's address has sent too
// many unknown keys (refuseUnknownKey).
func (s *Server) authorize(r *http.Request) error {
	keys := s.cfg.Keys
	op, _ := operationOf(r)
	if !keys.Enabled() || op.Scope == "none" {
		// Probes of load balancers and orchestrators carry no key.
		return nil
	}
	c := callerOf(r.Context())
	if c.key == nil && c.presented {
		// A wrong key (or a malformed Authorization header): the only
		// requests the limit on unknown keys counts.
		return s.refuseUnknownKey(r)
	}
	if c.key == nil {
		// No key at all guesses nothing: a plain 401, never limited.
		return problem.ErrUnauthorized
	}
	if need := requiredScope(op); !c.key.Can(need) {
		return problem.Errorf(problem.ErrForbidden, "API key %s lacks the %s scope", c.name, need)
	}
	if k, ok := routeKey(r); ok && !c.key.MayTouch(k) {
		return problem.Errorf(problem.ErrForbidden, "API key %s may not touch keys outside its prefixes %s", c.name, strings.Join(c.key.Prefixes, ", "))
	}
	return nil
}

// listScope is what a listing under prefix walks for the caller, and
// whether its rows are filtered (auth.Key.ListScope); with auth off, all
// of it.
func listScope(c caller, keys *auth.Keyring, prefix string) (scan string, filter bool, err error) {
	if !keys.Enabled() || c.key == nil {
		return prefix, false, nil
	}
	scan, filter, err = c.key.ListScope(prefix)
	if err != nil {
		return "", false, problem.Errorf(problem.ErrForbidden, "API key %s may only list keys under %s", c.name, strings.Join(c.key.Prefixes, ", "))
	}
	return scan, filter, nil
}
