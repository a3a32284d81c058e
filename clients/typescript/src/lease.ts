// Lease: a granted lock, semaphore permit or election's leadership that
// renews itself.
//
// A lease's renewer is a timer (unref'd: it does not keep a Node process
// alive) that renews every ttl/3. A renew answered 404 or 409 means the
// lease is gone: it is lost at once. A renew that fails for any other
// reason (503, no answer) is retried with jittered backoff until the
// lease's expiry as measured by this process's monotonic clock, from when
// the last successful renew was sent; then it is lost. That clock never
// runs ahead of the server's expiry, so the client gives up no later than
// the server drops the lease. A grant that waited in the queue counts from
// its answer and is renewed at once (grantExpiry in renewer.ts).
//
// Loss aborts `lease.signal` (its reason is the LeaseLost), records
// `lease.error` and calls `onLost` once. The protected work should pass
// the signal on (fetch, streams, timers) or call `lease.check()` between
// steps, and pass `lease.fence` to the resource it protects: a process
// paused past its TTL notices the loss only once it runs again, and only
// a fence check at the resource closes that window.
//
// A lease in a session (`session` on acquire, withLock, permits or
// campaign) has no renewer of its own: the session's renewals keep it,
// and it is lost when its session is, with a SessionLost. The session
// also loses it when its renewal no longer lists the grant
// (force-released, or lapsed after a renewal of the session failed).
// Ending the session releases it (it is not lost); releasing the lease
// still releases its grant at once. A request that its holder step aside
// comes with the session's renewal, and aborts `releaseSignal` and calls
// `onReleaseRequest` as for a lease that renews itself.

import { LeaseLost, SessionLost } from "./errors.js";
import { now, type Logger } from "./http.js";
import { grantExpiry, ranOut, Renewer } from "./renewer.js";
import type { GrantMode, LeaseInfo, LeadershipInfo, ReleaseRequested, ReleaseResult, ResignResult, SessionInfo, Value } from "./types.js";

/** What a lease is a grant of. */
export type LeaseKind = "lock" | "semaphore" | "election";

/** OnLost is called once when a lease is lost, with the LeaseLost that says why. */
export type OnLost = (lease: Lease, error: LeaseLost) => void;

/** What the server answers about a lease, token included. */
export type Grant = (LeaseInfo | LeadershipInfo) & { token: string };

/** LeaseOps is what a Lease asks of its Client (internal). */
export interface LeaseOps {
  readonly timeoutMs: number;
  readonly logger: Logger | undefined;
  renew(
    kind: LeaseKind,
    key: string,
    token: string,
    ttlMs: number,
    timeoutMs: number,
    value: Value | undefined,
    proof: string | undefined,
  ): Promise<Grant>;
  proclaim(key: string, token: string, value: Value, proof: string | undefined): Promise<Grant>;
  release(kind: LeaseKind, key: string, token: string, proof: string | undefined): Promise<ReleaseResult | ResignResult>;
}

/**
 * LeaseSession is the Session that keeps a lease alive, as the lease sees
 * it. session.ts builds on this module (a Session tells its leases of its
 * loss and its end); this one names its session by what it offers, not by
 * its class, so that the dependency goes one way. Session implements it.
 */
export interface LeaseSession {
  readonly id: string;
  readonly ttlMs: number;
  readonly owner: string;
  readonly signal: AbortSignal;
  readonly lost: boolean;
  readonly error: SessionLost | undefined;
  readonly ended: boolean;
  readonly renewals: number;
  readonly leases: Lease[];
  check(): void;
  renew(): Promise<SessionInfo>;
  info(): Promise<SessionInfo>;
  end(): Promise<SessionInfo | undefined>;
}

/** The options of a Lease's constructor (internal: leases come from acquire, semaphores and campaign). */
export interface LeaseInit {
  autoRenew?: boolean | undefined;
  /** The value the acquire sent (a lock's answer does not repeat it). */
  value?: Value | undefined;
  onLost?: OnLost | undefined;
  /** The Session that keeps it alive: the lease then has no renewer of its own. */
  session?: LeaseSession | undefined;
  /** When the grant's answer arrived (now()); default sentAt (grantExpiry). */
  arrivedAt?: number | undefined;
}

