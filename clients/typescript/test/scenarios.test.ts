// The shared scenarios of clients/scenarios.json, for the TypeScript
// client. Each test is marked with its scenario's id and reads its figures
// from the scenario's entry; the last test checks that none is left out.

import assert from "node:assert/strict";
import { test } from "node:test";
import * as lockd from "lockd-client";
import type { Client, Lease, ObserveEvent } from "lockd-client";
import * as h from "./harness.js";
import { figure, scenario } from "./harness.js";

scenario("lease-lifecycle", async (_t, spec) => {
  const c = h.client();
  const key = h.unique("lifecycle");
  const ttl = figure(spec, "ttl_ms");
  const minRenewals = figure(spec, "min_renewals");
  const fence = await c.withLock(key, { ttlMs: ttl, owner: "ts-lifecycle" }, async (signal, lease) => {
    assert.equal((await c.state(key)).fence, lease.fence);
    await h.delay(figure(spec, "hold_ms"));
    assert.equal(signal.aborted, false, String(lease.error));
    assert.ok(lease.renewals >= minRenewals, `${lease.renewals} renewals`);
    return lease.fence;
  });
  const renewed = (await c.renewals(key, { limit: 100 })).events;
  assert.ok(renewed.length >= minRenewals, `${renewed.length} renewals in the history`);
  assert.deepEqual([...new Set(renewed.map((e) => e.fence))], [fence]);
  // Every ttl/3: a renewal finds two thirds of the lease left. The median,
  // so that one renewal delayed by a busy machine does not fail the test;
  // renewals every ttl/2 (half left) still do.
  const least = (ttl * 2) / 3 - figure(spec, "slack_ms");
  const left = median(renewed.map((e) => e.remaining_ms ?? 0));
  assert.ok(left >= least, `median ${left} ms left at a renewal, want >= ${least}: ${JSON.stringify(renewed)}`);
  await assert.rejects(c.state(key), lockd.NotFound);
  const events = (await c.history(key)).events;
  assert.deepEqual(
    events.slice(0, 2).map((e) => [e.type, e.fence]),
    [
      ["released", fence],
      ["acquired", fence],
    ],
  );
});

scenario("value-round-trip", async (_t, spec) => {
  const c = h.client();
  const key = h.unique("values");
  const values = spec["values"];
  assert.ok(Array.isArray(values), "scenarios.json: value-round-trip has no list values");
  for (const value of values as unknown[]) {
    await c.withLock(key, { ttlMs: 10000, value }, async () => {
      assert.deepEqual((await c.state(key)).value, value);
    });
  }
  await assert.rejects(c.acquire(key, { ttlMs: 10000, value: "\ud800" }), (err: unknown) => {
    assert.ok(err instanceof lockd.InvalidRequest, String(err));
    assert.equal(err.field, "value");
    return true;
  });
  await assert.rejects(c.state(key), lockd.NotFound);
});

scenario("lost-after-force-release", async (_t, spec) => {
  const c = h.client();
  const admin = h.client();
  const key = h.unique("lost");
  const ttl = figure(spec, "ttl_ms");
  const calls: lockd.LeaseLost[] = [];
  let held: Lease | undefined;
  await assert.rejects(
    c.withLock(key, { ttlMs: ttl, onLost: (_l, err) => calls.push(err) }, async (signal, lease) => {
      held = lease;
      // Just after a renewal, the next comes ttl/3 later: the longest the
      // loss can go unnoticed.
      await h.eventually(() => lease.renewals >= 1, "a renewal", ttl);
      await admin.forceRelease(key, { reason: "scenario lost-after-force-release" });
      const broken = performance.now();
      const at = await h.within(h.aborted(signal), ttl, "the loss was not noticed within the TTL");
      const took = at - broken;
      const limit = ttl / 3 + figure(spec, "slack_ms");
      assert.ok(took <= limit, `loss noticed after ${took.toFixed(0)} ms, want <= ${limit} ms`);
      assert.ok(lease.error instanceof lockd.LeaseLost);
      assert.equal(signal.reason, lease.error);
      assert.throws(() => lease.check(), lockd.LeaseLost);
    }),
    // Leaving the callback rejects: the work did not finish under the lock.
    lockd.LeaseLost,
  );
  assert.equal(calls.length, 1);
  assert.equal(calls[0], held!.error);
});

