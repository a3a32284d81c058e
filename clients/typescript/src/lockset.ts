// LockSet: several locks held all or nothing with one token
// (client.lockMany), renewed as a lease is (Renewer): every ttl/3, lost
// at once when the server says the set is gone (one of its keys was
// broken or lapsed), or when renewals fail until its expiry.

import { LeaseLost, SessionLost } from "./errors.js";
import { now, type Logger } from "./http.js";
import { grantExpiry, ranOut, Renewer } from "./renewer.js";
import type { LockSetInfo, LockSetLease } from "./types.js";

/** What a LockSet asks of its Client. */
export interface LockSetOps {
  readonly timeoutMs: number;
  readonly logger: Logger | undefined;
  setCall<T>(op: "renew" | "release", body: Record<string, unknown>, timeoutMs: number): Promise<T>;
}

/** OnSetLost is called once when a lock set is lost. */
export type OnSetLost = (set: LockSet, error: LeaseLost) => void;

/**
 * LockSet is several locks taken together: every key or none, one token.
 * `leases` lists `{key, fence}` in the order lockMany named the keys;
 * `signal` aborts the moment the set is lost (any key lost loses it).
 */
export class LockSet {
  readonly leases: readonly LockSetLease[];
  readonly ttlMs: number;
  readonly owner: string;
  /** Aborted the moment the set is lost; its reason is the LeaseLost. Not aborted by a release. */
  readonly signal: AbortSignal;

  readonly #ops: LockSetOps;
  readonly #token: string;
  // The latest proof a grant or renewal answered: sent back with every
  // renewal and the release, so that any lockd can restore the set should
  // Redis lose it with the lockd that knew it.
  #proof: string | undefined;
  readonly #lost = new AbortController();
  readonly #onLost: OnSetLost | undefined;
  #error: LeaseLost | undefined;
  #expires: number;
  #renewals = 0;
  #released = false;
  readonly #renewer: Renewer;

