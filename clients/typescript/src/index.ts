// lockd-client: a client of the lockd lock server on the platform alone
// (fetch, AbortController, ReadableStream, TextDecoder): Node 18 or later,
// and browsers.
//
//     import { Client } from "lockd-client";
//
//     const client = new Client({ baseUrl: "http://lockd:8080", apiKey: process.env.LOCKD_API_KEY });
//     await client.withLock("report:daily", { ttlMs: 30_000, waitMs: 10_000 }, async (signal, lease) => {
//       await buildReport({ signal, fence: lease.fence }); // signal aborts the moment the lease is lost
//     });
//
// A lease renews itself every ttl/3 until it is released. A renew answered
// 404 or 409 loses it at once; other failures (503, no answer) are retried
// until the lease's expiry by this process's clock, then it is lost. Loss
// aborts `lease.signal`, calls the optional `onLost`, and makes
// `lease.check()` throw LeaseLost. Acquire and the reads retry 503 answers
// and connection errors with jittered backoff; every acquire carries an
// Idempotency-Key so that its retries never grant twice. Errors are one
// class per problem code of the API. Tokens and API keys never appear in
// a message, a log line, JSON.stringify or util.inspect.
//
// Sessions keep many grants alive with one renewal: `client.session({
// ttlMs })` (or `withSession`) renews itself every ttl/3, and `session`
// on acquire, withLock, permits and campaign puts a grant in it, with no
// TTL and no renewer of its own. Ending the session releases every grant
// in it; losing it loses every lease in it. Its id, a secret, is shown
// only by `session.id`.

export {
  Client,
  Elections,
  Semaphore,
  Semaphores,
  Sessions,
  type AcquireOptions,
  type CampaignOptions,
  type ClientOptions,
  type ForceReleaseOptions,
  type HistoryOptions,
  type RequestReleaseOptions,
  type LeaseWork,
  type LockManyOptions,
  type ListOptions,
  type PermitOptions,
  type RenewOptions,
  type SemaphoreAcquireOptions,
  type SessionOptions,
  type SessionRef,
  type SessionWork,
} from "./client.js";
export {
  BackendRecovering,
  BackendUnavailable,
  Forbidden,
  IdempotencyMismatch,
  InLockSet,
  InternalError,
  InvalidRequest,
  LeaseLost,
  LeaseNotFound,
  LimitMismatch,
  LockDelay,
  LockHeld,
  LockdError,
  MethodNotAllowed,
  MinHold,
  ModeMismatch,
  NoPermits,
  NotCandidate,
  NotExclusive,
  NotFound,
  NotGranted,
  PROBLEM_CLASSES,
  PayloadTooLarge,
  Queued,
  SessionLost,
  SessionNotFound,
  TooManyHolders,
  TooManyRequests,
  Unauthorized,
  Unavailable,
  Unreachable,
  Unsupported,
  UnsupportedMediaType,
  errorFor,
  parseRetryAfter,
  type ErrorInit,
} from "./errors.js";
export { VERSION, backoff, type Fetch, type Logger } from "./http.js";
export { Lease, type LeaseKind, type LeaseSession, type OnLost } from "./lease.js";
export { LockSet, type OnSetLost } from "./lockset.js";
export { Observer, SILENCE_MS, type ObserveOptions } from "./observe.js";
export { Session, type OnSessionLost } from "./session.js";
export type * from "./types.js";
export type { components, operations, paths } from "./api.js";
