// Client: lockd's HTTP API for locks, semaphores and elections.
//
// Every kind of lease (a lock, a semaphore permit, an election's
// leadership) is the same wire shape under its own path: acquire, renew,
// release, force-release, state, list, history; an election calls acquire
// "campaign" and release "resign". The private methods of Client take the
// kind and do the work once; the public ones are the lock's,
// `client.semaphores` names the semaphore's and `client.elections` the
// election's, with the common ones (withPermit, campaign, leader, observe)
// on Client too.
//
// Sessions are not a kind of lease but what keeps leases alive:
// `client.session()` starts one with its keep-alive (a Session), and
// `session` on every acquire puts the grant in it instead of giving it a
// TTL; `client.sessions` has the bare operations by id.

import {
  InvalidRequest,
  LeaseNotFound,
  NotFound,
  NotGranted,
  SessionLost,
  TooManyHolders,
  Unavailable,
  Unreachable,
} from "./errors.js";
import { Transport, backoff, now, sleep, type Fetch, type Logger } from "./http.js";
import { Lease, type Grant, type LeaseKind, type LeaseOps, type OnLost } from "./lease.js";
import { LockSet, type LockSetOps, type OnSetLost } from "./lockset.js";
import { Observer, type ObserveOptions } from "./observe.js";
import { Session, type OnSessionLost, type SessionOps } from "./session.js";
import type {
  CreatedSession,
  ElectionList,
  ElectionState,
  EventType,
  ForceReleaseResult,
  History,
  LeaseInfo,
  LeadershipInfo,
  LockList,
  LockMode,
  LockSetInfo,
  LockState,
  ReleaseResult,
  RequestReleaseResult,
  ResignResult,
  SemaphoreList,
  SessionInfo,
  Value,
} from "./types.js";

export interface ClientOptions {
  /** The server, e.g. "http://lockd:8080" (https:// for TLS). */
  baseUrl: string;
  /** Sent as `Authorization: Bearer`; never shown anywhere. */
  apiKey?: string | undefined;
  /** How long a request may take, ms (default 10000); a waiting acquire gets its wait on top. */
  timeoutMs?: number | undefined;
  /** Acquire and reads retry 503 answers and connection errors at most this many times (default 10)... */
  retries?: number | undefined;
  /** ...and for at most this long past the wait, ms (default 30000). */
  retryForMs?: number | undefined;
  /** Where the client's few messages go (retries, losses); none by default. `console` is one. */
  logger?: Logger | undefined;
  /** The fetch to call (default: the platform's), e.g. one with a custom dispatcher. */
  fetch?: Fetch | undefined;
  /**
   * The longest round of a wait, ms (default: the server's longest wait,
   * its --max-wait, learnt from the 400 wait_ms with max_ms that answers
   * a longer one). A longer wait goes in rounds, all with one
   * Idempotency-Key, which keep the request's place in line.
   */
  waitRoundMs?: number | undefined;
}

/**
 * What keeps a grant alive instead of its own TTL: a Session of this
 * client (its keep-alive and its loss are the grant's), or the id of a
 * session something else keeps alive (no renewer here at all).
 */
export type SessionRef = Session | string;

/** The options of a lock's acquire (and of withLock). */
/** The knobs of lockMany. */
export interface LockManyOptions {
  /** Every lease's TTL, ms (default 30000). */
  ttlMs?: number | undefined;
  /** How long to wait for the keys, ms (default 0: try once). */
  waitMs?: number | undefined;
  owner?: string | undefined;
  /** Any JSON for every key's state. */
  value?: Value | undefined;
  /** "exclusive" (the default) or "shared": every key held beside other shared holders. */
  mode?: LockMode | undefined;
  /** false: no renewer; call set.renew() yourself. */
  autoRenew?: boolean | undefined;
  onLost?: OnSetLost | undefined;
  /** Aborts the acquire (not the set). */
  signal?: AbortSignal | undefined;
  /**
   * The session every key lives in, instead of a TTL (a TypeError with
   * ttlMs), as acquire's `session`: the set lives as long as the session
   * and has no renewer of its own; with a Session, it is lost when the
   * session is, and released by its end.
   */
  session?: SessionRef | undefined;
}

export interface AcquireOptions {
  /** The lease's TTL, ms (default 30000); left out with `session`. */
  ttlMs?: number | undefined;
  /** How long the server waits while another lease holds the key, ms (default 0: try once); FIFO across every lockd replica. */
  waitMs?: number | undefined;
  /** The holder's label (default: the API key's name or the caller's address). */
  owner?: string | undefined;
  /** "exclusive" (the default) or "shared" (beside other shared holders, never a writer). */
  mode?: LockMode | undefined;
  /** Any JSON (at most 4 KiB) that readers see in the state; never a secret. */
  value?: Value | undefined;
  /** After this lease ends by expiry or force-release, nobody gets the key for this long, ms (exclusive only). */
  lockDelayMs?: number | undefined;
  /**
   * A hold window, ms (exclusive only, at most ttlMs, not with a session;
   * ShedLock's lockAtLeastFor): a release earlier than this after the
   * grant ends the lease but keeps the key taken, by nobody, until the
   * window ends, so that a job many nodes start at once runs once per
   * window. Acquires meanwhile reject with MinHold; a waiting one is
   * granted when it ends.
   */
  minHoldMs?: number | undefined;
  /** Default: a new random one per call, the same on each of its retries. */
  idempotencyKey?: string | undefined;
  /** Renew every ttl/3 (default true). */
  autoRenew?: boolean | undefined;
  /** Called once if the lease is lost. */
  onLost?: OnLost | undefined;
  /** Gives up the wait (and the retries): the acquire rejects with the signal's reason, and nothing is granted. */
  signal?: AbortSignal | undefined;
  /**
   * The session the grant lives in, instead of a TTL of its own (a
   * TypeError with ttlMs): it lives as long as the session and has no
   * renewer of its own; with a Session, it is lost when the session is.
   * A session that is gone rejects with SessionLost.
   */
  session?: SessionRef | undefined;
}

/** The options of a permit's acquire: a lock's, without mode, lock-delay and hold window. */
export type PermitOptions = Omit<AcquireOptions, "mode" | "lockDelayMs" | "minHoldMs">;

