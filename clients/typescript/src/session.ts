// Session: one keep-alive for many grants, renewing itself.
//
// A session (`client.session({ ttlMs })`) is renewed every ttl/3 by a
// timer (unref'd, as a lease's). Grants acquired in it (`session` on
// acquire, withLock, permits and campaigns) have no renewer of their own
// and no TTL: they live exactly as long as the session. Ending the session
// (`end()`, or the end of `withSession`) releases every grant in it at
// once; a session nobody renews lapses at its expiry and takes every grant
// with it.
//
// Loss is a lease's: a renew answered 404 `session_not_found` loses the
// session at once; a renew that fails otherwise (503, no answer) is
// retried with backoff until the session's expiry by this process's
// monotonic clock, from when the last successful renew was sent, then it
// is lost. Loss records `session.error` (a SessionLost), loses every lease
// in the session with a SessionLost of its own, then aborts
// `session.signal` (whoever sees it aborted sees its leases lost) and
// calls `onLost` once. A renewal that no longer lists a lease's grant (it
// was force-released, or lapsed after a renewal failed) loses that lease
// alone. A renewal whose answer says that somebody asked the holder of a
// lock in it to step aside tells that lock's lease (`releaseSignal`,
// `onReleaseRequest`), once per request, as a lease's own renewal would.
//
// The session's id is a secret like a lease's token: whoever has it can
// end the session. Only `session.id` shows it: not toString, JSON.stringify,
// util.inspect, a message or a log line.

import { LeaseLost, SessionLost } from "./errors.js";
import { now, type Logger } from "./http.js";
import { grantExpiry, ranOut, Renewer } from "./renewer.js";
import type { Lease, LeaseSession } from "./lease.js";
import { LockSet } from "./lockset.js";
import type { CreatedSession, ReleaseRequested, SessionInfo } from "./types.js";

/** OnSessionLost is called once when a session is lost, with the SessionLost that says why. */
export type OnSessionLost = (session: Session, error: SessionLost) => void;

/** SessionOps is what a Session asks of its Client (internal). */
export interface SessionOps {
  readonly timeoutMs: number;
  readonly logger: Logger | undefined;
  /** One request on /v1/sessions/{id}[op], sent once. */
  call(method: "POST" | "DELETE", id: string, op: "" | "/renew", timeoutMs: number): Promise<SessionInfo>;
  /** GET /v1/sessions/{id}, retried as reads are. */
  read(id: string): Promise<SessionInfo>;
}

/** The options of a Session's constructor (internal: sessions come from client.session). */
export interface SessionInit {
  autoRenew?: boolean | undefined;
  onLost?: OnSessionLost | undefined;
  /** When the creation's answer arrived (now()); default sentAt (grantExpiry). */
  arrivedAt?: number | undefined;
}

/**
 * Session is a live session of lockd and its keep-alive.
 *
 * `ttlMs` is its TTL, `owner` whose it is, `signal` aborts when it is
 * lost (its reason is the SessionLost), `error` is that SessionLost.
 * `id` is its secret: it appears nowhere else. Pass the Session as
 * `session` to acquire, withLock, permits or campaign; `leases` are the
 * leases in it that are neither released nor lost.
 */
export class Session implements LeaseSession {
  readonly ttlMs: number;
  readonly owner: string;
  /** Aborted the moment the session is lost (and every lease in it); its reason is the SessionLost. Not aborted by end. */
  readonly signal: AbortSignal;

  readonly #ops: SessionOps;
  readonly #id: string;
  readonly #lost = new AbortController();
  readonly #onLost: OnSessionLost | undefined;
  #error: SessionLost | undefined;
  #expires: number;
  #renewals = 0;
  #ended = false;
  // Ended, and its leases told so.
  #closed = false;
  // The leases in the session, each with when it joined (monotonic): a
  // renewal sent before a lease joined may not list its grant.
  #leases: { lease: Lease | LockSet; joined: number }[] = [];
  readonly #renewer: Renewer;
  // The renewer's state between its turns.

