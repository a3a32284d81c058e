// Lock sets (client.lockMany) against a real lockd.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { inspect } from "node:util";
import * as lockd from "lockd-client";
import * as h from "./harness.js";

describe("lock sets", () => {
  test("all or nothing, renewed, released", async () => {
    const c = h.client();
    const [a, b, k] = [h.unique("set-a"), h.unique("set-b"), h.unique("set-c")];
    const single = await c.acquire(b, { ttlMs: 20_000, owner: "single" });
    const err = await c.lockMany([a, b, k], { ttlMs: 5_000 }).catch((e: unknown) => e);
    assert.ok(err instanceof lockd.LockHeld, String(err));
    assert.equal(err.problem.key, b);
    await assert.rejects(c.state(a), lockd.NotFound);
    await single.release();

    const set = await c.lockMany([k, a, b], { ttlMs: 600, owner: "ts-set" });
    try {
      assert.deepEqual(set.keys, [k, a, b]);
      assert.ok(set.leases.every((l) => l.fence > 0));
      assert.ok(!inspect(set).includes(set.token) && !JSON.stringify(set).includes(set.token));
      const st = await c.state(a);
      assert.deepEqual([st.owner, st.set, st.fence], ["ts-set", 3, set.fence(a)]);
      // Three renewals: the set outlives its TTL twice over.
      while (set.renewals < 3) {
        assert.equal(set.lost, false, String(set.error));
        await new Promise((r) => setTimeout(r, 20));
      }
    } finally {
      assert.deepEqual(await set.release(), { released: 3 });
    }
    await assert.rejects(c.state(k), lockd.NotFound);
  });

  test("a set in a session lives and ends with it", async () => {
    const c = h.client();
    const [a, b] = [h.unique("sess-a"), h.unique("sess-b")];
    const session = await c.session({ ttlMs: 900, owner: "ts-worker" });
    const set = await c.lockMany([a, b], { session });
    // Past two TTLs: the session's renewals keep every key.
    while (session.renewals < 3) {
      assert.equal(set.lost, false, String(set.error));
      await new Promise((r) => setTimeout(r, 20));
    }
    const st = await c.state(b);
    assert.deepEqual([st.owner, st.set, st.fence], ["ts-worker", 2, set.fence(b)]);
    assert.deepEqual((await session.info()).holds.map((x) => x.key).sort(), [a, b].sort());
    await assert.rejects(c.lockMany([a, b], { ttlMs: 5_000, session }), TypeError);
    await session.end();
    assert.equal(set.lost, false);
    await assert.rejects(c.state(a), lockd.NotFound);
    await assert.rejects(c.state(b), lockd.NotFound);
    await assert.rejects(c.lockMany([a, b], { session: session.id }), lockd.SessionLost);
  });

  test("losing a key loses the set: signal aborts with LeaseLost", async () => {
    const c = h.client();
    const [a, b] = [h.unique("lose-a"), h.unique("lose-b")];
    const set = await c.lockMany([a, b], { ttlMs: 600 });
    await c.forceRelease(b, { reason: "test" });
    for (const until = Date.now() + 5_000; !set.lost && Date.now() < until; ) {
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.ok(set.signal.aborted, "the set was not lost within 5 s of losing a key");
    assert.ok(set.signal.reason instanceof lockd.LeaseLost);
    await assert.rejects(set.release(), lockd.LeaseLost);
    await assert.rejects(c.state(a), lockd.NotFound);
  });

  test("shared sets hold their keys together", async () => {
    const c = h.client();
    const [a, b, k] = [h.unique("sh-a"), h.unique("sh-b"), h.unique("sh-c")];
    const s1 = await c.lockMany([a, b], { ttlMs: 5_000, mode: "shared" });
    const s2 = await c.lockMany([b, k], { ttlMs: 5_000, mode: "shared" });
    try {
      const st = await c.state(b);
      assert.deepEqual([st.mode, st.holders.length, st.set], ["shared", 2, 2]);
      await assert.rejects(c.lockMany([a, k]), lockd.LockHeld);
    } finally {
      await s1.release();
      await s2.release();
    }
  });

  test("a bad key names its field", async () => {
    const c = h.client();
    const err = await c.lockMany(["x", "y", "x"]).catch((e: unknown) => e);
    assert.ok(err instanceof lockd.InvalidRequest, String(err));
    assert.equal(err.field, "keys[2]");
  });
});