/** A permit's acquire by the semaphore's name: the limit too. */
export interface SemaphoreAcquireOptions extends PermitOptions {
  /** The most permits held at once (1 ... 10000); every holder must use the same. */
  limit: number;
}

export interface CampaignOptions {
  /** The leadership's TTL, ms (default 30000); left out with `session`. */
  ttlMs?: number | undefined;
  /** How long to wait in line, ms; left out: as long as it takes. */
  waitMs?: number | undefined;
  /** Shown as the leader (default: the API key's name or the caller's address). */
  candidate?: string | undefined;
  /** Any JSON that observers and leader() see; proclaim replaces it. */
  value?: Value | undefined;
  lockDelayMs?: number | undefined;
  idempotencyKey?: string | undefined;
  autoRenew?: boolean | undefined;
  onLost?: OnLost | undefined;
  signal?: AbortSignal | undefined;
  /** The session the leadership lives in, as for a lock's acquire: a leader whose session lapses stops leading with it. */
  session?: SessionRef | undefined;
}

/** The options of client.session and withSession. */
export interface SessionOptions {
  /** The session's TTL, ms (default 30000); it is renewed every ttl/3. */
  ttlMs?: number | undefined;
  /** Whose session, for the history and the dashboard (default: the API key's name or the caller's address). */
  owner?: string | undefined;
  /** Called once if the session is lost (every lease in it is lost first). */
  onLost?: OnSessionLost | undefined;
  /** Renew every ttl/3 (default true); false: call `session.renew()` yourself. */
  autoRenew?: boolean | undefined;
  /** Gives up creating it (the retries); in withSession, aborts the callback's signal too. */
  signal?: AbortSignal | undefined;
}

export interface RenewOptions {
  /** The new TTL from now, ms (default: the lease's own). */
  ttlMs?: number | undefined;
  /** Replaces the grant's value. */
  value?: Value | undefined;
  /**
   * The lease's latest proof (the `proof` of its grant or last renewal):
   * sent beside the token, it lets any lockd restore the lease should
   * Redis have lost it. Keep the answer's for the next call.
   */
  proof?: string | undefined;
}

export interface ListOptions {
  prefix?: string | undefined;
  /** 1 ... 1000 (default 100). */
  limit?: number | undefined;
  /** The previous page's next_cursor. */
  cursor?: string | undefined;
}

export interface HistoryOptions {
  limit?: number | undefined;
  /** Only events of this type ("renewed": the renewals, with the time left at each). */
  type?: EventType | undefined;
}

export interface ForceReleaseOptions {
  /** Break only the holder with this fence (LeaseLost when none has it); left out: every holder. */
  fence?: number | undefined;
  /** Recorded in the history with the actor. */
  reason?: string | undefined;
}

export interface RequestReleaseOptions {
  /** Who asks, as the holder reads it; left out: the API key's name or the caller's address. */
  by?: string | undefined;
  reason?: string | undefined;
  /** Ask only the holder with this fence (LeaseLost when another holds the key). */
  fence?: number | undefined;
}

/** What withLock, withPermit and withLeadership run: `signal` aborts the moment the lease is lost. */
export type LeaseWork<T> = (signal: AbortSignal, lease: Lease) => Promise<T> | T;

/** What withSession runs: `signal` aborts the moment the session is lost (and every lease in it). */
export type SessionWork<T> = (session: Session, signal: AbortSignal) => Promise<T> | T;

interface Kind {
  readonly path: string;
  readonly acquire: string;
  readonly release: string;
}

const KINDS: Readonly<Record<LeaseKind, Kind>> = {
  lock: { path: "/v1/locks", acquire: "acquire", release: "release" },
  semaphore: { path: "/v1/semaphores", acquire: "acquire", release: "release" },
  election: { path: "/v1/elections", acquire: "campaign", release: "resign" },
};

// Backoff of the retries of acquire and reads: 100 ms doubling up to 5 s,
// at least the server's Retry-After (the Go client's figures).
const RETRY_BASE_MS = 100;
const RETRY_CEILING_MS = 5000;

/**
 * Client talks to one lockd server. One Client may serve any number of
 * leases and calls at once.
 *
 *     const client = new Client({ baseUrl: "http://lockd:8080", apiKey: process.env.LOCKD_API_KEY });
 *     await client.withLock("report:daily", { ttlMs: 30_000, waitMs: 10_000 }, async (signal, lease) => {
 *       await buildReport({ signal, fence: lease.fence });
 *     });
 */
export class Client {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  readonly retries: number;
  readonly retryForMs: number;
  readonly logger: Logger | undefined;
  /** The semaphore operations by name. */
  readonly semaphores: Semaphores;
  /** The election operations. */
  readonly elections: Elections;
  /** The session operations by id (client.session is the usual way). */
  readonly sessions: Sessions;

  readonly #t: Transport;
  readonly #waitRoundMs: number;
  // The server's longest wait, ms, learnt from the first wait it refused
  // as too long (0: not known yet).
  #maxWaitMs = 0;
  readonly #ops: LeaseOps;
  readonly #sessionOps: SessionOps;
  readonly #setOps: LockSetOps;

