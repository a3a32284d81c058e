package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/problem"
)

// invalid is a 400 that names the field at fault (problem.ErrInvalid).
func invalid(field, format string, args ...any) error {
	return problem.Invalid(field, format, args...)
}

// errShuttingDown answers requests that arrive while the server stops.
var errShuttingDown = problem.ErrShuttingDown

// statusClientClosed is logged when the client went away; nobody reads
// the answer.
const statusClientClosed = 499

// toAPI is the problem+json body and headers of err about the resource
// the request named (the zero Resource when none): problem.Of classifies
// it (the dashboard uses the same table), this only writes it in the
// contract's shape, naming the lock or semaphore as the client does.
func toAPI(err error, res lock.Resource) (api.Problem, http.Header, bool) {
	if res == (lock.Resource{}) {
		res = refusedResource(err)
	}
	c := problem.Of(err, res)
	key := res.Name
	p := api.Problem{Type: "/problems/" + string(c.Code), Status: c.Status, Code: c.Code, Title: c.Title, Detail: ptr(c.Detail)}
	h := http.Header{}
	if c.Field != "" {
		p.Field = ptr(c.Field)
	}
	if c.Max > 0 {
		p.MaxMs = ptr(c.Max.Milliseconds())
	}
	if c.Code == api.ProblemCodeLockHeld || c.Code == api.ProblemCodeNoPermits {
		p.Holder, p.RemainingMs = ptr(c.Holder), ptr(c.Remaining.Milliseconds())
	}
	if c.Code == api.ProblemCodeLockDelay || c.Code == api.ProblemCodeMinHold {
		p.RemainingMs = ptr(c.Remaining.Milliseconds())
	}
	if c.Queued != nil {
		p.Waiters = ptr(c.Queued.Waiters)
		if c.Queued.Next.Owner != "" {
			p.Next = &api.QueuedWaiter{Owner: c.Queued.Next.Owner, WaitingSince: c.Queued.Next.Since}
		}
	}
	if c.Status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="lockd"`)
	}
	if c.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(c.RetryAfter))
	}
	if key != "" {
		p.Key = ptr(key)
	}
	return p, h, c.Internal
}

// writeError is where every error becomes an answer. Only unexpected
// errors are logged as errors; the client never sees their text.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		w.WriteHeader(statusClientClosed)
		return
	}
	p, h, internal := toAPI(err, resourceParam(r))
	switch {
	case internal:
		requestLog(r.Context()).Error().Err(err).Msg("internal error")
	case p.Status >= 500:
		requestLog(r.Context()).Warn().Err(err).Msg("unavailable")
	}
	if x := exchangeOf(r.Context()); p.Holder != nil && x != nil {
		x.holder = *p.Holder
	}
	writeProblem(w, p, h)
}

func writeProblem(w http.ResponseWriter, p api.Problem, h http.Header) {
	for k, v := range h {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

func ptr[T any](v T) *T { return &v }