scenario("fifo-across-servers", async (_t, spec) => {
  const servers = [h.client(h.url()), h.client(h.url2())] as const;
  const key = h.unique("fifo");
  const holder = await servers[0].acquire(key, { ttlMs: 10_000, owner: "holder" });
  const order: string[] = [];
  const owners = Array.from({ length: figure(spec, "waiters") }, (_, i) => `waiter-${i}`);
  const waiting: Promise<void>[] = [];
  for (const [i, owner] of owners.entries()) {
    // Alternate servers: waiter-1 waits on the other process than waiter-0.
    const c = servers[(i + 1) % 2]!;
    waiting.push(
      c.withLock(key, { ttlMs: 10_000, waitMs: figure(spec, "wait_ms"), owner }, async () => {
        order.push(owner);
        await h.delay(figure(spec, "hold_ms"));
      }),
    );
    // The next waiter starts only once this one is queued.
    await h.eventually(async () => (await waiters(servers[0], key)) === i + 1, `${owner} queued`);
  }
  const queue = (await servers[1].state(key)).queue.map((w) => w.owner);
  assert.deepEqual(queue, owners);
  await holder.release();
  await h.within(Promise.all(waiting), figure(spec, "wait_ms"), "the waiters");
  assert.deepEqual(order, owners);
});

scenario("semaphore-limit", async (_t, spec) => {
  const servers = [h.client(h.url()), h.client(h.url2())] as const;
  const name = h.unique("sem");
  const limit = figure(spec, "limit");
  let held = 0;
  let mostHeld = 0;
  let mostHolders = 0;
  let done = 0;
  let stop = false;

  const watcher = (async () => {
    while (!stop) {
      let holders = 0;
      try {
        holders = (await servers[0].semaphores.state(name)).holders.length;
      } catch (err) {
        if (!(err instanceof lockd.NotFound)) throw err;
      }
      mostHolders = Math.max(mostHolders, holders);
    }
  })();
  const workers = Array.from({ length: figure(spec, "workers") }, (_, i) =>
    servers[i % 2]!.withPermit(name, { limit, ttlMs: 10_000, waitMs: figure(spec, "wait_ms"), owner: `worker-${i}` }, async () => {
      held++;
      mostHeld = Math.max(mostHeld, held);
      await h.delay(figure(spec, "hold_ms"));
      held--;
    }).then(() => {
      done++;
    }),
  );
  try {
    await h.within(Promise.all(workers), figure(spec, "wait_ms"), "the workers");
  } finally {
    stop = true;
    await watcher;
  }
  assert.equal(done, figure(spec, "workers"));
  assert.ok(mostHeld <= limit, `${mostHeld} workers held a permit at once, more than the limit ${limit}`);
  assert.ok(mostHolders <= limit, `the semaphore's state showed ${mostHolders} holders, more than the limit ${limit}`);
  assert.equal(mostHeld, limit, "the limit was never reached: the test proves nothing");
});