  constructor(opts: ClientOptions) {
    this.#t = new Transport(opts.baseUrl, opts.apiKey, opts.fetch);
    this.baseUrl = this.#t.baseUrl;
    this.timeoutMs = ms(opts.timeoutMs ?? 10_000, "timeoutMs");
    this.retries = Math.max(0, Math.floor(opts.retries ?? 10));
    this.retryForMs = ms(opts.retryForMs ?? 30_000, "retryForMs");
    this.logger = opts.logger;
    this.#waitRoundMs = opts.waitRoundMs === undefined ? 0 : ms(opts.waitRoundMs, "waitRoundMs");
    this.semaphores = new Semaphores(this);
    this.elections = new Elections(this);
    this.sessions = new Sessions(this);
    const client = this;
    this.#ops = {
      get timeoutMs() {
        return client.timeoutMs;
      },
      get logger() {
        return client.logger;
      },
      renew: (kind, key, token, ttlMs, timeoutMs, value, proof) =>
        this._renew(kind, key, token, { ttlMs, value, proof }, timeoutMs),
      proclaim: (key, token, value, proof) => this._proclaim(key, token, value, proof),
      release: (kind, key, token, proof) => this._release(kind, key, token, proof),
    };
    this.#sessionOps = {
      get timeoutMs() {
        return client.timeoutMs;
      },
      get logger() {
        return client.logger;
      },
      call: (method, id, op, timeoutMs) => this._sessionCall(method, id, op, timeoutMs),
      read: (id) => this.sessions.get(id),
    };
    this.#setOps = {
      get timeoutMs() {
        return client.timeoutMs;
      },
      get logger() {
        return client.logger;
      },
      setCall: <T>(op: "renew" | "release", body: Record<string, unknown>, timeoutMs: number) =>
        this.#t.request<T>("POST", `/v1/lock-sets/${op}`, { body, timeoutMs }),
    };
  }

  toString(): string {
    return `Client(${JSON.stringify(this.baseUrl)}${this.#t.hasApiKey ? ", apiKey=<set>" : ""})`;
  }

  toJSON(): Record<string, unknown> {
    return { baseUrl: this.baseUrl, apiKey: this.#t.hasApiKey ? "<set>" : undefined };
  }

  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }

  // Locks.

  /**
   * acquire takes the lock on key and answers its Lease, renewing itself
   * every ttl/3. While another lease holds key, the server waits up to
   * waitMs (FIFO across every lockd replica), then LockHeld, or Queued
   * when the key is free but kept for requests that began to wait
   * earlier. 503 answers and connection errors are retried with backoff,
   * each retry with the same Idempotency-Key, so a retry whose first
   * answer was lost gets that lease back (`lease.replayed`). With
   * `session`, the grant lives in that session instead (no TTL, no
   * renewer of its own).
   */
  async acquire(key: string, opts: AcquireOptions = {}): Promise<Lease> {
    const body: Record<string, unknown> = lifetime(opts.ttlMs, opts.session);
    if (opts.lockDelayMs !== undefined) body["lock_delay_ms"] = ms(opts.lockDelayMs, "lockDelayMs");
    if (opts.minHoldMs !== undefined) body["min_hold_ms"] = ms(opts.minHoldMs, "minHoldMs");
    if (opts.owner !== undefined) body["owner"] = opts.owner;
    if (opts.value !== undefined) body["value"] = opts.value;
    if (opts.mode !== undefined) body["mode"] = opts.mode;
    return this._acquire("lock", key, body, opts.waitMs ?? 0, opts);
  }

  /**
   * lockMany takes every key of keys (2 … 64 distinct lock keys),
   * exclusively (or with mode "shared", shared), or none of them, and answers the LockSet, renewing
   * itself every ttl/3 and lost when any key is. It waits up to waitMs:
   * sets wait for their keys in one order, so two sets never wait for
   * each other, and a waiting set holds none of its keys. A key that is
   * not free rejects as a lone acquire of it would (LockHeld, Queued,
   * LockDelay), naming that key (`err.problem.key`).
   */
  async lockMany(keys: string[], opts: LockManyOptions = {}): Promise<LockSet> {
    const body: Record<string, unknown> = { keys: [...keys] };
    const inSession = opts.session instanceof Session ? opts.session : undefined;
    if (opts.session !== undefined) {
      Object.assign(body, lifetime(opts.ttlMs, opts.session));
      inSession?.check();
    } else if (opts.ttlMs !== undefined) {
      body["ttl_ms"] = ms(opts.ttlMs, "ttlMs");
    }
    if (opts.owner !== undefined) body["owner"] = opts.owner;
    if (opts.value !== undefined) body["value"] = opts.value;
    if (opts.mode !== undefined) body["mode"] = opts.mode;
    const waitUntil = now() + ms(opts.waitMs ?? 0, "waitMs");
    let sent = 0;
    let asked = 0;
    for (;;) {
      try {
        const set = await this._retrying("acquire lock set", waitUntil + this.retryForMs, opts.signal, () => {
          const b = { ...body };
          let left = Math.max(0, Math.round(waitUntil - now()));
          for (const cap of [ROUND_MAX_MS, this.#maxWaitMs, this.#waitRoundMs]) {
            if (cap > 0) left = Math.min(left, cap);
          }
          asked = left;
          if (left > 0) {
            b["wait_ms"] = left;
          }
          sent = now();
          return this.#t.request<LockSetInfo & { token: string; proof?: string }>("POST", "/v1/lock-sets/acquire", {
            body: b,
            timeoutMs: this.timeoutMs + left,
            signal: opts.signal,
          });
        });
        const s = new LockSet(this.#setOps, set, sent, now(), {
          autoRenew: opts.autoRenew !== false && opts.session === undefined,
          onLost: opts.onLost,
        });
        inSession?._attach(s);
        return s;
      } catch (err) {
        if (err instanceof SessionLost) {
          inSession?._lose(err);
        }
        const maxMs = err instanceof InvalidRequest ? err.problem["max_ms"] : undefined;
        if (err instanceof InvalidRequest && err.field === "wait_ms" && typeof maxMs === "number" && maxMs > 0 && asked > maxMs) {
          this.#maxWaitMs = maxMs;
          continue;
        }
        if (err instanceof NotGranted && asked > 0 && waitUntil - now() >= 1 && !opts.signal?.aborted) {
          continue; // a round ended: a set keeps no place between rounds, it asks again
        }
        throw err;
      }
    }
  }

  /**
   * withLock acquires key, runs fn under the lease and releases it when
   * fn settles, answering what fn answered. fn's signal aborts the moment
   * the lease is lost (or opts.signal aborts); a lease lost while fn ran
   * rejects with LeaseLost once fn returns, since the work did not finish
   * under the lock. When fn throws, its error is what rejects, never
   * replaced by the lease's.
   */
  withLock<T>(key: string, opts: AcquireOptions, fn: LeaseWork<T>): Promise<T> {
    return this._withLease(() => this.acquire(key, { ...opts, autoRenew: true }), opts.signal, fn);
  }

  /**
   * renew extends the lease with token on key, once. Leases from acquire
   * renew themselves: this is for tokens kept elsewhere. A lease that is
   * no longer live throws LeaseLost (LeaseNotFound when the key has no
   * live lease at all).
   */
  async renew(key: string, token: string, opts: RenewOptions = {}): Promise<LeaseInfo> {
    return strip(await this._renew("lock", key, token, opts, this.timeoutMs)) as LeaseInfo;
  }

  /** release gives back one level of the lease with token (and its latest proof, see RenewOptions) on key: `{key, released, count}`. */
  release(key: string, token: string, proof?: string): Promise<ReleaseResult> {
    return this._release("lock", key, token, proof) as Promise<ReleaseResult>;
  }

  /** forceRelease breaks every lease on key, or with fence only that holder's (admin scope). */
  forceRelease(key: string, opts: ForceReleaseOptions = {}): Promise<ForceReleaseResult> {
    return this._forceRelease("lock", key, opts);
  }

  /**
   * requestRelease asks the exclusive holder of key to step aside (write
   * scope); the holder decides. Its lease learns it on its next renewal
   * (`lease.releaseSignal` aborts with the request as its reason,
   * `lease.onReleaseRequest` is called); a lease in a session, on its
   * session's next renewal. NotExclusive when the key is held shared,
   * NotFound when nobody holds it.
   */
  requestRelease(key: string, opts: RequestReleaseOptions = {}): Promise<RequestReleaseResult> {
    const body: Record<string, unknown> = {};
    if (opts.by !== undefined) body["by"] = opts.by;
    if (opts.reason !== undefined) body["reason"] = opts.reason;
    if (opts.fence !== undefined) body["fence"] = opts.fence;
    return this.#t.request("POST", `${KINDS.lock.path}/${enc(key)}/request-release`, { body, timeoutMs: this.timeoutMs });
  }

  /** state is the live lock on key: mode, holders, queue (never a token); NotFound when it has none. */
  state(key: string): Promise<LockState> {
    return this._get("lock", "/" + enc(key), {});
  }

  /** list is one page of live locks: `{locks, next_cursor}`; pass next_cursor back for the next. */
  list(opts: ListOptions = {}): Promise<LockList> {
    return this._get("lock", "", { prefix: opts.prefix, limit: opts.limit, cursor: opts.cursor });
  }

  /** history is the key's recent lifecycle events, newest first (`type` filters). */
  history(key: string, opts: HistoryOptions = {}): Promise<History> {
    return this._get("lock", "/" + enc(key) + "/history", { limit: opts.limit, type: opts.type });
  }

  /** renewals is the key's last renewals, each with the time its lease had left (`remaining_ms`). */
  renewals(key: string, opts: { limit?: number } = {}): Promise<History> {
    return this.history(key, { limit: opts.limit, type: "renewed" });
  }

  // Semaphores: a handle by name, and withPermit; the rest is on
  // client.semaphores.

  /** semaphore is a handle on the semaphore name, whose permits this process takes with that limit. */
  semaphore(name: string, opts: { limit: number }): Semaphore {
    return new Semaphore(this, name, opts.limit);
  }

  /** withPermit takes a permit of name, runs fn under it and releases it, as withLock does for a lock. */
  withPermit<T>(name: string, opts: SemaphoreAcquireOptions, fn: LeaseWork<T>): Promise<T> {
    return this.semaphores.withPermit(name, opts, fn);
  }

  // Elections: campaign, withLeadership, leader, observe, resign and
  // electionHistory here; the rest on client.elections.

  /**
   * campaign waits in line to lead the election name and answers the
   * leadership: a Lease whose `term` is its fence, renewing itself every
   * ttl/3; `lease.proclaim(value)` sets its value, `lease.release()`
   * resigns. Candidates lead in the order they began to campaign, across
   * every lockd replica. After waitMs: LockHeld (someone leads) or Queued
   * (earlier candidates come first); without waitMs, as long as it takes.
   */
  campaign(name: string, opts: CampaignOptions = {}): Promise<Lease> {
    return this.elections.campaign(name, opts);
  }

  /** withLeadership campaigns, runs fn while leading and resigns, as withLock does for a lock. */
  withLeadership<T>(name: string, opts: CampaignOptions, fn: LeaseWork<T>): Promise<T> {
    return this.elections.withLeadership(name, opts, fn);
  }

  /**
   * leader is who leads the election name: `{key, leader, value, term,
   * since, expires_at, remaining_ms, candidates}` (never a token);
   * NotFound when nobody leads and nobody campaigns. Candidates waiting
   * while nobody leads give a state without `leader`.
   */
  leader(name: string): Promise<ElectionState> {
    return this.elections.leader(name);
  }

  /** observe follows the election name: an async iterator of `{event, data}`, the current leader (or vacant) first. See Observer. */
  observe(name: string, opts: ObserveOptions = {}): Observer {
    return this.elections.observe(name, opts);
  }

  /** resign ends the leadership with token (and its latest proof): `{key, resigned}`; the next candidate leads at once. */
  resign(name: string, token: string, proof?: string): Promise<ResignResult> {
    return this.elections.resign(name, token, proof);
  }

  /** electionHistory is the election's recent events, newest first: terms begun, resigned, lapsed, broken, proclaimed. */
  electionHistory(name: string, opts: HistoryOptions = {}): Promise<History> {
    return this.elections.history(name, opts);
  }

  // Sessions: the keep-alive here; the bare operations by id on
  // client.sessions.

  /**
   * session starts a session and answers it, renewing itself every
   * ttl/3: one keep-alive for many grants. Pass it as `session` to
   * acquire, withLock, permits and campaign: the grant lives as long as
   * the session. `session.end()` ends it and the server releases every
   * grant in it at once; a session nobody renews lapses after its TTL and
   * takes them with it. It is lost as a lease is (`session.signal`,
   * `onLost`, `session.check()` throws SessionLost), and every lease in
   * it with it. Creating it retries as acquire does.
   */
  async session(opts: SessionOptions = {}): Promise<Session> {
    const body: Record<string, unknown> = { ttl_ms: ms(opts.ttlMs ?? 30_000, "ttlMs") };
    if (opts.owner !== undefined) body["owner"] = opts.owner;
    let sent = 0;
    const answer = await this._retrying("POST /v1/sessions", now() + this.retryForMs, opts.signal, () => {
      sent = now();
      return this._request<CreatedSession>("POST", "/v1/sessions", body, opts.signal);
    });
    const arrivedAt = now();
    if (typeof answer.session !== "string") {
      throw new Unreachable("POST /v1/sessions: the answer has no session id; not lockd's");
    }
    return new Session(this.#sessionOps, answer, sent, { autoRenew: opts.autoRenew, onLost: opts.onLost, arrivedAt });
  }

  /**
   * withSession starts a session, runs fn in it and ends it when fn
   * settles (releasing every grant still in it), answering what fn
   * answered. fn's signal aborts the moment the session is lost (or
   * opts.signal aborts); a session lost while fn ran rejects with
   * SessionLost once fn returns, since the work did not finish under it.
   * When fn throws, its error is what rejects, never replaced by the
   * session's.
   */
  async withSession<T>(opts: SessionOptions, fn: SessionWork<T>): Promise<T> {
    const session = await this.session(opts);
    return this._under(
      session.signal,
      opts.signal,
      (signal) => fn(session, signal),
      // Lost while fn ran: end throws its SessionLost, without asking.
      async () => {
        await session.end();
      },
      (err) => `${session}: not ended after an error in the callback: ${String(err)}`,
    );
  }

  // The work, once for every kind. Not part of the API: the names begin
  // with _ because Semaphores, Semaphore and Elections call them.

  /**
   * @internal _acquire sends an acquire until it is answered, each retry
   * with what is left of the wait. The Idempotency-Key is the same on
   * every attempt of this call: an attempt whose answer was lost after the
   * server granted it is answered, on retry, with that same lease
   * (`replayed`) rather than 409 by a lease held by ourselves. A wait
   * longer than the server's longest goes in rounds of at most that (a
   * 400 on wait_ms states it as max_ms), with the same Idempotency-Key:
   * the server keeps the request's place in line and its waiting-since.
   */
  async _acquire(
    kind: LeaseKind,
    key: string,
    body: Record<string, unknown>,
    waitMs: number,
    opts: {
      idempotencyKey?: string | undefined;
      autoRenew?: boolean | undefined;
      onLost?: OnLost | undefined;
      signal?: AbortSignal | undefined;
      session?: SessionRef | undefined;
    },
  ): Promise<Lease> {
    // A grant in a Session joins it; a lost Session is not asked for, and
    // one the server says is gone is lost.
    const inSession = opts.session instanceof Session ? opts.session : undefined;
    inSession?.check();
    const path = `${KINDS[kind].path}/${enc(key)}/${KINDS[kind].acquire}`;
    const headers = { "Idempotency-Key": opts.idempotencyKey ?? (await randomKey()) };
    // An answer that replays an earlier attempt's grant: no earlier than this.
    const first = now();
    const waitUntil = first + ms(waitMs, "waitMs");
    let sent = 0;
    let asked = 0; // the wait_ms of the last attempt
    let grant: Grant;
    for (;;) {
      try {
        grant = await this._retrying(`acquire ${kind} ${key}`, waitUntil + this.retryForMs, opts.signal, () => {
          const b = { ...body };
          let left = Math.max(0, Math.round(waitUntil - now()));
          for (const cap of [ROUND_MAX_MS, this.#maxWaitMs, this.#waitRoundMs]) {
            if (cap > 0) left = Math.min(left, cap);
          }
          asked = left;
          if (left > 0) {
            b["wait_ms"] = left;
          }
          sent = now();
          return this.#t.request<Grant>("POST", path, {
            body: b,
            headers,
            timeoutMs: this.timeoutMs + left,
            signal: opts.signal,
          });
        });
        break;
      } catch (err) {
        if (err instanceof SessionLost) {
          inSession?._lose(err);
        }
        const maxMs = err instanceof InvalidRequest ? err.problem["max_ms"] : undefined;
        if (err instanceof InvalidRequest && err.field === "wait_ms" && typeof maxMs === "number" && maxMs > 0 && asked > maxMs) {
          this.#maxWaitMs = maxMs; // the server's longest wait: rounds of it
          continue;
        }
        if (err instanceof NotGranted && !(err instanceof TooManyHolders) && asked > 0 && waitUntil - now() >= 1 && !opts.signal?.aborted) {
          continue; // a round ended; the wait goes on, in the same place
        }
        throw err;
      }
    }
    const arrivedAt = now();
    if (grant.replayed === true) {
      sent = first; // granted to an earlier attempt whose answer was lost
    }
    const lease = new Lease(this.#ops, kind, grant, sent, {
      arrivedAt,
      // A grant in a session, even one known by its id alone, is kept by
      // the session's renewals: it never renews itself.
      autoRenew: opts.session === undefined ? opts.autoRenew : false,
      onLost: opts.onLost,
      value: body["value"],
      session: inSession,
    });
    inSession?._attach(lease);
    return lease;
  }

  /** @internal */
  async _withLease<T>(acquire: () => Promise<Lease>, outer: AbortSignal | undefined, fn: LeaseWork<T>): Promise<T> {
    const lease = await acquire();
    return this._under(
      lease.signal,
      outer,
      (signal) => fn(signal, lease),
      // Lost while fn ran: release throws its LeaseLost, without asking.
      async () => {
        await lease.release();
      },
      (err) => `${lease}: not released after an error in the callback: ${String(err)}`,
    );
  }

  /**
   * @internal _under runs fn with a signal that aborts when lost or outer
   * does, then finish (a release, an end), which rejects when what fn ran
   * under was lost meanwhile. When fn throws, finish is still run, but
   * its error is only logged: fn's error is what went wrong, and the
   * lease or session being gone too (often its cause) must not replace it.
   */
  async _under<T>(
    lost: AbortSignal,
    outer: AbortSignal | undefined,
    fn: (signal: AbortSignal) => Promise<T> | T,
    finish: () => Promise<void>,
    notFinished: (err: unknown) => string,
  ): Promise<T> {
    // fn's signal: the loss, or the caller's own signal.
    const ac = new AbortController();
    const onLost = () => ac.abort(lost.reason);
    const onOuter = () => ac.abort(outer?.reason);
    if (lost.aborted) onLost();
    lost.addEventListener("abort", onLost, { once: true });
    if (outer?.aborted) onOuter();
    outer?.addEventListener("abort", onOuter, { once: true });
    let result: T;
    try {
      result = await fn(ac.signal);
    } catch (err) {
      try {
        await finish();
      } catch (finishErr) {
        this.logger?.warn?.(notFinished(finishErr));
      }
      throw err;
    } finally {
      lost.removeEventListener("abort", onLost);
      outer?.removeEventListener("abort", onOuter);
    }
    await finish();
    return result;
  }

  /** @internal */
  async _renew(kind: LeaseKind, key: string, token: string, opts: RenewOptions, timeoutMs: number): Promise<Grant> {
    const body: Record<string, unknown> = { token };
    if (opts.ttlMs !== undefined) body["ttl_ms"] = ms(opts.ttlMs, "ttlMs");
    if (opts.value !== undefined) body["value"] = opts.value;
    if (opts.proof) body["proof"] = opts.proof;
    return this._leaseCall<Grant>(kind, key, "renew", body, timeoutMs);
  }

  /** @internal */
  _proclaim(key: string, token: string, value: Value, proof: string | undefined): Promise<Grant> {
    const body: Record<string, unknown> = { token, value };
    if (proof) body["proof"] = proof;
    return this._leaseCall<Grant>("election", key, "proclaim", body);
  }

  /** @internal */
  _release(kind: LeaseKind, key: string, token: string, proof?: string): Promise<ReleaseResult | ResignResult> {
    const body: Record<string, unknown> = { token };
    if (proof) body["proof"] = proof;
    return this._leaseCall(kind, key, KINDS[kind].release, body);
  }

  /**
   * @internal _leaseCall is a renew, release, resign or proclaim: sent
   * once, since a retried release could give back two levels.
   */
  async _leaseCall<T>(kind: LeaseKind, key: string, op: string, body: Record<string, unknown>, timeoutMs = this.timeoutMs): Promise<T> {
    try {
      return await this.#t.request<T>("POST", `${KINDS[kind].path}/${enc(key)}/${op}`, { body, timeoutMs });
    } catch (err) {
      if (err instanceof NotFound) {
        // No live lease on the key: for the token's holder, the lease is
        // lost as surely as with 409 lease_lost.
        throw new LeaseNotFound(err.detail, { status: err.status, code: err.code, problem: err.problem });
      }
      throw err;
    }
  }

  /** @internal */
  _forceRelease(kind: LeaseKind, key: string, opts: ForceReleaseOptions): Promise<ForceReleaseResult> {
    const body: Record<string, unknown> = {};
    if (opts.fence !== undefined) body["fence"] = opts.fence;
    if (opts.reason !== undefined) body["reason"] = opts.reason;
    return this.#t.request("POST", `${KINDS[kind].path}/${enc(key)}/force-release`, { body, timeoutMs: this.timeoutMs });
  }

  /** @internal _request is one request with a JSON body, sent once. */
  _request<T>(method: string, path: string, body: Record<string, unknown>, signal?: AbortSignal): Promise<T> {
    return this.#t.request<T>(method, path, { body, timeoutMs: this.timeoutMs, signal });
  }

  /**
   * @internal _sessionCall is one request on /v1/sessions/{id}[op], sent
   * once, named without the id in every message.
   */
  _sessionCall(
    method: "GET" | "POST" | "DELETE",
    id: string,
    op: "" | "/renew",
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<SessionInfo> {
    if (typeof id !== "string") {
      throw new TypeError(`lockd: a session's id is a string, not ${typeof id}`);
    }
    return this.#t.request<SessionInfo>(method, `/v1/sessions/${enc(id)}${op}`, {
      timeoutMs,
      signal,
      label: `${method} /v1/sessions/{id}${op}`,
    });
  }

  /** @internal _get reads, retrying as acquire does: a read changes nothing. */
  _get<T>(kind: LeaseKind, path: string, query: Record<string, string | number | undefined>, signal?: AbortSignal): Promise<T> {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) {
      if (v !== undefined) q.set(k, String(v));
    }
    const qs = q.toString();
    const full = KINDS[kind].path + path + (qs ? "?" + qs : "");
    return this._retrying(`GET ${full}`, now() + this.retryForMs, signal, () =>
      this.#t.request<T>("GET", full, { timeoutMs: this.timeoutMs, signal }),
    );
  }

  /** @internal _observe opens an election's event stream, retrying as reads do. */
  _observe(name: string, opts: ObserveOptions): Observer {
    const path = `${KINDS.election.path}/${enc(name)}/observe`;
    return new Observer(
      name,
      (signal) =>
        this._retrying(`GET ${path}`, now() + this.retryForMs, signal, () => this.#t.stream(path, this.timeoutMs, signal)),
      opts,
    );
  }

  /** @internal */

  /** @internal _retrying calls until an answer that is not Unavailable, at most `retries` more times and until giveUpAt. */
  async _retrying<T>(what: string, giveUpAt: number, signal: AbortSignal | undefined, call: () => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await call();
      } catch (err) {
        if (!(err instanceof Unavailable) || signal?.aborted || attempt >= this.retries) {
          throw err;
        }
        const d = backoff(attempt, RETRY_BASE_MS, RETRY_CEILING_MS, err.retryAfterMs);
        if (now() + d > giveUpAt) {
          throw err;
        }
        this.logger?.warn?.(`${what}: ${err.message}; retry ${attempt + 1} in ${Math.round(d)} ms`, {
          attempt: attempt + 1,
          delayMs: d,
          status: err.status,
          code: err.code,
          retryAfterMs: err.retryAfterMs,
        });
        await sleep(d, signal);
      }
    }
  }
}

