// Package server is lockd's HTTP edge: the handlers of the generated strict
// server interface (package api), request validation, the one table that
// maps errors to problem+json answers, access logs and metrics.
//
// Handlers hold no lock logic; they validate, call the engine and convert.
// Every error reaches writeError, which is the only place that chooses a
// status code. Lease tokens never reach a log line or a metric label.
package server