scenario("ride-out-503", async (_t, spec) => {
  // Every acquire's attempts, as the wire saw them.
  const attempts: { sent: number; answered: number; status: number; retryAfter: string | null }[] = [];
  const log = new h.Lines();
  const c = h.client(undefined, {
    logger: log,
    fetch: async (input, init) => {
      const sent = performance.now();
      const resp = await fetch(input, init);
      if (input.endsWith("/acquire")) {
        attempts.push({ sent, answered: performance.now(), status: resp.status, retryAfter: resp.headers.get("Retry-After") });
      }
      return resp;
    },
  });
  const key = h.unique("503");
  const ttl = figure(spec, "ttl_ms");
  const pause = figure(spec, "pause_ms");
  await c.withLock(key, { ttlMs: ttl }, async (signal, held) => {
    attempts.length = 0;
    const renewals = held.renewals;
    await h.pauseRedis(pause);
    const began = performance.now();
    const lease = await c.acquire(h.unique("503-other"), { ttlMs: 5000 });
    const took = performance.now() - began;
    await lease.release();

    const refused = attempts.filter((a) => a.status === 503);
    assert.ok(refused.length >= 1, "the acquire never met a 503: Redis was not paused, or lockd waited it out");
    assert.equal(attempts.at(-1)!.status, 200);
    // Each retry no sooner than the Retry-After of the 503 before it.
    for (let i = 0; i + 1 < attempts.length; i++) {
      const a = attempts[i]!;
      assert.equal(a.status, 503);
      const after = Number(a.retryAfter) * 1000;
      assert.ok(after >= 1000, `Retry-After ${a.retryAfter}`);
      const gap = attempts[i + 1]!.sent - a.answered;
      assert.ok(gap >= after - 5, `retried ${gap.toFixed(0)} ms after a 503 with Retry-After ${a.retryAfter}`);
    }
    const retries = log.at("warn").filter((l) => l.message.startsWith("acquire lock"));
    assert.equal(retries.length, refused.length, log.text());
    assert.deepEqual([retries[0]!.fields?.["status"], retries[0]!.fields?.["code"]], [503, "backend_unavailable"]);
    assert.ok(took >= pause, `granted after ${took.toFixed(0)} ms, within the pause of ${pause} ms`);
    await h.eventually(() => held.renewals > renewals + 1, "renewals after the pause", ttl);
    assert.equal(signal.aborted, false, String(held.error));
  });
});

scenario("election-handover", async (_t, spec) => {
  const one = h.client(h.url());
  const two = h.client(h.url2());
  const name = h.unique("handover");
  const ttl = figure(spec, "ttl_ms");
  const wait = figure(spec, "wait_ms");
  const slack = figure(spec, "slack_ms");
  const errors: unknown[] = [];

  // The observer reads from the second server, everything until it is
  // closed.
  const seen: ObserveEvent[] = [];
  const observer = two.observe(name, { timeoutMs: wait });
  const reading = (async () => {
    try {
      for await (const e of observer) seen.push(e);
    } catch (err) {
      errors.push(err);
    }
  })();
  const leases: Lease[] = [];
  try {
    await h.eventually(() => seen.length === 1, "the observer's first change");

    /** campaignWaiting campaigns; it resolves once candidate waits in line, with the leadership to come (and when it came). */
    const campaignWaiting = async (c: Client, candidate: string) => {
      const led = c.elections.campaign(name, { ttlMs: ttl, waitMs: wait, candidate }).then((lease) => {
        leases.push(lease);
        return { lease, at: performance.now() };
      });
      led.catch((err: unknown) => errors.push(err));
      await h.eventually(async () => (await candidates(one, name)).join() === candidate, `${candidate} waiting in line`);
      return { led };
    };

    // A leads through the first server; B waits on the second; A resigns.
    const a = await one.elections.campaign(name, { ttlMs: ttl, candidate: "A" });
    leases.push(a);
    const { led: bLed } = await campaignWaiting(two, "B");
    assert.equal((await one.leader(name)).leader, "A");
    const resigned = performance.now();
    assert.deepEqual(await a.release(), { key: name, resigned: true });
    const b = await h.within(bLed, wait, "B's leadership");
    assert.deepEqual(errors, []);
    assert.ok(b.lease.term > a.term);
    assert.ok(b.at - resigned <= slack, `B led ${(b.at - resigned).toFixed(0)} ms after A resigned`);

    // C waits on the first server; B's renewals stop, and its leadership
    // lapses after its TTL.
    const { led: cLed } = await campaignWaiting(one, "C");
    assert.equal(b.lease.lost, false, String(b.lease.error));
    b.lease.abandon();
    const stopped = performance.now();
    const c = await h.within(cLed, wait, "C's leadership");
    assert.deepEqual(errors, []);
    const took = c.at - stopped;
    assert.ok(c.lease.term > b.lease.term);
    assert.ok(took >= (ttl * 2) / 3 - 50, `C led ${took.toFixed(0)} ms after B stopped renewing: before B lapsed`);
    assert.ok(took <= ttl + slack, `C led ${took.toFixed(0)} ms after B stopped renewing`);
    assert.equal((await one.leader(name)).leader, "C");
    await c.lease.release();
    const ended = new Map(
      (await one.electionHistory(name)).events
        .filter((e) => e.type === "released" || e.type === "expired")
        .map((e) => [e.fence, e.type]),
    );
    assert.deepEqual(
      ended,
      new Map([
        [a.term, "released"],
        [b.lease.term, "expired"],
        [c.lease.term, "released"],
      ]),
    );

    await h.eventually(() => seen.length >= 7 || errors.length > 0, "the observer's seven changes", wait);
    observer.close();
    await h.within(reading, 5000, "the observer's end");
    assert.deepEqual(errors, []);
    assert.deepEqual(
      seen.map((e) => [e.event, e.data.term, e.data.leader]),
      [
        ["vacant", 0, undefined],
        ["leader", a.term, "A"],
        ["vacant", a.term, undefined],
        ["leader", b.lease.term, "B"],
        ["vacant", b.lease.term, undefined],
        ["leader", c.lease.term, "C"],
        ["vacant", c.lease.term, undefined],
      ],
    );
  } finally {
    observer.close();
    for (const l of leases) l.abandon();
  }
});