/**
 * Semaphores are the semaphore operations by name: `client.semaphores`.
 * At most `limit` permits of a semaphore are held at once, each its own
 * Lease (token, fence, TTL, renewals, release). A semaphore and a lock of
 * the same name are unrelated.
 */
export class Semaphores {
  readonly #c: Client;

  constructor(client: Client) {
    this.#c = client;
  }

  /** acquire takes a permit (limit 1 ... 10000), waiting up to waitMs; NoPermits when none came free, LimitMismatch when held with another limit. */
  async acquire(name: string, opts: SemaphoreAcquireOptions): Promise<Lease> {
    const body: Record<string, unknown> = { limit: opts.limit, ...lifetime(opts.ttlMs, opts.session) };
    if (opts.owner !== undefined) body["owner"] = opts.owner;
    if (opts.value !== undefined) body["value"] = opts.value;
    return this.#c._acquire("semaphore", name, body, opts.waitMs ?? 0, opts);
  }

  /** withPermit takes a permit, runs fn under it and releases it, as withLock does for a lock. */
  withPermit<T>(name: string, opts: SemaphoreAcquireOptions, fn: LeaseWork<T>): Promise<T> {
    return this.#c._withLease(() => this.acquire(name, { ...opts, autoRenew: true }), opts.signal, fn);
  }

