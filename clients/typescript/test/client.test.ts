// The TypeScript client against a real lockd: what the shared scenarios
// do not cover.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { inspect } from "node:util";
import * as lockd from "lockd-client";
import { Client } from "lockd-client";
import * as h from "./harness.js";

describe("locks", () => {
  test("requestRelease reaches the holder: releaseSignal, releaseRequest, onReleaseRequest once", async () => {
    const c = h.client();
    const key = h.unique("step-aside");
    const lease = await c.acquire(key, { ttlMs: 600, owner: "holder" });
    const calls: lockd.ReleaseRequested[] = [];
    lease.onReleaseRequest = (_l, r) => calls.push(r);
    try {
      const asked = await c.requestRelease(key, { by: "deploy-42", reason: "the deploy needs it" });
      assert.deepEqual([asked.owner, asked.fence], ["holder", lease.fence]);
      // The renewer learns it on its next renewal, every ttl/3 (its timer
      // is unref'd: poll with one that keeps the event loop alive).
      for (const until = Date.now() + 10_000; !lease.releaseSignal.aborted && Date.now() < until; ) {
        await new Promise((r) => setTimeout(r, 20));
      }
      assert.ok(lease.releaseSignal.aborted, "the lease did not learn of the request");
      const reason = lease.releaseSignal.reason as lockd.ReleaseRequested;
      assert.deepEqual([reason.by, reason.reason, reason.at], ["deploy-42", "the deploy needs it", asked.requested_at]);
      assert.deepEqual(lease.releaseRequest, reason);
      const seen = lease.renewals;
      while (lease.renewals < seen + 2) {
        await new Promise((r) => setTimeout(r, 50));
      }
      assert.equal(calls.length, 1);
      assert.equal(lease.lost, false);
    } finally {
      await lease.release();
    }
    await assert.rejects(c.requestRelease(key), lockd.NotFound);
    const shared = await c.acquire(key, { mode: "shared" });
    try {
      await assert.rejects(c.requestRelease(key), lockd.NotExclusive);
    } finally {
      await shared.release();
    }
  });

  test("requestRelease reaches a holder in a session, from the session's renewals", async () => {
    const c = h.client();
    const key = h.unique("step-aside-session");
    const session = await c.session({ ttlMs: 600, owner: "holder" });
    try {
      const lease = await c.acquire(key, { session, owner: "holder" });
      const calls: lockd.ReleaseRequested[] = [];
      lease.onReleaseRequest = (_l, r) => calls.push(r);
      // Polls with a timer that keeps the event loop alive (the session's
      // is unref'd), until ok or the session has renewed `renewals` times more.
      const until = async (ok: () => boolean, renewals: number): Promise<void> => {
        const seen = session.renewals;
        while (!ok() && session.renewals < seen + renewals) {
          session.check();
          await new Promise((r) => setTimeout(r, 20));
        }
      };
      const asked = await c.requestRelease(key, { by: "ops", reason: "rerun" });
      assert.equal(asked.fence, lease.fence);
      // No renewer of its own: the session's renewal, every ttl/3, tells it.
      await until(() => lease.releaseSignal.aborted, 3);
      assert.ok(lease.releaseSignal.aborted, "the lease did not learn of the request from its session");
      const reason = lease.releaseSignal.reason as lockd.ReleaseRequested;
      assert.deepEqual([reason.by, reason.reason, reason.at], ["ops", "rerun", asked.requested_at]);
      assert.deepEqual(lease.releaseRequest, reason);
      // Later renewals answer the same request: one call; a newer request is another.
      await until(() => false, 2);
      assert.equal(calls.length, 1);
      const again = await c.requestRelease(key, { by: "ops", reason: "again" });
      await until(() => calls.length > 1, 3);
      assert.deepEqual(calls.map((r) => [r.reason, r.at]), [["rerun", asked.requested_at], ["again", again.requested_at]]);
      assert.deepEqual(lease.releaseRequest, calls[1]);
      assert.equal(lease.lost, false);
    } finally {
      await session.end();
    }
  });

  test("explicit acquire, renew, release", async () => {
    const c = h.client();
    const key = h.unique("explicit");
    const lease = await c.acquire(key, { ttlMs: 5000, owner: "ts-explicit", autoRenew: false });
    assert.deepEqual([lease.key, lease.kind, lease.owner, lease.mode, lease.limit], [key, "lock", "ts-explicit", "exclusive", undefined]);
    assert.equal(lease.ttlMs, 5000);
    assert.equal(lease.replayed, false);
    assert.equal(lease.lost, false);
    const renewed = await c.renew(key, lease.token, { ttlMs: 10_000 });
    assert.deepEqual([renewed.fence, renewed.ttl_ms], [lease.fence, 10_000]);
    assert.ok(!("token" in renewed), "renew by token answered the token");
    await lease.renew();
    assert.equal(lease.renewals, 1);
    assert.equal(lease.info.ttl_ms, 5000);
    assert.deepEqual(await c.release(key, lease.token), { key, released: true, count: 0 });
    // The token is no longer the live one: the lease is lost, and says why.
    const err = await c.renew(key, lease.token).then(
      () => assert.fail("renewed a released lease"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof lockd.LeaseNotFound);
    assert.ok(err instanceof lockd.LeaseLost);
    assert.ok(err instanceof lockd.NotFound);
    assert.deepEqual([err.status, err.code], [404, "not_found"]);
    await assert.rejects(lease.release(), lockd.LeaseLost);
    assert.equal(lease.lost, true);
    assert.ok(lease.signal.aborted);
    assert.equal(lease.signal.reason, lease.error);
  });

  test("held: names the holder and the time left, after the wait", async () => {
    const c = h.client();
    const key = h.unique("held");
    const first = await c.acquire(key, { ttlMs: 20_000, owner: "first" });
    try {
      const began = performance.now();
      const err = await c.acquire(key, { waitMs: 200, owner: "second" }).then(
        () => assert.fail("granted a held key"),
        (e: unknown) => e,
      );
      assert.ok(performance.now() - began >= 195, "the server did not wait");
      assert.ok(err instanceof lockd.LockHeld);
      assert.ok(err instanceof lockd.NotGranted);
      assert.deepEqual([err.status, err.code, err.holder], [409, "lock_held", "first"]);
      assert.ok(err.remainingMs! > 0 && err.remainingMs! <= 20_000, String(err.remainingMs));
      assert.ok(err.retryAfterMs! > 0 && err.retryAfterMs! <= 20_000, String(err.retryAfterMs));
      assert.match(err.message, /first/);
    } finally {
      await first.release();
    }
  });

  test("lock-delay holds the key off after an expiry", async () => {
    const c = h.client();
    const key = h.unique("delay");
    await c.acquire(key, { ttlMs: 200, lockDelayMs: 1000, autoRenew: false });
    await h.delay(300);
    const err = await c.acquire(key, { ttlMs: 10_000 }).then(
      () => assert.fail("granted during the lock-delay"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof lockd.LockDelay);
    assert.ok(err instanceof lockd.NotGranted);
    assert.deepEqual([err.status, err.code], [409, "lock_delay"]);
    assert.ok(err.remainingMs! > 0 && err.remainingMs! <= 1000, String(err.remainingMs));
    await c.withLock(key, { ttlMs: 10_000, waitMs: 3000 }, () => undefined); // waits the delay out
  });

  test("a hold window keeps the key after an early release", async () => {
    const c = h.client();
    const key = h.unique("minhold");
    await c.withLock(key, { ttlMs: 60_000, minHoldMs: 1200 }, () => undefined); // done at once
    const err = await c.acquire(key, { ttlMs: 10_000 }).then(
      () => assert.fail("granted inside the hold window"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof lockd.MinHold);
    assert.ok(err instanceof lockd.NotGranted);
    assert.deepEqual([err.status, err.code], [409, "min_hold"]);
    assert.ok(err.remainingMs! > 0 && err.remainingMs! <= 1200, String(err.remainingMs));
    const st = await c.state(key);
    assert.deepEqual([st.count, st.holders], [0, []]);
    assert.ok(st.min_hold_until !== undefined);
    await c.withLock(key, { ttlMs: 10_000, waitMs: 5000 }, () => undefined); // granted when the window ends
  });

  test("a waiter is granted on release, with a higher fence", async () => {
    const c = h.client();
    const key = h.unique("wait");
    const first = await c.acquire(key, { ttlMs: 10_000 });
    setTimeout(() => void first.release(), 300);
    const fence = await c.withLock(key, { ttlMs: 10_000, waitMs: 5000 }, (_signal, second) => second.fence);
    assert.ok(fence > first.fence);
  });

  test("shared holds", async () => {
    const c = h.client();
    const key = h.unique("shared");
    await c.withLock(key, { mode: "shared", owner: "reader-1" }, async (_s1, r1) => {
      await c.withLock(key, { mode: "shared", owner: "reader-2" }, async (_s2, r2) => {
        assert.deepEqual([r1.mode, r2.mode], ["shared", "shared"]);
        assert.notEqual(r1.fence, r2.fence);
        const state = await c.state(key);
        assert.equal(state.mode, "shared");
        assert.deepEqual(state.holders.map((x) => x.owner).sort(), ["reader-1", "reader-2"]);
        await assert.rejects(c.acquire(key, { owner: "writer" }), lockd.LockHeld);
      });
    });
  });

  test("a retry whose first answer was lost gets the same lease, by its Idempotency-Key", async () => {
    const losing = h.losingFetch(1);
    const log = new h.Lines();
    const c = h.client(undefined, { fetch: losing.fetch, logger: log });
    const key = h.unique("idem");
    const lease = await c.acquire(key, { ttlMs: 10_000, autoRenew: false });
    try {
      assert.equal(lease.replayed, true);
      const keys = losing.seen.map((x) => x.get("Idempotency-Key"));
      assert.equal(keys.length, 2);
      assert.ok(keys[0]);
      assert.equal(keys[0], keys[1]);
      assert.match(log.at("warn")[0]!.message, /ECONNRESET.*retry 1 in/);
      const state = await h.client().state(key);
      assert.deepEqual([state.holders.length, state.count, state.fence], [1, 1, lease.fence]);
      // Another call is another Idempotency-Key: that one is held.
      await assert.rejects(c.acquire(key, { ttlMs: 10_000 }), lockd.LockHeld);
      assert.notEqual(losing.seen.at(-1)!.get("Idempotency-Key"), keys[0]);
    } finally {
      await lease.release();
    }
  });

  test("lost when renewals fail until the expiry by the client's clock", async () => {
    const log = new h.Lines();
    const c = h.client(undefined, { logger: log });
    const key = h.unique("expiry");
    const lease = await c.acquire(key, { ttlMs: 600 });
    await h.pauseRedis(1500);
    const began = performance.now();
    const resumes = began + 1500;
    const at = await h.within(h.aborted(lease.signal), 2000, "the lease outlived its TTL without a renewal");
    // Lost by the client's clock: at most a TTL after the last renewal.
    assert.ok(at - began < 600 + 500, `lost after ${at - began} ms`);
    assert.equal(lease.error!.status, undefined);
    assert.match(lease.error!.message, /could not renew before the lease expired/);
    assert.throws(() => lease.check(), lockd.LeaseLost);
    assert.ok(log.at("warn").some((l) => /lease lost/.test(l.message)), log.text());
    // Let the pause end before the next test.
    await h.delay(resumes - performance.now());
    await h.eventually(async () => answers(h.client(undefined, { retries: 0 })), "Redis back", 3000);
  });

  test("withLock: the callback's error is not replaced by the lost lease's", async () => {
    const c = h.client();
    const key = h.unique("mask");
    class Boom extends Error {}
    await assert.rejects(
      c.withLock(key, { ttlMs: 10_000 }, async () => {
        await c.forceRelease(key);
        throw new Boom();
      }),
      Boom,
    );
  });

  test("withLock: a lease lost in the callback rejects with LeaseLost once it returns, and its signal fired", async () => {
    const c = h.client();
    const key = h.unique("exit");
    let sawAbort = false;
    let returned = false;
    const err = await c
      .withLock(key, { ttlMs: 600 }, async (signal, lease) => {
        await c.forceRelease(key);
        await h.within(h.aborted(signal), 1000, "the callback's signal");
        sawAbort = true;
        assert.equal(signal.reason, lease.error);
        returned = true;
        return "done";
      })
      .then(
        () => assert.fail("withLock resolved after the lease was lost"),
        (e: unknown) => e,
      );
    assert.ok(err instanceof lockd.LeaseLost);
    assert.ok(sawAbort && returned);
  });

  test("withLock: the caller's signal aborts the callback's too", async () => {
    const c = h.client();
    const outer = new AbortController();
    const result = await c.withLock(h.unique("outer"), { ttlMs: 10_000, signal: outer.signal }, async (signal, lease) => {
      setTimeout(() => outer.abort(new Error("shutting down")), 50);
      await h.within(h.aborted(signal), 1000, "the callback's signal");
      assert.equal(lease.lost, false);
      return (signal.reason as Error).message;
    });
    assert.equal(result, "shutting down");
  });

  test("a waiting acquire is given up by its signal, and nothing is granted", async () => {
    const c = h.client();
    const key = h.unique("abort");
    const first = await c.acquire(key, { ttlMs: 10_000 });
    try {
      const ac = new AbortController();
      setTimeout(() => ac.abort(new Error("gave up")), 200);
      const began = performance.now();
      await assert.rejects(c.acquire(key, { waitMs: 10_000, signal: ac.signal }), /gave up/);
      assert.ok(performance.now() - began < 2000);
      await h.eventually(async () => (await c.state(key)).waiters === 0, "the waiter left the queue", 3000);
    } finally {
      await first.release();
    }
    await assert.rejects(c.state(key), lockd.NotFound);
  });

  test("an onLost callback is called once; one that throws is logged", async () => {
    const log = new h.Lines();
    const c = h.client(undefined, { logger: log });
    const key = h.unique("callback");
    const calls: lockd.LeaseLost[] = [];
    const lease = await c.acquire(key, {
      ttlMs: 300,
      onLost: (_l, err) => {
        calls.push(err);
        throw new Error("callback bug");
      },
    });
    await c.forceRelease(key);
    await h.within(h.aborted(lease.signal), 1000, "the loss");
    assert.equal(calls.length, 1);
    assert.equal(calls[0], lease.error);
    assert.ok(log.at("error").some((l) => /onLost callback failed: Error: callback bug/.test(l.message)), log.text());
    assert.ok(log.at("warn").some((l) => /lease lost/.test(l.message)), log.text());
  });

  test("list pages, history, force-release by fence", async () => {
    const c = h.client();
    const prefix = h.unique("list") + ":";
    const a = await c.acquire(prefix + "a", { ttlMs: 10_000, autoRenew: false });
    const b = await c.acquire(prefix + "b", { ttlMs: 10_000, autoRenew: false });
    let page = await c.list({ prefix, limit: 1 });
    const keys = page.locks.map((s) => s.key);
    while (page.next_cursor) {
      page = await c.list({ prefix, limit: 1, cursor: page.next_cursor });
      keys.push(...page.locks.map((s) => s.key));
    }
    assert.deepEqual(keys.sort(), [prefix + "a", prefix + "b"]);
    await assert.rejects(c.forceRelease(prefix + "a", { fence: a.fence + 1 }), lockd.LeaseLost);
    const broken = await c.forceRelease(prefix + "a", { fence: a.fence, reason: "test" });
    assert.deepEqual([broken.released, broken.fence], [true, a.fence]);
    const events = (await c.history(prefix + "a", { limit: 1 })).events;
    assert.deepEqual([events[0]!.type, events[0]!.reason], ["force_released", "test"]);
    await b.release();
    await assert.rejects(c.forceRelease(prefix + "b"), lockd.NotFound);
  });

  test("values show in the state", async () => {
    const c = h.client();
    const key = h.unique("value");
    await c.withLock(key, { value: { build: "42" } }, async (_signal, lease) => {
      assert.deepEqual(lease.value, { build: "42" });
      assert.deepEqual((await c.state(key)).value, { build: "42" });
      await lease.renew({ value: "draining" });
      assert.equal(lease.value, "draining");
      const state = await c.state(key);
      assert.deepEqual([state.value, state.holders[0]!.value], ["draining", "draining"]);
      await c.renew(key, lease.token, { value: { build: "43" } });
      assert.deepEqual((await c.state(key)).value, { build: "43" });
    });
    const err = await c.acquire(h.unique("big"), { value: "x".repeat(5000) }).then(
      () => assert.fail("took a value over 4 KiB"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof lockd.InvalidRequest);
    assert.equal(err.field, "value");
  });

  test("an invalid request names the field; a key with any character is sent escaped", async () => {
    const c = h.client();
    const err = await c.acquire(h.unique("ttl"), { ttlMs: 10 }).then(
      () => assert.fail("took a 10 ms TTL"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof lockd.InvalidRequest);
    assert.deepEqual([err.status, err.field], [400, "ttl_ms"]);
    await assert.rejects(c.acquire("bad/key"), lockd.InvalidRequest);
    await assert.rejects(c.acquire("bad?key"), lockd.InvalidRequest);
    await assert.rejects(c.state("bad#key"), lockd.InvalidRequest);
    const key = h.unique("order:pay") + "@eu";
    await c.withLock(key, {}, async () => assert.equal((await c.state(key)).key, key));
  });
});

describe("semaphores", () => {
  test("permits by name", async () => {
    const c = h.client();
    const name = h.unique("permits");
    const p1 = await c.semaphores.acquire(name, { limit: 2, ttlMs: 10_000, owner: "p1" });
    const p2 = await c.semaphores.acquire(name, { limit: 2, ttlMs: 10_000, owner: "p2" });
    assert.deepEqual([p1.kind, p1.mode, p1.limit], ["semaphore", "permit", 2]);
    const err = await c.semaphores.acquire(name, { limit: 2, waitMs: 100, owner: "p3" }).then(
      () => assert.fail("a third permit of two"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof lockd.NoPermits);
    assert.equal(err.holder, "p1");
    assert.ok(err.remainingMs !== undefined && err.retryAfterMs !== undefined);
    await assert.rejects(c.semaphores.acquire(name, { limit: 5 }), lockd.LimitMismatch);
    const state = await c.semaphores.state(name);
    assert.deepEqual([state.limit, state.holders.length], [2, 2]);
    assert.deepEqual(
      (await c.semaphores.list({ prefix: name })).semaphores.map((s) => s.key),
      [name],
    );
    await c.semaphores.renew(name, p2.token);
    await c.semaphores.forceRelease(name, { fence: p2.fence });
    await assert.rejects(p2.release(), lockd.LeaseLost);
    assert.deepEqual(await p1.release(), { key: name, released: true, count: 0 });
    await assert.rejects(c.semaphores.state(name), lockd.NotFound);
    const types = (await c.semaphores.history(name)).events.map((e) => e.type);
    assert.deepEqual(types.slice(0, 2), ["released", "force_released"]);
  });

  test("a semaphore handle: withPermit renews and releases", async () => {
    const c = h.client();
    const pool = c.semaphore(h.unique("pool"), { limit: 1 });
    await pool.withPermit({ ttlMs: 600 }, async (signal, permit) => {
      await h.delay(500);
      assert.ok(permit.renewals >= 1);
      assert.equal(signal.aborted, false);
      await assert.rejects(pool.acquire(), lockd.NoPermits);
      assert.equal((await pool.state()).holders.length, 1);
    });
    await assert.rejects(pool.state(), lockd.NotFound);
    assert.ok((await pool.renewals()).events.length >= 1);
    const n = await c.withPermit(pool.name, { limit: 1 }, (_s, permit) => permit.limit);
    assert.equal(n, 1);
  });
});

describe("auth", () => {
  test("scopes", async () => {
    const server = h.env("LOCKD_AUTH_URL");
    const writeKey = h.env("LOCKD_TEST_WRITE_KEY");
    const readKey = h.env("LOCKD_TEST_READ_KEY");
    const key = h.unique("auth");
    const err = await new Client({ baseUrl: server }).acquire(key).then(
      () => assert.fail("granted without a key"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof lockd.Unauthorized);
    assert.equal(err.status, 401);
    await assert.rejects(new Client({ baseUrl: server, apiKey: readKey }).acquire(key), lockd.Forbidden);
    await new Client({ baseUrl: server, apiKey: writeKey }).withLock(key, { ttlMs: 5000 }, async (_signal, lease) => {
      assert.equal(lease.owner, "writer");
      const state = await new Client({ baseUrl: server, apiKey: readKey }).state(key);
      assert.equal(state.owner, "writer");
    });
  });

  test("secrets stay out of messages, logs, JSON and inspect", async () => {
    const server = h.env("LOCKD_AUTH_URL");
    const writeKey = h.env("LOCKD_TEST_WRITE_KEY");
    const wrongKey = "not-a-key-" + [...writeKey].reverse().join("");
    const key = h.unique("secrets");
    const log = new h.Lines();
    const texts: string[] = [];
    const show = (v: unknown) => {
      texts.push(String(v), inspect(v, { showHidden: true, depth: 6 }), JSON.stringify(v) ?? "");
    };
    const c = new Client({ baseUrl: server, apiKey: writeKey, logger: log });
    show(c);
    const refused = await new Client({ baseUrl: server, apiKey: wrongKey, logger: log }).acquire(key).catch((e: unknown) => e);
    assert.ok(refused instanceof lockd.Unauthorized);
    show(refused);
    show((refused as lockd.LockdError).problem);
    const lease = await c.acquire(key, { ttlMs: 300 });
    const token = lease.token;
    show(lease);
    show(lease.info);
    await h.delay(250);
    await new Client({ baseUrl: server, apiKey: writeKey }).release(key, token);
    await h.within(h.aborted(lease.signal), 1000, "the loss");
    show(lease);
    show(lease.error);
    const released = await lease.release().catch((e: unknown) => e);
    assert.ok(released instanceof lockd.LeaseLost);
    show(released);
    texts.push(log.text());
    assert.match(log.text(), /lease lost/);
    for (const secret of [writeKey, wrongKey, token]) {
      for (const t of texts) {
        assert.ok(!t.includes(secret), `a secret in: ${t}`);
      }
    }
  });
});

describe("retries", () => {
  test("no answer is retried a bounded number of times", async () => {
    const log = new h.Lines();
    const c = new Client({ baseUrl: await h.refusingUrl(), retries: 2, timeoutMs: 1000, logger: log });
    const began = performance.now();
    const err = await c.acquire("ts:unreachable").catch((e: unknown) => e);
    assert.ok(err instanceof lockd.Unreachable, String(err));
    assert.ok(err instanceof lockd.Unavailable);
    assert.equal(err.status, undefined);
    assert.match(err.message, /no answer from lockd: ECONNREFUSED/);
    assert.equal(log.at("warn").length, 2);
    assert.ok(performance.now() - began < 2000);
  });

  test("retryForMs bounds the time", async () => {
    const log = new h.Lines();
    const c = new Client({ baseUrl: await h.refusingUrl(), retries: 100, retryForMs: 500, logger: log });
    const began = performance.now();
    await assert.rejects(c.state("ts:unreachable"), lockd.Unavailable);
    assert.ok(performance.now() - began < 500 + 200);
    assert.ok(log.at("warn").length >= 1);
  });

  test("a request that takes longer than timeoutMs is Unreachable", async () => {
    const c = new Client({
      baseUrl: h.url(),
      timeoutMs: 100,
      retries: 0,
      fetch: (_input, init) =>
        new Promise((_resolve, reject) => {
          init.signal?.addEventListener("abort", () => reject(init.signal?.reason));
        }),
    });
    await assert.rejects(c.state("ts:slow"), (err: unknown) => {
      assert.ok(err instanceof lockd.Unreachable);
      assert.match(err.message, /no answer from lockd within 100 ms/);
      return true;
    });
  });
});

async function answers(c: Client): Promise<boolean> {
  try {
    await c.list({ limit: 1 });
    return true;
  } catch (err) {
    if (err instanceof lockd.Unavailable) return false;
    throw err;
  }
}