scenario("session-grants", async (_t, spec) => {
  const c = h.client();
  const key = h.unique("session-lock");
  const name = h.unique("session-sem");
  const ttl = figure(spec, "ttl_ms");
  const slack = figure(spec, "slack_ms");

  // A lock and a permit in one session, held past several TTLs.
  const [lock, permit] = await c.withSession({ ttlMs: ttl, owner: "ts-session-grants" }, async (session, signal) => {
    const lock = await c.acquire(key, { session });
    const permit = await c.semaphores.acquire(name, { limit: figure(spec, "limit"), session });
    await h.delay(figure(spec, "hold_ms"));
    assert.equal(signal.aborted, false, String(session.error));
    assert.ok(session.renewals >= figure(spec, "min_renewals"), `${session.renewals} renewals`);
    assert.equal((await c.state(key)).fence, lock.fence);
    assert.deepEqual(
      (await c.semaphores.state(name)).holders.map((x) => x.fence),
      [permit.fence],
    );
    const holds = (await session.info()).holds.map((x) => `${x.kind} ${x.key}`).sort();
    assert.deepEqual(holds, [`lock ${key}`, `semaphore ${name}`].sort());
    for (const lease of [lock, permit]) {
      assert.equal(lease.lost, false, String(lease.error));
    }
    return [lock, permit] as const;
  });
  // Ended: both free at once, released by the session.
  await assert.rejects(c.state(key), lockd.NotFound);
  await assert.rejects(c.semaphores.state(name), lockd.NotFound);
  for (const events of [(await c.history(key, { limit: 1 })).events, (await c.semaphores.history(name, { limit: 1 })).events]) {
    assert.deepEqual([events[0]!.type, events[0]!.actor], ["released", "session"], JSON.stringify(events));
  }
  for (const lease of [lock, permit]) {
    assert.equal(lease.lost, false, String(lease.error));
    assert.equal(lease.released, true);
  }

  // A second session, cut off from lockd just after a renewal: it lapses,
  // and the client notices by its own clock.
  const network = h.cuttingFetch();
  const cutOff = h.client(undefined, { fetch: network.fetch });
  const lapsing = h.unique("session-lapse");
  const second = await cutOff.session({ ttlMs: ttl, owner: "ts-session-lapse" });
  const lease = await cutOff.acquire(lapsing, { session: second });
  const renewals = second.renewals;
  await h.eventually(() => second.renewals > renewals, "a renewal of the second session", ttl);
  network.cut();
  const cut = performance.now();
  const at = await h.within(h.aborted(second.signal), ttl + slack, "the lapse was not noticed within ttl plus slack");
  const took = at - cut;
  assert.ok(took >= (ttl * 2) / 3 - 50, `lost ${took.toFixed(0)} ms after the cut: before the session could lapse`);
  assert.ok(took <= ttl + slack, `lost ${took.toFixed(0)} ms after the cut`);
  assert.ok(lease.lost);
  assert.throws(() => second.check(), lockd.SessionLost);
  assert.throws(() => lease.check(), lockd.SessionLost);
  await h.eventually(() => free(c, lapsing), "the lock free after the lapse", slack);
  const newest = (await c.history(lapsing, { limit: 1 })).events[0]!;
  assert.deepEqual([newest.type, newest.actor, newest.reason], ["released", "session", "session expired"]);
});

