// The renewal loop that leases and sessions share.

import { LockdError, Unreachable } from "./errors.js";
import { backoff, now, unref } from "./http.js";

/** What a Renewer keeps alive: a lease or a session. */
export interface Renewed {
  readonly ttlMs: number;
  /** expiresAt is its expiry by this process's clock, never later than the server's. */
  expiresAt(): number;
  /** renew renews it once; an error that gone recognises has recorded the loss itself. */
  renew(): Promise<unknown>;
  /** stopped says it was released, ended or lost: nothing more to do. */
  stopped(): boolean;
  gone(err: unknown): boolean;
  /** what names it in the error of a failure that is no LockdError. */
  what: string;
  /**
   * lose is given the last failure that said why, once renewals failed
   * until the expiry; or, when the expiry passed before a renewal could
   * even be sent (this process did not run in time), undefined and how
   * late it was, ms.
   */
  lose(last: LockdError | undefined, lateMs?: number): void;
  /** retrying is told of a failed renewal and when the next comes. */
  retrying(err: LockdError, attempt: number, delayMs: number): void;
}

/**
 * grantExpiry is the expiry (by this process's clock, ms) of a lease or
 * session granted with ttlMs by a request sent at sentAt and answered at
 * arrivedAt, and whether to renew it at once.
 *
 * The server starts the TTL at the grant, which came after sentAt and
 * before arrivedAt: when the request reached it, or, for a request that
 * waited in the queue, when its turn came. sentAt + ttl is never later
 * than the server's expiry, and it is the expiry when the answer came
 * within a third of the TTL (the first renewal, ttl/3 after arrivedAt,
 * still has a third before it). A later answer most likely waited, and
 * sentAt + ttl may be past although the lease has its whole TTL: the
 * expiry is then arrivedAt + ttl, later than the server's by at most the
 * time the answer took from the grant to us, and the lease is renewed at
 * once; that renewal's answer sets an exact expiry (its send time plus the
 * TTL) or says that the lease is gone.
 */
export function grantExpiry(sentAt: number, arrivedAt: number, ttlMs: number): { expiresAt: number; renewNow: boolean } {
  if (arrivedAt - sentAt <= ttlMs / 3) {
    return { expiresAt: sentAt + ttlMs, renewNow: false };
  }
  return { expiresAt: arrivedAt + ttlMs, renewNow: true };
}

/**
 * ranOut says why a lease or session whose expiry passed before a renewal
 * could be sent is lost.
 */
export function ranOut(lateMs: number): string {
  return `its TTL ran out, by this client's clock, ${Math.round(lateMs)} ms before a renewal could be sent: this process did not run in time (paused, or starved of CPU)`;
}

/**
 * Renewer renews every ttl/3 on an unref'd timer until stopped. A renewal
 * that fails without saying the thing is gone is retried with backoff,
 * sooner than ttl/3 and never sleeping through the expiry; past it, the
 * thing is lost.
 */
export class Renewer {
  readonly #r: Renewed;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #attempt = 0;
  #last: LockdError | undefined; // the last failure that said more than "no answer"

  constructor(r: Renewed) {
    this.#r = r;
  }

  /** start schedules the first renewal, ttl/3 from now, or at once with renewNow (grantExpiry). */
  start(renewNow = false): void {
    this.#schedule(renewNow ? 0 : this.#interval());
  }

  /** stop cancels the next renewal. */
  stop(): void {
    if (this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
  }

  #interval(): number {
    return Math.max(this.#r.ttlMs / 3, 1);
  }

  #schedule(delay: number): void {
    if (this.#r.stopped()) {
      return;
    }
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.#turn();
    }, delay);
    unref(this.#timer);
  }

  /** #turn is one renewal; failures other than loss are retried until the expiry. */
  async #turn(): Promise<void> {
    const r = this.#r;
    if (r.stopped()) {
      return;
    }
    const expires = r.expiresAt();
    const late = now() - expires;
    if (late >= 0) {
      // The server may have let it go already: it is not ours.
      r.lose(this.#last, this.#last === undefined ? late : undefined);
      return;
    }
    const sent = now();
    const interval = this.#interval();
    try {
      await r.renew();
    } catch (err) {
      if (r.gone(err) || r.stopped()) {
        return;
      }
      const e = err instanceof LockdError ? err : new Unreachable(`renew ${r.what}: ${String(err)}`, { cause: err });
      if (!(e instanceof Unreachable) || this.#last === undefined) {
        this.#last = e;
      }
      const left = expires - now();
      if (left <= 0) {
        r.lose(this.#last);
        return;
      }
      // At most half of what is left, so that the last tries come just
      // before the expiry.
      const delay = Math.min(
        backoff(this.#attempt, Math.max(r.ttlMs / 30, 10), interval, e.retryAfterMs),
        Math.max(left / 2, 1),
      );
      this.#attempt++;
      r.retrying(e, this.#attempt, delay);
      this.#schedule(delay);
      return;
    }
    this.#attempt = 0;
    this.#last = undefined;
    // Measured from when the renewal was sent, as the expiry is.
    this.#schedule(Math.max(interval - (now() - sent), 0));
  }
}
