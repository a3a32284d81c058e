// Package web is lockd's dashboard: server-rendered pages (templ) that show
// live locks, their owners, TTLs and history, and break a stuck lock.
package web

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"

	"github.com/lockd/lockd/internal/lock"
)

// Engine is what the dashboard needs from the lock engine.
type Engine interface {
	State(ctx context.Context, key string) (lock.State, error)
	List(ctx context.Context, prefix string, limit int, cursor string) (lock.Page, error)
	History(ctx context.Context, key string, limit int) ([]lock.Event, error)
	ForceRelease(ctx context.Context, key, actor, reason string) (lock.Broken, error)
}

// Dashboard serves the web pages.
type Dashboard struct {
	engine Engine
	log    zerolog.Logger
}

// NewDashboard returns the dashboard on engine.
func NewDashboard(engine Engine, log zerolog.Logger) *Dashboard {
	return &Dashboard{engine: engine, log: log}
}

// Routes adds the dashboard's pages to r.
func (d *Dashboard) Routes(r chi.Router) {
	r.Get("/", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/openapi.yaml", http.StatusFound)
	})
}