  /** renew extends the permit with token, once; LeaseLost when it is no longer live. */
  async renew(name: string, token: string, opts: RenewOptions = {}): Promise<LeaseInfo> {
    return strip(await this.#c._renew("semaphore", name, token, opts, this.#c.timeoutMs)) as LeaseInfo;
  }

  /** release gives back one level of the permit with token (and its latest proof). */
  release(name: string, token: string, proof?: string): Promise<ReleaseResult> {
    return this.#c._release("semaphore", name, token, proof) as Promise<ReleaseResult>;
  }

  /** forceRelease breaks every permit, or with fence only that one (admin scope). */
  forceRelease(name: string, opts: ForceReleaseOptions = {}): Promise<ForceReleaseResult> {
    return this.#c._forceRelease("semaphore", name, opts);
  }

  /** state is the semaphore: limit, holders, queue (never a token); NotFound when no permit is held. */
  state(name: string): Promise<LockState> {
    return this.#c._get("semaphore", "/" + enc(name), {});
  }

  /** list is one page of semaphores with a permit held: `{semaphores, next_cursor}`. */
  list(opts: ListOptions = {}): Promise<SemaphoreList> {
    return this.#c._get("semaphore", "", { prefix: opts.prefix, limit: opts.limit, cursor: opts.cursor });
  }

  /** history is every permit's recent lifecycle events, newest first. */
  history(name: string, opts: HistoryOptions = {}): Promise<History> {
    return this.#c._get("semaphore", "/" + enc(name) + "/history", { limit: opts.limit, type: opts.type });
  }

  /** renewals is the permits' last renewals. */
  renewals(name: string, opts: { limit?: number } = {}): Promise<History> {
    return this.history(name, { limit: opts.limit, type: "renewed" });
  }
}

/** Semaphore is one semaphore with the limit this process uses: `client.semaphore(name, {limit})`. */
export class Semaphore {
  readonly name: string;
  readonly limit: number;
  readonly #c: Client;