  /** @internal Sessions come from Client.session. */
  constructor(ops: SessionOps, answer: CreatedSession, sentAt: number, init: SessionInit = {}) {
    this.#ops = ops;
    this.#id = answer.session;
    this.ttlMs = answer.ttl_ms;
    this.owner = answer.owner;
    this.#onLost = init.onLost;
    this.signal = this.#lost.signal;
    // A creation does not wait, but its answer may be slow: the same rule
    // as a lease's grant (grantExpiry).
    const { expiresAt, renewNow } = grantExpiry(sentAt, init.arrivedAt ?? sentAt, this.ttlMs);
    this.#expires = expiresAt;
    this.#renewer = new Renewer({
      ttlMs: this.ttlMs,
      expiresAt: () => this.#expires,
      renew: () => this.renew(),
      stopped: () => this.#ended || this.lost,
      gone: (err) => err instanceof SessionLost,
      what: "the session",
      lose: (last, lateMs) =>
        this.#lose(
          new SessionLost(
            lateMs !== undefined || last === undefined
              ? `the session: ${ranOut(lateMs ?? 0)}`
              : `could not renew the session before it expired: ${last.message}`,
          ),
        ),
      retrying: (e, attempt, delayMs) =>
        this.#ops.logger?.info?.(`${this}: renew failed (${e.message}); retrying in ${Math.round(delayMs)} ms`, {
          owner: this.owner,
          attempt,
          delayMs,
        }),
    });
    if (init.autoRenew !== false) {
      this.#renewer.start(renewNow);
    }
  }

  /**
   * The session's secret: acquires in it send it, and whoever has it can
   * end the session and so release everything in it. Keep it out of logs.
   */
  get id(): string {
    return this.#id;
  }

  /** Whether the session is lost (`signal.aborted`). */
  get lost(): boolean {
    return this.#lost.signal.aborted;
  }

  /** Why the session was lost; undefined while it is not. */
  get error(): SessionLost | undefined {
    return this.#error;
  }

  /** Whether end was called. */
  get ended(): boolean {
    return this.#ended;
  }

  /** How many renewals of the session succeeded. */
  get renewals(): number {
    return this.#renewals;
  }

  /** The leases acquired in this session that are neither released nor lost (lock sets aside). */
  get leases(): Lease[] {
    return this.#leases.map((j) => j.lease).filter((lease): lease is Lease => !(lease instanceof LockSet) && !lease._done());
  }

  /** check throws the SessionLost that ended the session, if it is lost; else it returns. */
  check(): void {
    if (this.#error !== undefined) {
      throw this.#error;
    }
  }

  /**
   * renew keeps the session, and every grant in it, alive for its TTL from
   * now, once. It answers the session as the server did (`owner`,
   * `ttl_ms`, `expires_at`, `holds`), without its id. The renewer calls it
   * every ttl/3; call it yourself after `client.session({ autoRenew:
   * false })`. An answer that the session is gone loses it and throws
   * SessionLost; any other failure throws and leaves the session as it
   * was (a 503 may mean that a grant in it was not renewed: renew again
   * soon).
   */
  async renew(): Promise<SessionInfo> {
    this.check();
    const sent = now();
    const timeout = Math.min(this.#ops.timeoutMs, Math.max(this.#expires - sent, 1));
    let answer: SessionInfo;
    try {
      answer = await this.#ops.call("POST", this.#id, "/renew", timeout);
    } catch (err) {
      if (err instanceof SessionLost) {
        this.#lose(err);
      }
      throw err;
    }
    const info = withoutId(answer);
    if (this.#ended) {
      return info;
    }
    this.#expires = sent + this.ttlMs;
    this.#renewals++;
    const joined = this.#leases.filter((j) => !j.lease._done());
    this.#leases = joined;
    const listed = joined.filter((j) => j.joined < sent).map((j) => j.lease);
    this.#dropMissing(info, listed);
    this.#passRequests(info, listed);
    return info;
  }

  /**
   * info reads the session from the server: `owner`, `ttl_ms`,
   * `created_at`, `expires_at` and `holds` (the grants in it, `{kind,
   * key}` each; a grant released on its own may stay listed until the
   * next renewal). It retries as reads do; a session that is gone is lost
   * and throws SessionLost.
   */
  async info(): Promise<SessionInfo> {
    try {
      return withoutId(await this.#ops.read(this.#id));
    } catch (err) {
      if (err instanceof SessionLost) {
        this.#lose(err);
      }
      throw err;
    }
  }

  /**
   * end stops the renewer and ends the session: the server releases every
   * grant in it at once. It answers the session and the `holds` it
   * released, or undefined when it was ended already. The leases in it are
   * released (not lost). A session that was lost throws its SessionLost,
   * without asking the server; one that the server says is gone is lost
   * and throws SessionLost. The end is sent once: if it fails otherwise,
   * the session lapses at its expiry.
   */
  async end(): Promise<SessionInfo | undefined> {
    if (this.#ended) {
      return undefined;
    }
    // From here the renewer records nothing, not even a 404 from a renew
    // that races this end.
    this.#ended = true;
    this.#renewer.stop();
    this.check();
    let answer: SessionInfo;
    try {
      answer = await this.#ops.call("DELETE", this.#id, "", this.#ops.timeoutMs);
    } catch (err) {
      if (err instanceof SessionLost) {
        this.#lose(err, true);
      }
      throw err;
    }
    const leases = this.#leases;
    this.#leases = [];
    this.#closed = true;
    for (const { lease } of leases) {
      lease._sessionEnded();
    }
    return withoutId(answer);
  }

  toString(): string {
    const state = this.lost ? "lost" : this.#ended ? "ended" : "live";
    return `Session(owner=${JSON.stringify(this.owner)} ttlMs=${this.ttlMs} ${state})`;
  }

  /** What JSON.stringify shows: never the id. */
  toJSON(): Record<string, unknown> {
    return { owner: this.owner, ttl_ms: this.ttlMs, lost: this.lost, ended: this.#ended };
  }

  /** What Node's util.inspect (console.log) shows. */
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }

  /**
   * @internal _attach puts a lease just granted in the session; a session
   * lost meanwhile loses it at once. A lease that joins once the end was
   * answered had its grant in the session when it ended (its acquire would
   * have failed otherwise): the end released it with the others.
   */
  _attach(lease: Lease | LockSet): void {
    if (this.#error !== undefined) {
      lease._sessionLost(this.#error);
    } else if (this.#closed) {
      lease._sessionEnded();
    } else {
      this.#leases.push({ lease, joined: now() });
    }
  }

  /** @internal _lose loses the session on an answer that it is gone (an acquire in it). */
  _lose(err: SessionLost): void {
    this.#lose(err);
  }

  /**
   * #dropMissing loses the leases whose grant a renewal of the session no
   * longer lists. The server lists a grant until the renewal after the one
   * that found it gone (force-released, or lapsed after a failed renewal).
   * Grants are listed by kind and key, so a lease is kept while any grant
   * of its key is in the session.
   */
  #dropMissing(info: SessionInfo, leases: (Lease | LockSet)[]): void {
    if (!Array.isArray(info.holds)) {
      return;
    }
    const listed = new Set(info.holds.map((h) => `${h.kind}\u0000${h.key}`));
    for (const lease of leases) {
      if (lease instanceof LockSet) {
        // A set holds every key or none: one missing loses it.
        if (lease.keys.some((k) => !listed.has(`lock\u0000${k}`))) {
          lease._lose(new LeaseLost("lock set: its session no longer holds it (a key was force-released, or it lapsed)"));
        }
      } else if (!listed.has(`${lease.kind}\u0000${lease.key}`)) {
        lease._lose(new LeaseLost(`${lease.key}: its session no longer holds it (force-released, or it lapsed)`));
      }
    }
  }

  /**
   * #passRequests tells each lock lease of the request to step aside that
   * its grant's hold carries. A grant in a session is renewed by the
   * session, so its lease learns of a request here, as a lone lease from
   * its own renewal. Only leases that joined before the renewal was sent
   * are told: a hold of their key in an older answer may be an earlier
   * grant's.
   */
  #passRequests(info: SessionInfo, leases: (Lease | LockSet)[]): void {
    if (!Array.isArray(info.holds)) {
      return;
    }
    const asked = new Map<string, ReleaseRequested>();
    for (const h of info.holds) {
      if (h.kind === "lock" && h.release_requested !== undefined) {
        asked.set(h.key, h.release_requested);
      }
    }
    for (const lease of leases) {
      // A lock set's keys are not asked one by one: request-release asks
      // a key's holder, and a set's key answers for its set.
      if (!(lease instanceof LockSet) && lease.kind === "lock") {
        lease._noteRequest(asked.get(lease.key));
      }
    }
  }

  /** #lose records why the session was lost, once, and loses every lease in it. */
  #lose(err: SessionLost, afterEnd = false): void {
    if (this.#error !== undefined || (this.#ended && !afterEnd)) {
      return;
    }
    this.#error = err;
    this.#renewer.stop();
    const leases = this.#leases;
    this.#leases = [];
    // Its leases first: whoever sees the session lost sees them lost.
    for (const { lease } of leases) {
      lease._sessionLost(err);
    }
    this.#lost.abort(err);
    this.#ops.logger?.warn?.(`${this}: session lost: ${err.message}`, { owner: this.owner });
    if (this.#onLost !== undefined) {
      try {
        this.#onLost(this, err);
      } catch (cbErr) {
        // A callback's bug must not stop the renewer's bookkeeping silently.
        this.#ops.logger?.error?.(`${this}: onLost callback failed: ${String(cbErr)}`, { owner: this.owner });
      }
    }
  }
}

/** withoutId is an answer to keep or hand out: never the session's id. */
function withoutId(answer: SessionInfo | CreatedSession): SessionInfo {
  const { session: _id, ...rest } = answer as CreatedSession;
  return rest;
}
