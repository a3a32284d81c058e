// Errors: one class per problem code of lockd's API.
//
// Every error answer of lockd is an RFC 9457 problem
// (application/problem+json) with a machine-readable `code`; errorFor
// turns it into the class of that code, so that callers catch what they
// mean (LockHeld, LeaseLost, ...) and read the fields they need. A code
// this client does not know (a newer server) becomes a plain LockdError
// (Unavailable for a 5xx), never a crash.
//
// No message built here holds a token or an API key: the server never
// puts one in a problem, and the client's own messages name only keys and
// owners.

import type { ProblemCode, QueuedWaiter } from "./types.js";

/** What an error is built from: the answer's status, its problem body and Retry-After. */
export interface ErrorInit {
  /** The HTTP status; undefined when no answer came. */
  status?: number | undefined;
  /** The problem's code; the class's own code when left out. */
  code?: string | undefined;
  /** The whole problem body. */
  problem?: Readonly<Record<string, unknown>> | undefined;
  /** The server's Retry-After, in milliseconds. */
  retryAfterMs?: number | undefined;
  cause?: unknown;
}

/**
 * LockdError is any error of lockd or of talking to it.
 *
 * `status` is the HTTP status (undefined when no answer came), `code` the
 * problem's code, `detail` its human-readable detail, `problem` the whole
 * problem body, and `retryAfterMs` the server's Retry-After in
 * milliseconds (undefined when it sent none).
 */
export class LockdError extends Error {
  /** The problem code this class stands for; undefined for the bases. */
  static readonly CODE: ProblemCode | undefined = undefined;

  readonly status: number | undefined;
  readonly code: string | undefined;
  readonly detail: string;
  readonly problem: Readonly<Record<string, unknown>>;
  readonly retryAfterMs: number | undefined;

