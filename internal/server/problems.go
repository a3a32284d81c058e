package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/hlog"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
)

// problemError is an error that already knows its answer: request
// validation builds these.
type problemError struct {
	status int
	code   api.ProblemCode
	title  string
	detail string
	field  string
	// retryAfter is the Retry-After of a 429 or 503 in seconds; 0 means 1.
	retryAfter int
}

func (e *problemError) Error() string { return e.detail }

// invalid is a 400 that names the field at fault.
func invalid(field, format string, args ...any) error {
	return &problemError{
		status: http.StatusBadRequest, code: "invalid_request", title: "Invalid request",
		field: field, detail: fmt.Sprintf(format, args...),
	}
}

// errShuttingDown answers requests that arrive while the server stops.
var errShuttingDown = errors.New("server is shutting down")

// errClientGone is returned when the client went away; nobody reads the answer.
const statusClientClosed = 499

// problem is the answer for err, with the headers it needs.
func problem(err error, key string) (api.Problem, http.Header) {
	h := http.Header{}
	p := api.Problem{}
	var pe *problemError
	var held *lock.HeldError
	var recovering *lock.RecoveringError
	switch {
	case errors.As(err, &pe):
		p.Status, p.Code, p.Title, p.Detail = pe.status, pe.code, pe.title, ptr(pe.detail)
		if pe.field != "" {
			p.Field = ptr(pe.field)
		}
		if pe.status == http.StatusUnauthorized {
			h.Set("WWW-Authenticate", `Bearer realm="lockd"`)
		}
		if pe.status == http.StatusServiceUnavailable || pe.status == http.StatusTooManyRequests {
			h.Set("Retry-After", strconv.Itoa(max(1, pe.retryAfter)))
		}
	case errors.As(err, &held):
		p.Status, p.Code, p.Title = http.StatusConflict, "lock_held", "Lock is held"
		ms := held.Remaining.Milliseconds()
		p.Detail = ptr(fmt.Sprintf("%s is held by %s for %d ms more", key, held.Owner, ms))
		p.Holder, p.RemainingMs = ptr(held.Owner), ptr(ms)
		h.Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(float64(ms)/1000)))))
	case errors.Is(err, lock.ErrLeaseLost):
		p.Status, p.Code, p.Title = http.StatusConflict, "lease_lost", "Lease lost"
		p.Detail = ptr("the token is not the live lease's token: stop the protected work")
	case errors.Is(err, lock.ErrIdempotencyMismatch):
		p.Status, p.Code, p.Title = http.StatusConflict, "idempotency_mismatch", "Idempotency key reused"
		p.Detail = ptr("this Idempotency-Key belongs to a live lease acquired with another owner or ttl_ms; nothing was changed")
	case errors.Is(err, lock.ErrNotFound):
		p.Status, p.Code, p.Title = http.StatusNotFound, "not_found", "No live lease"
		p.Detail = ptr(key + " has no live lease")
	case errors.Is(err, lock.ErrInvalidCursor):
		p.Status, p.Code, p.Title = http.StatusBadRequest, "invalid_request", "Invalid request"
		p.Field, p.Detail = ptr("cursor"), ptr("cursor is not one this server handed out")
	case errors.Is(err, lock.ErrTooManyWaiters):
		p.Status, p.Code, p.Title = http.StatusTooManyRequests, "too_many_requests", "Too many waiting requests"
		p.Detail = ptr("this server already has as many requests waiting as it allows; retry later or with wait_ms 0")
		h.Set("Retry-After", "1")
	case errors.As(err, &recovering):
		p.Status, p.Code, p.Title = http.StatusServiceUnavailable, "backend_recovering", "Recovering from a Redis data loss"
		p.Detail = ptr(fmt.Sprintf("Redis lost its data; no key is granted for %d ms more, until every lease it may have forgotten has expired", recovering.Remaining.Milliseconds()))
		h.Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(recovering.Remaining.Seconds())))))
	case errors.Is(err, lock.ErrUnavailable):
		p.Status, p.Code, p.Title = http.StatusServiceUnavailable, "backend_unavailable", "Backend unavailable"
		p.Detail = ptr("Redis cannot be reached or cannot take writes now (read-only, out of memory, loading); " +
			"nothing was granted or changed that Redis did not confirm")
		h.Set("Retry-After", "1")
	case errors.Is(err, lock.ErrClosed), errors.Is(err, errShuttingDown):
		p.Status, p.Code, p.Title = http.StatusServiceUnavailable, "backend_unavailable", "Shutting down"
		p.Detail = ptr("the server is shutting down; retry on another replica or in a moment")
		h.Set("Retry-After", "1")
	default:
		p.Status, p.Code, p.Title = http.StatusInternalServerError, "internal", "Internal error"
		p.Detail = ptr("internal error; the server logged it")
	}
	p.Type = "/problems/" + string(p.Code)
	if key != "" {
		p.Key = ptr(key)
	}
	return p, h
}

// writeError is where every error becomes an answer. Only unexpected
// errors are logged as errors; the client never sees their text.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		w.WriteHeader(statusClientClosed)
		return
	}
	p, h := problem(err, keyParam(r))
	log := hlog.FromRequest(r)
	switch {
	case p.Status >= 500 && p.Code == "internal":
		log.Error().Err(err).Msg("internal error")
	case p.Status >= 500:
		log.Warn().Err(err).Msg("unavailable")
	}
	if p.Code == "lock_held" {
		log.UpdateContext(func(c zerolog.Context) zerolog.Context { return c.Str("holder", *p.Holder) })
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