  constructor(client: Client, name: string, limit: number) {
    this.#c = client;
    this.name = name;
    this.limit = limit;
  }

  /** acquire takes a permit, waiting up to waitMs (FIFO); NoPermits when none came free. */
  acquire(opts: PermitOptions = {}): Promise<Lease> {
    return this.#c.semaphores.acquire(this.name, { ...opts, limit: this.limit });
  }

  /** withPermit takes a permit, runs fn under it and releases it. */
  withPermit<T>(opts: PermitOptions, fn: LeaseWork<T>): Promise<T> {
    return this.#c.semaphores.withPermit(this.name, { ...opts, limit: this.limit }, fn);
  }

  state(): Promise<LockState> {
    return this.#c.semaphores.state(this.name);
  }

  history(opts: HistoryOptions = {}): Promise<History> {
    return this.#c.semaphores.history(this.name, opts);
  }

  renewals(opts: { limit?: number } = {}): Promise<History> {
    return this.#c.semaphores.renewals(this.name, opts);
  }

  renew(token: string, opts: RenewOptions = {}): Promise<LeaseInfo> {
    return this.#c.semaphores.renew(this.name, token, opts);
  }

  release(token: string): Promise<ReleaseResult> {
    return this.#c.semaphores.release(this.name, token);
  }