  constructor(detail: string, init: ErrorInit = {}) {
    const code = init.code ?? (new.target as typeof LockdError).CODE;
    const tag = [init.status, code].filter((p) => p !== undefined).join(" ");
    super(tag ? `${detail} (${tag})` : detail, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.detail = detail;
    this.status = init.status;
    this.code = code;
    this.problem = Object.freeze({ ...init.problem });
    this.retryAfterMs = init.retryAfterMs;
  }
}

/** InvalidRequest: the request breaks the contract (400); `field` names the field at fault. */
export class InvalidRequest extends LockdError {
  static override readonly CODE = "invalid_request";
  get field(): string | undefined {
    return str(this.problem["field"]);
  }
}

/** Unsupported: this server cannot do it (400), e.g. semaphores or shared holds under Redlock. */
export class Unsupported extends LockdError {
  static override readonly CODE = "unsupported";
}

/** Unauthorized: the API key is missing or unknown (401). */
export class Unauthorized extends LockdError {
  static override readonly CODE = "unauthorized";
}

/** Forbidden: the API key lacks the scope or the key's prefix (403). */
export class Forbidden extends LockdError {
  static override readonly CODE = "forbidden";
}

/**
 * NotFound: no live lease on the key, no live permit of the semaphore,
 * nobody leads or campaigns (404).
 *
 * A LeaseNotFound (a renew or release that found no lease) is a NotFound
 * too: `err instanceof NotFound` is true for it.
 */
export class NotFound extends LockdError {
  static override readonly CODE = "not_found";
  static override [Symbol.hasInstance](value: unknown): boolean {
    // LeaseNotFound is a LeaseLost by its class and a NotFound by its code,
    // as in the Python client (where it has both bases).
    // So are SessionLost (a LeaseLost whose code's status is 404).
    return (
      Function.prototype[Symbol.hasInstance].call(this, value) ||
      (this === NotFound && (value instanceof LeaseNotFound || value instanceof SessionLost))
    );
  }
}

/** MethodNotAllowed: the path has no such method (405). */
export class MethodNotAllowed extends LockdError {
  static override readonly CODE = "method_not_allowed";
}

/** NotGranted is the base of the 409s that mean "not now": try again later (`retryAfterMs` says when). */
export class NotGranted extends LockdError {}

/** LockHeld: another lease holds the key, or another candidate leads (409). */
export class LockHeld extends NotGranted {
  static override readonly CODE = "lock_held";
  /** The holder's owner (an election's leader). */
  get holder(): string | undefined {
    return str(this.problem["holder"]);
  }
  /** How long its lease has left, in milliseconds. */
  get remainingMs(): number | undefined {
    return num(this.problem["remaining_ms"]);
  }
}

/** Queued: nobody holds the key, but earlier waiters come first (409). A waiter holds nothing: there is no holder. */
export class Queued extends NotGranted {
  static override readonly CODE = "queued";
  /** How many requests are queued. */
  get waiters(): number | undefined {
    return num(this.problem["waiters"]);
  }
  /** The first of them. */
  get next(): QueuedWaiter | undefined {
    const n = this.problem["next"];
    return typeof n === "object" && n !== null ? (n as QueuedWaiter) : undefined;
  }
}

/** NoPermits: every permit of the semaphore is held (409); `holder` and `remainingMs` describe the permit that ends first. */
export class NoPermits extends NotGranted {
  static override readonly CODE = "no_permits";
  get holder(): string | undefined {
    return str(this.problem["holder"]);
  }
  get remainingMs(): number | undefined {
    return num(this.problem["remaining_ms"]);
  }
}

/** LockDelay: the key's last lease ended by expiry or force-release and its lock-delay has not passed (409). */
export class LockDelay extends NotGranted {
  static override readonly CODE = "lock_delay";
  /** How long the delay still lasts, in milliseconds. */
  get remainingMs(): number | undefined {
    return num(this.problem["remaining_ms"]);
  }
}

/** MinHold: the key's holder released it inside its hold window, which keeps it taken, by nobody, until it ends (409). */
export class MinHold extends NotGranted {
  static override readonly CODE = "min_hold";
  /** How long the window still lasts, in milliseconds. */
  get remainingMs(): number | undefined {
    return num(this.problem["remaining_ms"]);
  }
}

/** TooManyHolders: the key has as many shared holders or permits as one key may (409). */
export class TooManyHolders extends NotGranted {
  static override readonly CODE = "too_many_holders";
}

/** LimitMismatch: the semaphore is held with another limit (409); every holder must use the same one. */
export class LimitMismatch extends LockdError {
  static override readonly CODE = "limit_mismatch";
}

/** ModeMismatch: a re-entry asked for another mode than the lease's (409). */
export class ModeMismatch extends LockdError {
  static override readonly CODE = "mode_mismatch";
}

/** NotExclusive: requestRelease found the key held shared (409); its holders hold together, and nobody was asked. */
export class NotExclusive extends LockdError {
  static override readonly CODE = "not_exclusive";
}

/** InLockSet: a renew, release or re-entry of one key with a lock set's token (409); a set is held whole, nothing was changed: renew or release the set. */
export class InLockSet extends LockdError {
  static override readonly CODE = "in_lock_set";
}

/** NotCandidate: a handover named a candidate that is not campaigning (409); the leader still leads. */
export class NotCandidate extends LockdError {
  static override readonly CODE = "not_candidate";
}

/**
 * LeaseLost: the lease is no longer yours. Stop the protected work.
 *
 * The server says so with 409 `lease_lost` (the token is not the live
 * one); the client also raises it when renewals failed until the lease
 * expired by its own clock (then `status` is undefined).
 */
export class LeaseLost extends LockdError {
  static override readonly CODE: ProblemCode = "lease_lost";
}

/**
 * LeaseNotFound: a renew or release found no live lease on the key (404).
 * For the holder of a token that is the same news as LeaseLost, so it is
 * one; it is a NotFound too (by its code, and by instanceof).
 */
export class LeaseNotFound extends LeaseLost {
  static override readonly CODE = "not_found";
}

/**
 * SessionLost: the session is gone, and every grant in it. Stop the
 * protected work.
 *
 * The server says so with 404 `session_not_found` (the session ended,
 * lapsed or never existed: a renew, an end, a read, or an acquire in
 * it); the client also throws it when the session's renewals failed
 * until it expired by the client's own clock (then `status` is
 * undefined). A lease in a lost session is lost with a SessionLost of its
 * own. It is a LeaseLost, since every grant in the session is lost with
 * it, and a NotFound (by instanceof), which is the problem's status.
 */
export class SessionLost extends LeaseLost {
  static override readonly CODE = "session_not_found";
}

/**
 * SessionNotFound is SessionLost, by its former name.
 * @deprecated Use SessionLost.
 */
export const SessionNotFound = SessionLost;
/** @deprecated Use SessionLost. */
export type SessionNotFound = SessionLost;

/** IdempotencyMismatch: the Idempotency-Key belongs to a live lease acquired with other fields (409). */
export class IdempotencyMismatch extends LockdError {
  static override readonly CODE = "idempotency_mismatch";
}

/** PayloadTooLarge: the body is over the server's limit (413). */
export class PayloadTooLarge extends LockdError {
  static override readonly CODE = "payload_too_large";
}

/** UnsupportedMediaType: the body is not JSON (415). */
export class UnsupportedMediaType extends LockdError {
  static override readonly CODE = "unsupported_media_type";
}

/** TooManyRequests: a cap or an API key's quota is reached (429); see `retryAfterMs`. */
export class TooManyRequests extends LockdError {
  static override readonly CODE = "too_many_requests";
}

/**
 * Unavailable: the server could not be reached or answered 5xx. These are
 * the errors worth retrying; the client retries them on acquire and on
 * reads, with backoff.
 */
export class Unavailable extends LockdError {}

/** Unreachable: no answer came (connection refused or reset, timeout, an answer that is not lockd's). */
export class Unreachable extends Unavailable {}

/** BackendUnavailable: lockd cannot reach Redis, or it is shutting down (503). */
export class BackendUnavailable extends Unavailable {
  static override readonly CODE = "backend_unavailable";
}

/** BackendRecovering: Redis lost its data and lockd grants nothing until forgotten leases expired (503). */
export class BackendRecovering extends Unavailable {
  static override readonly CODE = "backend_recovering";
}

/** InternalError: a fault of lockd's (500); the server logged it. */
export class InternalError extends Unavailable {
  static override readonly CODE = "internal";
}

type ErrorClass = new (detail: string, init?: ErrorInit) => LockdError;

/**
 * PROBLEM_CLASSES maps every problem code of the API to its class. Its
 * type is the generated enum of Problem.code: a code added to
 * api/openapi.yaml fails the build until it has a class here.
 */
export const PROBLEM_CLASSES: Readonly<Record<ProblemCode, ErrorClass>> = Object.freeze({
  invalid_request: InvalidRequest,
  unsupported: Unsupported,
  unauthorized: Unauthorized,
  forbidden: Forbidden,
  not_found: NotFound,
  session_not_found: SessionLost,
  method_not_allowed: MethodNotAllowed,
  lock_held: LockHeld,
  lock_delay: LockDelay,
  min_hold: MinHold,
  queued: Queued,
  no_permits: NoPermits,
  limit_mismatch: LimitMismatch,
  mode_mismatch: ModeMismatch,
  not_exclusive: NotExclusive,
  not_candidate: NotCandidate,
  in_lock_set: InLockSet,
  too_many_holders: TooManyHolders,
  lease_lost: LeaseLost,
  idempotency_mismatch: IdempotencyMismatch,
  payload_too_large: PayloadTooLarge,
  unsupported_media_type: UnsupportedMediaType,
  too_many_requests: TooManyRequests,
  backend_unavailable: BackendUnavailable,
  backend_recovering: BackendRecovering,
  internal: InternalError,
});

// By status, for answers without a code we know (a proxy's 502, a newer
// server's code).
const BY_STATUS: Readonly<Record<number, ErrorClass>> = {
  400: InvalidRequest,
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  405: MethodNotAllowed,
  413: PayloadTooLarge,
  415: UnsupportedMediaType,
  429: TooManyRequests,
};

const REASONS: Readonly<Record<number, string>> = {
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  409: "Conflict",
  413: "Payload Too Large",
  415: "Unsupported Media Type",
  429: "Too Many Requests",
  500: "Internal Server Error",
  502: "Bad Gateway",
  503: "Service Unavailable",
  504: "Gateway Timeout",
};

/** errorFor is the error for a non-2xx answer: its status, its problem body (may be empty) and Retry-After in milliseconds. */
export function errorFor(
  status: number,
  problem: Readonly<Record<string, unknown>>,
  retryAfterMs: number | undefined,
): LockdError {
  const code = str(problem["code"]);
  let cls: ErrorClass | undefined =
    code !== undefined && Object.prototype.hasOwnProperty.call(PROBLEM_CLASSES, code)
      ? PROBLEM_CLASSES[code as ProblemCode]
      : undefined;
  if (cls === undefined) {
    cls = status >= 500 ? Unavailable : (BY_STATUS[status] ?? LockdError);
  }
  const detail = str(problem["detail"]) || str(problem["title"]) || REASONS[status] || `HTTP ${status}`;
  return new cls(detail, { status, code, problem, retryAfterMs });
}

/** parseRetryAfter reads a Retry-After header (delay-seconds or an HTTP date) as milliseconds; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null | undefined, now: number = Date.now()): number | undefined {
  if (!value) {
    return undefined;
  }
  const v = value.trim();
  if (/^\d+$/.test(v)) {
    return Number(v) * 1000;
  }
  const when = Date.parse(v);
  if (Number.isNaN(when)) {
    return undefined;
  }
  return Math.max(0, when - now);
}

function str(v: unknown): string | undefined {
  return typeof v === "string" ? v : undefined;
}

function num(v: unknown): number | undefined {
  return typeof v === "number" ? v : undefined;
}
