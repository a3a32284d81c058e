// Package clients holds the tests of lockd's clients in other languages:
// clients/python (TestPython: python3 -m unittest) and clients/typescript
// (TestTypeScript: tsc, then node --test, through its scripts/test.mjs).
// Each client's own test suite runs against a real lockd on a real
// redis-server, started here, so that `go test ./...` (make test) runs
// them with the Go tests.
//
// The harness starts one redis-server and three lockds on it, and tells the
// client's tests about them in the environment:
//
//   - LOCKD_URL: an in-process lockd (internal/lockdtest) that checks every
//     request and answer against api/openapi.yaml, and whose Redis timeouts
//     (500 ms) are shorter than a pause of Redis, so it answers 503 during
//     one;
//   - LOCKD_SLOW_URL: the same in-process lockd behind a proxy that passes
//     each request on 25 ms late, as a network would;
//   - LOCKD_URL_2: `lockd serve`, built from this tree, a second process on
//     the same Redis (FIFO across replicas);
//   - LOCKD_AUTH_URL: an in-process lockd with API keys, LOCKD_TEST_WRITE_KEY
//     (write scope) and LOCKD_TEST_READ_KEY (read scope);
//   - LOCKD_SHORT_WAIT_URL: an in-process lockd whose longest wait
//     (--max-wait) is 1 s, so that a client's longer waits go in rounds;
//   - LOCKD_CONTROL_URL: POST /redis/pause?ms=N stops redis-server (SIGSTOP)
//     and answers once it is stopped; it is continued (SIGCONT) N ms later;
//   - LOCKD_SCENARIO_RESULTS: the file where the client writes one JSON
//     line per scenario of scenarios.json it ran ({"id", "result": "pass",
//     "fail" or "skip", "reason", "seconds"}); the Go test reports a
//     subtest per scenario from it.
//
// scenarios.json is the one list of scenarios that every client passes.
// The harness fails, never skips, when an interpreter (python3, node) or
// the TypeScript compiler of tools/js is missing.
//
// TestClientLayers holds each client's modules to floors (errors, then
// the transport, the renewal loop, lease, session, client): a module
// imports only from the floors below its own, so that lease and session
// never again depend on each other or on the client above them.
//
// The TypeScript client's request and response types, typescript/src/api.ts,
// are generated from api/openapi.yaml by the openapi-typescript pinned in
// tools/js (go generate; make check fails when they are not current).
package clients

//go:generate node typescript/scripts/generate.mjs