scenario("grant-after-wait", async (_t, spec) => {
  const c = h.client();
  const key = h.unique("grant-after-wait");
  const ttl = figure(spec, "ttl_ms");
  const holder = await c.acquire(key, { ttlMs: figure(spec, "holder_ttl_ms"), owner: "ts-holder" });
  const start = performance.now();
  const slow = h.client(h.slowUrl());
  const waiting = slow.acquire(key, { ttlMs: ttl, waitMs: figure(spec, "wait_ms"), owner: "ts-waiter" });
  await h.eventually(async () => (await waiters(c, key)) === 1, "the waiter queues");
  await h.delay(figure(spec, "hold_ms")); // the wait to outlast: longer than the waiter's TTL
  await holder.release();
  const lease = await h.within(waiting, figure(spec, "wait_ms"), "the waiter's grant");
  const waited = performance.now() - start;
  try {
    assert.ok(waited > ttl, `granted after ${waited.toFixed(0)} ms, not longer than the TTL: the test proves nothing`);
    await h.delay(figure(spec, "keep_ms"));
    assert.equal(lease.lost, false, `lost after a grant that waited ${waited.toFixed(0)} ms: ${String(lease.error)}`);
    assert.ok(lease.renewals >= figure(spec, "min_renewals"), `${lease.renewals} renewals`);
    assert.equal((await c.state(key)).fence, lease.fence);
  } catch (err) {
    lease.abandon();
    throw err;
  }
  await lease.release();
});

scenario("wait-in-rounds", async (_t, spec) => {
  const c = h.client(h.shortWaitUrl());
  const key = h.unique("wait-in-rounds");
  const holder = await c.acquire(key, { ttlMs: 30_000, owner: "ts-holder" });
  const order: string[] = [];
  const wait = async (owner: string): Promise<void> => {
    const lease = await h.client(h.shortWaitUrl()).acquire(key, { ttlMs: 10_000, waitMs: figure(spec, "wait_ms"), owner, autoRenew: false });
    order.push(owner);
    await lease.release();
  };
  const first = wait("ts-first");
  await h.eventually(async () => (await waiters(c, key)) === 1, "the first waiter queues");
  await h.delay(figure(spec, "later_ms"));
  const second = wait("ts-second");
  await h.eventually(async () => (await waiters(c, key)) === 2, "the second waiter queues");
  await h.delay(figure(spec, "hold_ms")); // more than one round of the first waiter
  const queue = (await c.state(key)).queue;
  await holder.release();
  await Promise.all([first, second]);
  assert.deepEqual(
    queue.map((w) => w.owner),
    ["ts-first", "ts-second"],
    JSON.stringify(queue),
  );
  assert.ok(Date.parse(queue[0]!.waiting_since) <= Date.parse(queue[1]!.waiting_since), JSON.stringify(queue));
  assert.deepEqual(order, ["ts-first", "ts-second"]);
});

test("every scenario of clients/scenarios.json has a test", () => {
  const missing = [...h.SCENARIOS.keys()].filter((id) => !h.COVERED.has(id));
  assert.deepEqual(missing, [], "scenarios of clients/scenarios.json without a TypeScript test");
});

function median(xs: number[]): number {
  const s = [...xs].sort((x, y) => x - y);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

async function waiters(c: Client, key: string): Promise<number> {
  try {
    return (await c.state(key)).waiters;
  } catch (err) {
    if (err instanceof lockd.NotFound) return 0;
    throw err;
  }
}

async function free(c: Client, key: string): Promise<boolean> {
  try {
    await c.state(key);
    return false;
  } catch (err) {
    if (err instanceof lockd.NotFound) return true;
    throw err;
  }
}

async function candidates(c: Client, name: string): Promise<string[]> {
  try {
    return (await c.leader(name)).candidates.map((w) => w.candidate);
  } catch (err) {
    if (err instanceof lockd.NotFound) return [];
    throw err;
  }
}
