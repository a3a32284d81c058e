package server

import (
	"context"
	"net"
	"net/http"
)

type callerKey struct{}

// caller is who sends a request: an API-key name once auth is on, else the
// client's address. It is the actor in history and the default owner.
type caller struct {
	name string
}

func withCaller(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		ctx := context.WithValue(r.Context(), callerKey{}, caller{name: host})
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func callerOf(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	if c.name == "" {
		c.name = "unknown"
	}
	return c
}
