// Package server is lockd's HTTP edge: the handlers of the generated strict
// server interface (package api), request validation, problem+json
// answers, access logs and metrics.
//
// Handlers hold no lock logic; they validate, call the engine and convert.
// Locks and semaphores share every handler: each operation's kind
// (x-lockd-kind in the spec, lock.KindLock or lock.KindSemaphore) and the
// {key} of its route make the lock.Resource the engine works on, and the
// wire shows the name (leases, states and events through internal/wire,
// problems here). Every error reaches writeError,
// which writes the answer that internal/problem's table gives it (the
// dashboard renders the same table as HTML); request checks that refuse
// before the engine return its named refusals (problem.ErrForbidden,
// problem.Invalid, …), so statuses are chosen there alone. Lease tokens
// never reach a log line or a metric label.
package server
