package web

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/problem"
	"github.com/lockd/lockd/internal/server"
)

// failing is the real engine with List and State failing with err: the
// faults the dashboard must answer without a Redis that misbehaves.
type failing struct {
	Engine
	err error
}

func (f failing) List(context.Context, lock.Kind, string, int, string) (lock.Page, error) {
	return lock.Page{}, f.err
}

func (f failing) State(context.Context, lock.Resource) (lock.State, error) {
	return lock.State{}, f.err
}

// The dashboard's error pages come from problem.Of, the table the API's
// problem+json comes from: same status, title, detail and Retry-After.
func TestErrorPagesShareTheAPIsTable(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"unavailable", fmt.Errorf("lock: list: %w", lock.ErrUnavailable)},
		{"recovering", &lock.RecoveringError{Remaining: 2500 * time.Millisecond}},
		{"invalid cursor", lock.ErrInvalidCursor},
		{"shutting down", lock.ErrClosed},
		{"unexpected", errors.New("ERR something inside Redis")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ld := lockdtest.Start(t, lockdtest.Options{Dashboard: func(e *lock.Engine, log zerolog.Logger) server.Dashboard {
				return NewDashboard(failing{Engine: e, err: tc.err}, log)
			}})
			e := newClientEnv(t, ld, nil)
			for _, tt := range []struct{ path, key string }{{"/", ""}, {"/ui/locks/order:pay:1", "order:pay:1"}} {
				want := problem.Of(tc.err, lock.Lock(tt.key))
				p := e.get(tt.path)
				title, detail := text(p.doc.Find("h1")), text(p.doc.Find(`[data-testid="problem"]`))
				if p.status != want.Status || title != want.Title || detail != want.Detail {
					t.Errorf("%s: %d %q %q, want %d %q %q", tt.path, p.status, title, detail, want.Status, want.Title, want.Detail)
				}
				wantRA := ""
				if want.RetryAfter > 0 {
					wantRA = strconv.Itoa(want.RetryAfter)
				}
				if ra := p.header.Get("Retry-After"); ra != wantRA {
					t.Errorf("%s: Retry-After %q, want %q", tt.path, ra, wantRA)
				}
				if strings.Contains(p.body, "inside Redis") {
					t.Errorf("%s: the error's own text is on the page", tt.path)
				}
			}
			// Only the unexpected error is logged as an error.
			logged := strings.Contains(ld.Logs.String(), `"level":"error"`)
			if logged != problem.Of(tc.err, lock.Lock("")).Internal {
				t.Errorf("logged an error: %v, want %v\n%s", logged, !logged, ld.Logs.String())
			}
		})
	}
}
