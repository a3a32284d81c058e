package server

import (
	"context"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/wire"
)

// The semaphore operations are the lock operations on a resource of kind
// lock.KindSemaphore: each permit is a lease of its own. Only the body of
// an acquire differs (limit, no mode).

// AcquireSemaphore takes, re-enters or waits for a permit.
func (s *Server) AcquireSemaphore(ctx context.Context, r api.AcquireSemaphoreRequestObject) (api.AcquireSemaphoreResponseObject, error) {
	l, err := s.grant(ctx, lock.KindSemaphore, r.Key, semaphoreBody(r.Body), r.Params.IdempotencyKey)
	if err != nil {
		return nil, err
	}
	return api.AcquireSemaphore200JSONResponse{Body: wire.LeaseOf(l), Headers: api.AcquireSemaphore200ResponseHeaders{IdempotentReplayed: replayed(l)}}, nil
}

// RenewSemaphore extends a live permit.
func (s *Server) RenewSemaphore(ctx context.Context, r api.RenewSemaphoreRequestObject) (api.RenewSemaphoreResponseObject, error) {
	l, err := s.renew(ctx, lock.KindSemaphore, r.Key, r.Body)
	if err != nil {
		return nil, err
	}
	return api.RenewSemaphore200JSONResponse(l), nil
}

// ReleaseSemaphore gives back one level of a permit.
func (s *Server) ReleaseSemaphore(ctx context.Context, r api.ReleaseSemaphoreRequestObject) (api.ReleaseSemaphoreResponseObject, error) {
	rel, err := s.release(ctx, lock.KindSemaphore, r.Key, r.Body)
	if err != nil {
		return nil, err
	}
	return api.ReleaseSemaphore200JSONResponse(rel), nil
}

// ForceReleaseSemaphore breaks every permit, or the one with the fence
// given.
func (s *Server) ForceReleaseSemaphore(ctx context.Context, r api.ForceReleaseSemaphoreRequestObject) (api.ForceReleaseSemaphoreResponseObject, error) {
	b, err := s.forceRelease(ctx, lock.KindSemaphore, r.Key, r.Body)
	if err != nil {
		return nil, err
	}
	return api.ForceReleaseSemaphore200JSONResponse(b), nil
}

// HoldSemaphore takes a permit and keeps it renewed while the stream is
// open.
func (s *Server) HoldSemaphore(ctx context.Context, r api.HoldSemaphoreRequestObject) (api.HoldSemaphoreResponseObject, error) {
	h, err := s.hold(ctx, lock.KindSemaphore, r.Key, semaphoreBody(r.Body))
	if err != nil {
		return nil, err
	}
	return h, nil
}

// GetSemaphore reads a live semaphore: its limit, holders and queue.
func (s *Server) GetSemaphore(ctx context.Context, r api.GetSemaphoreRequestObject) (api.GetSemaphoreResponseObject, error) {
	st, err := s.engine.State(ctx, lock.Semaphore(r.Key))
	if err != nil {
		return nil, err
	}
	return api.GetSemaphore200JSONResponse(wire.StateOf(st)), nil
}

// ListSemaphores pages through live semaphores.
func (s *Server) ListSemaphores(ctx context.Context, r api.ListSemaphoresRequestObject) (api.ListSemaphoresResponseObject, error) {
	states, next, err := s.list(ctx, lock.KindSemaphore, r.Params.Prefix, r.Params.Limit, r.Params.Cursor)
	if err != nil {
		return nil, err
	}
	return api.ListSemaphores200JSONResponse{Semaphores: statesOf(states), NextCursor: next}, nil
}

// GetSemaphoreHistory lists a semaphore's recent events, newest first.
func (s *Server) GetSemaphoreHistory(ctx context.Context, r api.GetSemaphoreHistoryRequestObject) (api.GetSemaphoreHistoryResponseObject, error) {
	h, err := s.history(ctx, lock.KindSemaphore, r.Key, r.Params.Limit, r.Params.Type)
	if err != nil {
		return nil, err
	}
	return api.GetSemaphoreHistory200JSONResponse(h), nil
}