/**
 * Lease is one grant: a lock (exclusive or shared), a semaphore permit or
 * an election's leadership.
 *
 * `key` is the lock's key, the semaphore's or the election's name; `kind`
 * is "lock", "semaphore" or "election"; `fence` the grant's fencing
 * number (a leadership's term: `term` is the same number); `ttlMs` its
 * TTL; `owner` who holds it (a leadership's leader: `leader` is the
 * same); `mode` "exclusive", "shared" or "permit"; `limit` the
 * semaphore's limit; `replayed` whether the server answered with an
 * earlier grant of the same Idempotency-Key. `token` is the lease's
 * secret: it appears nowhere else (not in `info`, `toString`,
 * `JSON.stringify` or `util.inspect`). `session` is the Session that
 * keeps it alive, or undefined (a lease in a session has no renewer of
 * its own, and its `ttlMs` is the time its session had left when it was
 * granted).
 */
export class Lease {
  readonly kind: LeaseKind;
  readonly key: string;
  readonly fence: number;
  readonly ttlMs: number;
  readonly owner: string;
  readonly mode: GrantMode;
  readonly limit: number | undefined;
  readonly replayed: boolean;
  /** Aborted the moment the lease is lost; its reason is the LeaseLost. Not aborted by a release. */
  readonly signal: AbortSignal;
  /**
   * Aborted when somebody first asks the holder to step aside
   * (client.requestRelease), learnt on the next renewal (a lease in a
   * session: its session's); its reason is the request (`{by, reason,
   * at}`). The lease stays held: you decide.
   */
  readonly releaseSignal: AbortSignal;
  /** Called once per request that the holder step aside, after the renewal that learnt of it. */
  onReleaseRequest: ((lease: Lease, request: ReleaseRequested) => void) | undefined;
  /** The Session that keeps the lease alive; undefined when it renews itself (or is in a session known only by its id). */
  readonly session: LeaseSession | undefined;

  readonly #ops: LeaseOps;
  readonly #token: string;
  // The latest proof a grant or renewal answered: sent back with every
  // renewal, proclaim and release, so that any lockd can restore the
  // lease should Redis lose it.
  #proof: string | undefined;
  readonly #lost = new AbortController();
  readonly #asked = new AbortController();
  #request: ReleaseRequested | undefined;
  readonly #onLost: OnLost | undefined;
  #error: LeaseLost | undefined;
  #info: LeaseInfo | LeadershipInfo;
  #value: Value | undefined;
  #expires: number;
  #renewals = 0;
  #released = false;
  readonly #renewer: Renewer;
  // The renewer's state between its turns.