  /** @internal LockSets come from Client.lockMany. */
  constructor(ops: LockSetOps, set: LockSetInfo & { token: string; proof?: string | undefined }, sentAt: number, arrivedAt: number, init: { autoRenew?: boolean | undefined; onLost?: OnSetLost | undefined } = {}) {
    this.#ops = ops;
    this.#token = set.token;
    this.#proof = set.proof;
    this.leases = set.leases.map((l) => ({ key: l.key, fence: l.fence }));
    this.ttlMs = set.ttl_ms;
    this.owner = set.owner;
    this.signal = this.#lost.signal;
    this.#onLost = init.onLost;
    const { expiresAt, renewNow } = grantExpiry(sentAt, arrivedAt, this.ttlMs);
    this.#expires = expiresAt;
    this.#renewer = new Renewer({
      ttlMs: this.ttlMs,
      expiresAt: () => this.#expires,
      renew: () => this.renew(),
      stopped: () => this.#released || this.lost,
      gone: (err) => err instanceof LeaseLost,
      what: "lock set",
      lose: (last, lateMs) =>
        this.#lose(
          new LeaseLost(
            lateMs !== undefined || last === undefined
              ? `lock set: ${ranOut(lateMs ?? 0)}`
              : `lock set: could not renew before the leases expired: ${last.message}`,
          ),
        ),
      retrying: (e, attempt, delayMs) =>
        this.#ops.logger?.info?.(`${this}: renew failed (${e.message}); retrying in ${Math.round(delayMs)} ms`, { attempt, delayMs }),
    });
    if (init.autoRenew !== false) {
      this.#renewer.start(renewNow);
    }
  }

  /** The set's secret: renew and release need it. Keep it out of logs. */
  get token(): string {
    return this.#token;
  }

  /** The set's latest proof (undefined: the server signs none), sent back by renew and release. Keep it out of logs. */
  get proof(): string | undefined {
    return this.#proof;
  }

  /** The set's keys, in the order lockMany named them. */
  get keys(): string[] {
    return this.leases.map((l) => l.key);
  }

  /** fence is key's fence in the set (undefined for a key not in it). */
  fence(key: string): number | undefined {
    return this.leases.find((l) => l.key === key)?.fence;
  }

  get lost(): boolean {
    return this.#lost.signal.aborted;
  }

  get error(): LeaseLost | undefined {
    return this.#error;
  }

  get renewals(): number {
    return this.#renewals;
  }

  /** check throws the LeaseLost that ended the set, if it is lost. */
  check(): void {
    if (this.#error !== undefined) {
      throw this.#error;
    }
  }

  /** renew extends every key by the set's TTL now, once; an answer that the set is gone loses it and throws LeaseLost. */
  async renew(): Promise<void> {
    this.check();
    const sent = now();
    const timeout = Math.min(this.#ops.timeoutMs, Math.max(this.#expires - sent, 1));
    const body: Record<string, unknown> = { token: this.#token, ttl_ms: this.ttlMs };
    if (this.#proof) body["proof"] = this.#proof;
    let answer: { proof?: string };
    try {
      answer = await this.#ops.setCall<{ proof?: string }>("renew", body, timeout);
    } catch (err) {
      if (err instanceof LeaseLost) {
        this.#lose(err);
      }
      throw err;
    }
    if (!this.#released) {
      this.#proof = answer.proof ?? this.#proof;
      this.#expires = sent + this.ttlMs;
      this.#renewals++;
    }
  }

  /** release stops the renewer and gives every key back: `{released}`, or undefined when already released. */
  async release(): Promise<{ released: number } | undefined> {
    if (this.#released) {
      return undefined;
    }
    this.#released = true;
    this.#renewer.stop();
    this.check();
    const body: Record<string, unknown> = { token: this.#token };
    if (this.#proof) body["proof"] = this.#proof;
    try {
      return await this.#ops.setCall<{ released: number }>("release", body, this.#ops.timeoutMs);
    } catch (err) {
      if (err instanceof LeaseLost) {
        this.#lose(err, true);
      }
      throw err;
    }
  }

  toString(): string {
    const state = this.lost ? "lost" : this.#released ? "released" : "held";
    return `LockSet(${JSON.stringify(this.keys)}, owner=${JSON.stringify(this.owner)}, ${state})`;
  }

  toJSON(): Record<string, unknown> {
    return { leases: this.leases, ttl_ms: this.ttlMs, owner: this.owner, lost: this.lost };
  }

  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }

  /** @internal _done: released or lost, nothing is left to keep or lose (Session). */
  _done(): boolean {
    return this.#released || this.lost;
  }

  /** @internal _lose loses the set alone (its session's renewal no longer lists a key). */
  _lose(err: LeaseLost): void {
    this.#lose(err);
  }

  /** @internal _sessionLost loses the set with its session. */
  _sessionLost(err: SessionLost): void {
    this.#lose(
      new SessionLost(`lock set: its session was lost: ${err.detail}`, {
        status: err.status,
        code: err.code,
        problem: err.problem,
        retryAfterMs: err.retryAfterMs,
      }),
    );
  }

  /** @internal _sessionEnded records that the session's end released every key: the set is released, not lost. */
  _sessionEnded(): void {
    this.#released = true;
    this.#renewer.stop();
  }

  #lose(err: LeaseLost, afterRelease = false): void {
    if (this.#error !== undefined || (this.#released && !afterRelease)) {
      return;
    }
    this.#error = err;
    this.#renewer.stop();
    this.#lost.abort(err);
    this.#ops.logger?.warn?.(`${this}: lock set lost: ${err.message}`, {});
    try {
      this.#onLost?.(this, err);
    } catch (cbErr) {
      this.#ops.logger?.error?.(`${this}: onLost callback failed: ${String(cbErr)}`, {});
    }
  }
}