  forceRelease(opts: ForceReleaseOptions = {}): Promise<ForceReleaseResult> {
    return this.#c.semaphores.forceRelease(this.name, opts);
  }
}

/**
 * Elections are the election operations: `client.elections`. An election
 * has one leader at a time, candidates served in the order they began to
 * campaign (across every lockd replica), and every leadership numbered by
 * a term that strictly increases: the leadership's fence. An election and
 * a lock of the same name are unrelated.
 */
export class Elections {
  readonly #c: Client;

  constructor(client: Client) {
    this.#c = client;
  }

  /**
   * campaign waits in line up to waitMs (left out: as long as it takes)
   * to lead name, and answers the leadership, renewing itself. Without
   * waitMs it waits in rounds of the longest wait the server takes,
   * keeping its place in line.
   */
  async campaign(name: string, opts: CampaignOptions = {}): Promise<Lease> {
    const body: Record<string, unknown> = lifetime(opts.ttlMs, opts.session);
    if (opts.candidate !== undefined) body["candidate"] = opts.candidate;
    if (opts.value !== undefined) body["value"] = opts.value;
    if (opts.lockDelayMs !== undefined) body["lock_delay_ms"] = ms(opts.lockDelayMs, "lockDelayMs");
    return this.#c._acquire("election", name, body, opts.waitMs ?? FOREVER_MS, opts);
  }

  /** withLeadership campaigns, runs fn while leading and resigns; fn's signal aborts the moment the leadership is lost. */
  withLeadership<T>(name: string, opts: CampaignOptions, fn: LeaseWork<T>): Promise<T> {
    return this.#c._withLease(() => this.campaign(name, { ...opts, autoRenew: true }), opts.signal, fn);
  }