  /** @internal Leases come from Client.acquire, semaphores and campaign. */
  constructor(ops: LeaseOps, kind: LeaseKind, grant: Grant, sentAt: number, init: LeaseInit = {}) {
    this.#ops = ops;
    this.kind = kind;
    this.key = grant.key;
    this.ttlMs = grant.ttl_ms;
    if ("term" in grant) {
      // A leadership: its term is the fence, its leader the owner.
      this.fence = grant.term;
      this.owner = grant.leader;
      this.mode = "exclusive";
      this.limit = undefined;
    } else {
      this.fence = grant.fence;
      this.owner = grant.owner;
      this.mode = grant.mode;
      this.limit = grant.limit;
    }
    this.replayed = grant.replayed === true;
    this.#token = grant.token;
    this.#proof = grant.proof;
    this.#info = withoutToken(grant);
    this.#value = "value" in grant && grant.value !== undefined ? grant.value : init.value;
    this.#onLost = init.onLost;
    this.signal = this.#lost.signal;
    this.releaseSignal = this.#asked.signal;
    this.onReleaseRequest = undefined;
    this.session = init.session;
    // The grant came after sentAt and before the answer arrived (grantExpiry).
    const { expiresAt, renewNow } = grantExpiry(sentAt, init.arrivedAt ?? sentAt, this.ttlMs);
    this.#expires = expiresAt;
    this.#renewer = new Renewer({
      ttlMs: this.ttlMs,
      expiresAt: () => this.#expires,
      renew: () => this.renew(),
      stopped: () => this.#released || this.lost,
      gone: (err) => err instanceof LeaseLost,
      what: this.key,
      lose: (last, lateMs) =>
        this.#lose(
          new LeaseLost(
            lateMs !== undefined || last === undefined
              ? `${this.key}: ${ranOut(lateMs ?? 0)}`
              : `${this.key}: could not renew before the lease expired: ${last.message}`,
          ),
        ),
      retrying: (e, attempt, delayMs) =>
        this.#ops.logger?.info?.(`${this}: renew failed (${e.message}); retrying in ${Math.round(delayMs)} ms`, {
          key: this.key,
          attempt,
          delayMs,
        }),
    });
    if (init.autoRenew !== false && init.session === undefined) {
      this.#renewer.start(renewNow);
    }
  }

  /** The lease's secret: renew, release and re-entry need it. Keep it out of logs. */
  get token(): string {
    return this.#token;
  }

  /** The lease's latest proof (undefined: the server signs none), sent back by renew, proclaim and release. Keep it out of logs. */
  get proof(): string | undefined {
    return this.#proof;
  }

  /** A leadership's term, strictly increasing per election: its fence under the election's word. */
  get term(): number {
    return this.fence;
  }

  /** Who leads, for a leadership: its owner under the election's word. */
  get leader(): string {
    return this.owner;
  }

  /** Whether the lease is lost (`signal.aborted`). */
  get lost(): boolean {
    return this.#lost.signal.aborted;
  }

  /** Why the lease was lost; undefined while it is not. */
  get error(): LeaseLost | undefined {
    return this.#error;
  }

  /** Whether release (or abandon) was called, or the end of its session released it. */
  get released(): boolean {
    return this.#released;
  }

  /** How many renewals succeeded. */
  get renewals(): number {
    return this.#renewals;
  }

  /** The server's latest answer about the lease, without the token. */
  get info(): LeaseInfo | LeadershipInfo {
    return { ...this.#info };
  }

  /** The lease's value as last sent (acquire, campaign, proclaim, renew with a value); undefined when it has none. */
  get value(): Value | undefined {
    return this.#value;
  }

  /** check throws the LeaseLost that ended the lease, if it is lost; else it returns. */
  check(): void {
    if (this.#error !== undefined) {
      throw this.#error;
    }
  }

  /**
   * renew extends the lease by its TTL now, once; `value` replaces the
   * grant's value. The renewer calls it every ttl/3; call it yourself
   * after acquire with `autoRenew: false`. An answer that the lease is
   * gone loses it and throws LeaseLost; any other failure throws and
   * leaves the lease as it was. A lease in a session is renewed by
   * renewing its session (every grant in it), since only the session's
   * renewals move its expiry; with a value, only the value is sent.
   */
  async renew(opts: { value?: Value } = {}): Promise<void> {
    this.check();
    if (this.session !== undefined && opts.value === undefined) {
      try {
        await this.session.renew();
      } catch (err) {
        if (err instanceof SessionLost) {
          this.check(); // the session lost this lease with it
        }
        throw err;
      }
      this.check(); // the renewal no longer lists its grant
      return;
    }
    const sent = now();
    const timeout = Math.min(this.#ops.timeoutMs, Math.max(this.#expires - sent, 1));
    let grant: Grant;
    try {
      grant = await this.#ops.renew(this.kind, this.key, this.#token, this.ttlMs, timeout, opts.value, this.#proof);
    } catch (err) {
      if (err instanceof LeaseLost) {
        this.#lose(err);
      }
      throw err;
    }
    if (this.#released) {
      return;
    }
    this.#info = withoutToken(grant);
    this.#proof = grant.proof ?? this.#proof;
    if (opts.value !== undefined) {
      this.#value = opts.value;
    }
    this.#expires = sent + this.ttlMs;
    this.#renewals++;
    this._noteRequest("release_requested" in grant ? grant.release_requested : undefined);
  }

  /** The newest request that the holder step aside, if any. */
  get releaseRequest(): ReleaseRequested | undefined {
    return this.#request;
  }

  /**
   * proclaim sets a leadership's value (any JSON, at most 4 KiB), keeping
   * the leadership and renewing it; observers get a `proclaimed` event. A
   * leadership that no longer leads is lost and throws LeaseLost.
   */
  async proclaim(value: Value): Promise<void> {
    if (this.kind !== "election") {
      throw new TypeError(`lockd: proclaim is for a leadership (client.campaign), not a ${this.kind}`);
    }
    if (value === undefined || value === null) {
      throw new TypeError("lockd: proclaim needs a value; JSON null is not one");
    }
    this.check();
    const sent = now();
    let grant: Grant;
    try {
      grant = await this.#ops.proclaim(this.key, this.#token, value, this.#proof);
    } catch (err) {
      if (err instanceof LeaseLost) {
        this.#lose(err);
      }
      throw err;
    }
    if (this.#released) {
      return;
    }
    this.#info = withoutToken(grant);
    this.#proof = grant.proof ?? this.#proof;
    this.#value = value;
    this.#expires = sent + this.ttlMs;
  }

  /**
   * release stops the renewer and gives the lease back; a leadership
   * resigns. It answers the server's `{key, released, count}` (a
   * leadership's `{key, resigned}`), or undefined when the lease was
   * released already. A lease that was lost throws its LeaseLost, without
   * asking the server.
   */
  async release(): Promise<ReleaseResult | ResignResult | undefined> {
    if (this.#released) {
      return undefined;
    }
    // From here the renewer records nothing, not even a 404 from a renew
    // that races this release.
    this.#released = true;
    this.#renewer.stop();
    this.check();
    try {
      return await this.#ops.release(this.kind, this.key, this.#token, this.#proof);
    } catch (err) {
      if (err instanceof LeaseLost) {
        this.#lose(err, true);
      }
      throw err;
    }
  }

  /** abandon stops the renewer without releasing: the lease lasts until its TTL runs out. */
  abandon(): void {
    this.#released = true;
    this.#renewer.stop();
  }

  toString(): string {
    let state = this.lost ? "lost" : this.#released ? "released" : "held";
    if (this.session !== undefined) {
      state += " in a session";
    }
    if (this.kind === "election") {
      return `Lease(election ${JSON.stringify(this.key)} term=${this.fence} leader=${JSON.stringify(this.owner)} ${state})`;
    }
    return `Lease(${this.kind} ${JSON.stringify(this.key)} fence=${this.fence} owner=${JSON.stringify(this.owner)} ${state})`;
  }

  /** What JSON.stringify shows: never the token. */
  toJSON(): Record<string, unknown> {
    return {
      kind: this.kind,
      key: this.key,
      fence: this.fence,
      owner: this.owner,
      mode: this.mode,
      limit: this.limit,
      ttl_ms: this.ttlMs,
      lost: this.lost,
      released: this.#released,
    };
  }

  /** What Node's util.inspect (console.log) shows. */
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }

  /** @internal _done reports whether the lease is released or lost: nothing is left to keep or lose. */
  _done(): boolean {
    return this.#released || this.lost;
  }

  /** @internal _lose loses the lease alone (its session's renewal no longer lists its grant). */
  _lose(err: LeaseLost): void {
    this.#lose(err);
  }

  /**
   * @internal _noteRequest keeps a renewal's request that the holder step
   * aside, and tells the holder once per request. A lone lease's renewal
   * passes it on; a lease in a session hears it from the session's
   * renewal (its grant's hold carries it).
   */
  _noteRequest(request: ReleaseRequested | undefined): void {
    if (request === undefined || this._done() || request.at === this.#request?.at) {
      return;
    }
    this.#request = request;
    this.#asked.abort(request); // once: later requests only call back
    try {
      this.onReleaseRequest?.(this, request);
    } catch (cbErr) {
      this.#ops.logger?.error?.(`${this}: onReleaseRequest callback failed: ${String(cbErr)}`, { key: this.key });
    }
  }

  /** @internal _sessionLost loses the lease with its session. */
  _sessionLost(err: SessionLost): void {
    this.#lose(
      new SessionLost(`${this.key}: its session was lost: ${err.detail}`, {
        status: err.status,
        code: err.code,
        problem: err.problem,
        retryAfterMs: err.retryAfterMs,
      }),
    );
  }

  /** @internal _sessionEnded records that the session's end released the grant: the lease is released, not lost. */
  _sessionEnded(): void {
    this.#released = true;
    this.#renewer.stop();
  }

  /** #lose records why the lease was lost, once, and tells everyone. */
  #lose(err: LeaseLost, afterRelease = false): void {
    if (this.#error !== undefined || (this.#released && !afterRelease)) {
      return;
    }
    this.#error = err;
    this.#renewer.stop();
    this.#ops.logger?.warn?.(`${this}: lease lost: ${err.message}`, { key: this.key, fence: this.fence });
    this.#lost.abort(err);
    if (this.#onLost !== undefined) {
      try {
        this.#onLost(this, err);
      } catch (cbErr) {
        // A callback's bug must not stop the renewer's bookkeeping silently.
        this.#ops.logger?.error?.(`${this}: onLost callback failed: ${String(cbErr)}`, { key: this.key });
      }
    }
  }
}

/** withoutToken is an answer to keep: never the token or the proof. */
function withoutToken(grant: Grant): LeaseInfo | LeadershipInfo {
  const { token: _token, proof: _proof, ...rest } = grant;
  return rest;
}