  /** renew extends the leadership with token, once (a value proclaims it too); LeaseLost when it no longer leads. */
  async renew(name: string, token: string, opts: RenewOptions = {}): Promise<LeadershipInfo> {
    return strip(await this.#c._renew("election", name, token, opts, this.#c.timeoutMs)) as LeadershipInfo;
  }

  /** proclaim sets the value of the leadership with token, keeping it; LeaseLost when it no longer leads. */
  async proclaim(name: string, token: string, value: Value, proof?: string): Promise<LeadershipInfo> {
    return strip(await this.#c._proclaim(name, token, value, proof)) as LeadershipInfo;
  }

  /**
   * handover gives up the leadership with token to the candidate `to`, who
   * leads next ahead of earlier candidates: `{key, resigned}`. NotCandidate
   * (the leader still leads) when `to` is not campaigning. A Lease from
   * campaign keeps renewing until you abandon() it.
   */
  handover(name: string, token: string, to: string): Promise<ResignResult> {
    return this.#c._leaseCall<ResignResult>("election", name, "handover", { token, to });
  }

  /** resign ends the leadership with token (and its latest proof): `{key, resigned}`; LeaseLost when it no longer leads. */
  resign(name: string, token: string, proof?: string): Promise<ResignResult> {
    return this.#c._release("election", name, token, proof) as Promise<ResignResult>;
  }

  /** forceRelease breaks the leadership (with fence: only that term's) so the next candidate leads (admin scope). */
  forceRelease(name: string, opts: ForceReleaseOptions = {}): Promise<ForceReleaseResult> {
    return this.#c._forceRelease("election", name, opts);
  }

  /** leader is the election's state (never a token); NotFound when nobody leads or campaigns. */
  leader(name: string): Promise<ElectionState> {
    return this.#c._get("election", "/" + enc(name), {});
  }

  /** state is leader. */
  state(name: string): Promise<ElectionState> {
    return this.leader(name);
  }

  /** list is one page of elections: `{elections, next_cursor}`. */
  list(opts: ListOptions = {}): Promise<ElectionList> {
    return this.#c._get("election", "", { prefix: opts.prefix, limit: opts.limit, cursor: opts.cursor });
  }

  /** history is the election's recent events, newest first: acquired, released (resigned), expired, force_released, proclaimed. */
  history(name: string, opts: HistoryOptions = {}): Promise<History> {
    return this.#c._get("election", "/" + enc(name) + "/history", { limit: opts.limit, type: opts.type });
  }

  /** observe follows the election: see Observer. */
  observe(name: string, opts: ObserveOptions = {}): Observer {
    return this.#c._observe(name, opts);
  }
}

/**
 * Sessions are the session operations by id: `client.sessions`.
 *
 * `client.session()` is the usual way: a Session that renews itself and
 * whose loss is its leases'. These are for a session that something else
 * keeps alive (another process, a script's `lockd session renew`): pass
 * its id as `session` to acquire. Every answer is the API's session
 * (`owner`, `ttl_ms`, `created_at`, `expires_at`, `holds`); a session
 * that is gone rejects with SessionLost. The id is a secret like a token:
 * it is in create's answer (`session`) and in no message.
 */
export class Sessions {
  readonly #c: Client;

  constructor(client: Client) {
    this.#c = client;
  }

  /** create starts a session without a keep-alive: its id is the answer's `session`; `ttlMs` defaults to the server's (30 s). */
  create(opts: { ttlMs?: number | undefined; owner?: string | undefined; signal?: AbortSignal | undefined } = {}): Promise<CreatedSession> {
    const body: Record<string, unknown> = {};
    if (opts.ttlMs !== undefined) body["ttl_ms"] = ms(opts.ttlMs, "ttlMs");
    if (opts.owner !== undefined) body["owner"] = opts.owner;
    return this.#c._retrying("POST /v1/sessions", now() + this.#c.retryForMs, opts.signal, () =>
      this.#c._request<CreatedSession>("POST", "/v1/sessions", body, opts.signal),
    );
  }

  /** get reads the session: its expiry and what it holds (`holds`: `{kind, key}` each). */
  async get(id: string): Promise<SessionInfo> {
    return withoutId(
      await this.#c._retrying("GET /v1/sessions/{id}", now() + this.#c.retryForMs, undefined, () =>
        this.#c._sessionCall("GET", id, "", this.#c.timeoutMs),
      ),
    );
  }

  /** renew keeps the session and every grant in it alive for its TTL from now, once. */
  async renew(id: string): Promise<SessionInfo> {
    return withoutId(await this.#c._sessionCall("POST", id, "/renew", this.#c.timeoutMs));
  }

  /** end ends the session, once: every grant in it is released at once; the answer lists what it held. */
  async end(id: string): Promise<SessionInfo> {
    return withoutId(await this.#c._sessionCall("DELETE", id, "", this.#c.timeoutMs));
  }
}

/** lifetime is what keeps a grant: its TTL (default 30 s), or the session it is in. */
function lifetime(ttlMs: number | undefined, session: SessionRef | undefined): Record<string, unknown> {
  if (session === undefined) {
    return { ttl_ms: ms(ttlMs ?? 30_000, "ttlMs") };
  }
  if (ttlMs !== undefined) {
    throw new TypeError("lockd: ttlMs and session exclude each other: a grant in a session lives as long as the session");
  }
  if (session instanceof Session) {
    return { session: session.id };
  }
  if (typeof session !== "string") {
    throw new TypeError(`lockd: session must be a Session or a session's id, not ${typeof session}`);
  }
  return { session };
}

/** withoutId drops a session's id from an answer: only Session.id and create's answer show it. */
function withoutId(answer: SessionInfo & { session?: string }): SessionInfo {
  const { session: _id, ...rest } = answer;
  return rest;
}

/** enc escapes a key for the path: lockd decodes it once. */
function enc(key: string): string {
  return encodeURIComponent(key);
}

/** ms checks a duration in milliseconds and makes it whole, as the API counts them. */
function ms(value: number, name: string): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    throw new RangeError(`lockd: ${name} must be a non-negative number of milliseconds, got ${String(value)}`);
  }
  return Math.round(value);
}

/** strip drops the token of an answer: only a Lease shows one. */
function strip(grant: Grant): LeaseInfo | LeadershipInfo {
  const { token: _token, ...rest } = grant;
  return rest;
}

/** FOREVER_MS is "as long as it takes": a century. */
const FOREVER_MS = 100 * 365 * 24 * 3600 * 1000;

/**
 * ROUND_MAX_MS bounds a round of a wait before the server has said its
 * longest (a day: far past any --max-wait, and within what a timer takes).
 */
const ROUND_MAX_MS = 24 * 3600 * 1000;

/** randomKey is an Idempotency-Key: 144 random bits, URL-safe. */
async function randomKey(): Promise<string> {
  const bytes = new Uint8Array(18);
  const webcrypto = (globalThis as { crypto?: { getRandomValues?: (a: Uint8Array) => Uint8Array } }).crypto;
  if (typeof webcrypto?.getRandomValues === "function") {
    webcrypto.getRandomValues(bytes);
  } else {
    // Node 18 has no global crypto without a flag; its module has it.
    const mod = "node:crypto";
    const nodeCrypto = (await import(mod)) as { webcrypto: { getRandomValues(a: Uint8Array): Uint8Array } };
    nodeCrypto.webcrypto.getRandomValues(bytes);
  }
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
