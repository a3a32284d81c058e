// Elections from the TypeScript client against a real lockd: campaign,
// proclaim, observe, resign. The hand-over between two lockd processes is
// the shared scenario election-handover (scenarios.test.ts).

import assert from "node:assert/strict";
import { test } from "node:test";
import * as lockd from "lockd-client";
import { Client, type ObserveEvent } from "lockd-client";
import * as h from "./harness.js";

test("campaign, proclaim, observe, resign", async () => {
  const c = h.client();
  const name = h.unique("elect");
  const changes = c.observe(name, { timeoutMs: 5000 });
  // Nobody leads yet: the first change says so.
  assert.deepEqual((await changes.next()).value, { event: "vacant", data: { key: name, term: 0 } });
  let term = 0;
  await c.withLeadership(name, { ttlMs: 600, candidate: "ts-a", value: { addr: "10.0.0.7" } }, async (signal, lead) => {
    term = lead.term;
    assert.deepEqual([lead.kind, lead.key, lead.leader, lead.owner], ["election", name, "ts-a", "ts-a"]);
    assert.deepEqual([lead.fence, lead.mode, lead.ttlMs], [term, "exclusive", 600]);
    assert.ok(term > 0);
    assert.deepEqual(lead.value, { addr: "10.0.0.7" });
    assert.ok(lead.token);
    assert.match(String(lead), new RegExp(`term=${term}`));
    assert.ok(!(String(lead) + JSON.stringify(lead.info) + JSON.stringify(lead)).includes(lead.token));

    let next = (await changes.next()).value as ObserveEvent;
    assert.deepEqual([next.event, next.data.leader, next.data.term, next.data.value], ["leader", "ts-a", term, { addr: "10.0.0.7" }]);
    assert.ok(!("token" in next.data));
    const state = await c.leader(name);
    assert.deepEqual([state.leader, state.term, state.value, state.candidates], ["ts-a", term, { addr: "10.0.0.7" }, []]);

    const draining = { addr: "10.0.0.7", state: "draining" };
    await lead.proclaim(draining);
    next = (await changes.next()).value as ObserveEvent;
    assert.deepEqual([next.event, next.data.leader, next.data.term, next.data.value], ["proclaimed", "ts-a", term, draining]);
    assert.deepEqual(lead.value, draining);

    // It renews itself through /renew, every ttl/3, under its term, and a
    // renewal keeps the proclaimed value.
    await h.eventually(() => lead.renewals >= 2, "two renewals", 2000);
    assert.equal(signal.aborted, false);
    assert.deepEqual([(lead.info as { term: number }).term, lead.value], [term, draining]);
    assert.deepEqual((await c.leader(name)).value, draining);
  });
  // Leaving the callback resigned.
  assert.deepEqual((await changes.next()).value, { event: "vacant", data: { key: name, term } });
  await changes.return();
  assert.equal(changes.closed, true);
  assert.deepEqual(await changes.next(), { done: true, value: undefined });
  await assert.rejects(c.leader(name), lockd.NotFound);
  const events = (await c.electionHistory(name)).events.map((e) => [e.type, e.fence]);
  assert.deepEqual(events[0], ["released", term]);
  assert.deepEqual(events.at(-1), ["acquired", term]);
  assert.ok(events.some(([t, f]) => t === "proclaimed" && f === term));
  const renewed = (await c.elections.history(name, { type: "renewed" })).events;
  assert.ok(renewed.length >= 2);
});

test("a waiting candidate leads after a resignation, with a higher term", async () => {
  const one = h.client();
  const two = h.client(h.url2());
  const name = h.unique("next");
  const first = await one.elections.campaign(name, { ttlMs: 10_000, candidate: "first" });
  assert.equal(first.kind, "election");
  setTimeout(() => void first.release(), 300);
  const began = performance.now();
  await two.withLeadership(name, { ttlMs: 10_000, waitMs: 5000, candidate: "second" }, async (_signal, second) => {
    assert.ok(performance.now() - began >= 250, "led while the first still led");
    assert.ok(second.term > first.term);
    const state = await one.leader(name);
    assert.deepEqual([state.leader, state.term], ["second", second.term]);
  });
  const types = (await one.electionHistory(name, { limit: 4 })).events.map((e) => [e.type, e.owner]);
  assert.deepEqual(types, [
    ["released", "second"],
    ["acquired", "second"],
    ["released", "first"],
    ["acquired", "first"],
  ]);
});

test("handover: the named candidate leads next, ahead of an earlier one; NotCandidate otherwise", async () => {
  const c = h.client();
  const name = h.unique("handover");
  const first = await c.elections.campaign(name, { ttlMs: 10_000, candidate: "first" });
  const led: string[] = [];
  const waiting: Promise<void>[] = [];
  for (const who of ["second", "third"]) {
    waiting.push(
      c.withLeadership(name, { ttlMs: 10_000, waitMs: 20_000, candidate: who }, () => {
        led.push(who);
      }),
    );
    for (const until = Date.now() + 10_000; ; ) {
      const line = (await c.leader(name)).candidates.map((x) => x.candidate);
      if (line[line.length - 1] === who) break;
      assert.ok(Date.now() < until, `${who} not in line`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }
  await assert.rejects(c.elections.handover(name, first.token, "nobody"), lockd.NotCandidate);
  assert.equal((await c.leader(name)).leader, "first");
  first.abandon();
  assert.deepEqual(await c.elections.handover(name, first.token, "third"), { key: name, resigned: true });
  await Promise.all(waiting);
  assert.deepEqual(led, ["third", "second"]);
});

test("not granted after the wait", async () => {
  const c = h.client();
  const name = h.unique("held");
  await c.withLeadership(name, { ttlMs: 10_000, candidate: "incumbent" }, async (signal) => {
    const began = performance.now();
    const err = await c.elections.campaign(name, { waitMs: 200, candidate: "challenger" }).catch((e: unknown) => e);
    assert.ok(performance.now() - began >= 195, "the server did not wait");
    assert.ok(err instanceof lockd.LockHeld);
    assert.deepEqual([err.status, err.holder], [409, "incumbent"]);
    await assert.rejects(
      c.withLeadership(name, { waitMs: 0 }, () => assert.fail("led while another leads")),
      lockd.LockHeld,
    );
    assert.equal(signal.aborted, false);
  });
});

test("a stale token is lease_lost", async () => {
  const c = h.client();
  const name = h.unique("stale");
  const old = await c.elections.campaign(name, { ttlMs: 10_000, candidate: "old", autoRenew: false });
  const broken = await c.elections.forceRelease(name, { fence: old.term, reason: "test" });
  assert.deepEqual([broken.released, broken.fence], [true, old.term]);
  const fresh = await c.elections.campaign(name, { ttlMs: 10_000, candidate: "new", autoRenew: false });
  assert.ok(fresh.term > old.term);
  const err = await c.resign(name, old.token).catch((e: unknown) => e);
  assert.ok(err instanceof lockd.LeaseLost);
  assert.deepEqual([err.status, err.code], [409, "lease_lost"]);
  await assert.rejects(c.elections.renew(name, old.token), lockd.LeaseLost);
  await assert.rejects(old.proclaim("still here"), lockd.LeaseLost);
  assert.equal(old.lost, true);
  assert.throws(() => old.check(), lockd.LeaseLost);
  assert.equal((await c.leader(name)).leader, "new");
  const proclaimed = await c.elections.proclaim(name, fresh.token, { v: 2 });
  assert.deepEqual([proclaimed.term, proclaimed.value, "token" in proclaimed], [fresh.term, { v: 2 }, false]);
  assert.deepEqual(await fresh.release(), { key: name, resigned: true });
  const nf = await c.resign(name, fresh.token).catch((e: unknown) => e);
  assert.ok(nf instanceof lockd.LeaseNotFound);
  assert.equal(nf.status, 404);
  const lock = await c.acquire(h.unique("lock"), { ttlMs: 5000, autoRenew: false });
  try {
    await assert.rejects(lock.proclaim("a lock has no leader"), TypeError);
  } finally {
    await lock.release();
  }
});

test("a lost leadership is signalled, and withLeadership rejects with LeaseLost", async () => {
  const c = h.client();
  const name = h.unique("lost");
  const calls: lockd.LeaseLost[] = [];
  let lead: lockd.Lease | undefined;
  await assert.rejects(
    c.withLeadership(name, { ttlMs: 600, onLost: (_l, err) => calls.push(err) }, async (signal, l) => {
      lead = l;
      await c.elections.forceRelease(name, { reason: "test" });
      await h.within(h.aborted(signal), 1000, "the loss was not noticed within the TTL");
      assert.throws(() => l.check(), lockd.LeaseLost);
    }),
    lockd.LeaseLost,
  );
  assert.equal(calls.length, 1);
  assert.equal(calls[0], lead!.error);
});

test("without waitMs a campaign goes on in rounds until it leads", async () => {
  // Rounds of 0.3 s instead of a minute: the candidate campaigns again
  // after each 409 until it leads.
  const counting = h.losingFetch(0);
  const c = h.client();
  const name = h.unique("rounds");
  const first = await c.elections.campaign(name, { ttlMs: 10_000, candidate: "first" });
  setTimeout(() => void first.release(), 1000);
  const patient = h.client(undefined, { fetch: counting.fetch, waitRoundMs: 300 });
  const term = await patient.withLeadership(name, { ttlMs: 10_000, candidate: "patient" }, (_s, lead) => lead.term);
  assert.ok(term > first.term);
  const rounds = counting.seen.filter((x) => x.has("Idempotency-Key")).length;
  assert.ok(rounds >= 3, `${rounds} rounds: it did not campaign again after a round`);
});

test("without waitMs the rounds fit the server's longest wait", async () => {
  // A round longer than the server's --max-wait (60 s) is answered 400
  // wait_ms with max_ms; the rounds are then of that.
  const c = h.client(undefined, { waitRoundMs: 240_000 });
  const term = await c.withLeadership(h.unique("fit"), { ttlMs: 10_000 }, (_s, lead) => lead.term);
  assert.ok(term > 0);
});

test("observe: a timeout, close, break and a signal end it", async () => {
  const c = h.client();
  const name = h.unique("quiet");

  const timed = c.observe(name, { timeoutMs: 300 });
  assert.equal((await timed.next()).value?.event, "vacant");
  let began = performance.now();
  await assert.rejects(timed.next(), (err: unknown) => {
    assert.ok(err instanceof DOMException);
    assert.equal(err.name, "TimeoutError");
    return true;
  });
  const took = performance.now() - began;
  assert.ok(took >= 250 && took < 1500, String(took));
  assert.equal(timed.closed, true);
  assert.deepEqual(await timed.next(), { done: true, value: undefined });

  // close() while a next() waits ends the iteration, cleanly.
  const closing = c.observe(name);
  assert.equal((await closing.next()).value?.event, "vacant");
  const waiting = closing.next();
  await h.delay(200);
  began = performance.now();
  closing.close();
  assert.deepEqual(await h.within(waiting, 2000, "close() did not end the iteration"), { done: true, value: undefined });
  assert.ok(performance.now() - began < 1000);
  closing.close(); // again: nothing

  // break out of for await closes the stream.
  const broken = c.observe(name);
  for await (const { event } of broken) {
    assert.equal(event, "vacant");
    break;
  }
  assert.equal(broken.closed, true);

  // The signal ends the loop.
  const ac = new AbortController();
  const seen: string[] = [];
  setTimeout(() => ac.abort(), 300);
  for await (const { event } of c.observe(name, { signal: ac.signal })) {
    seen.push(event);
  }
  assert.deepEqual(seen, ["vacant"]);

  await assert.rejects(c.observe("bad/name").next(), lockd.InvalidRequest);
});

test("scopes", async () => {
  const server = h.env("LOCKD_AUTH_URL");
  const writer = new Client({ baseUrl: server, apiKey: h.env("LOCKD_TEST_WRITE_KEY") });
  const reader = new Client({ baseUrl: server, apiKey: h.env("LOCKD_TEST_READ_KEY") });
  const name = h.unique("auth");
  await assert.rejects(new Client({ baseUrl: server }).observe(name).next(), lockd.Unauthorized);
  await assert.rejects(reader.elections.campaign(name, { waitMs: 0 }), lockd.Forbidden);
  const changes = reader.observe(name, { timeoutMs: 5000 });
  try {
    assert.equal((await changes.next()).value?.event, "vacant");
    await writer.withLeadership(name, { ttlMs: 5000 }, async (_signal, lead) => {
      assert.equal(lead.leader, "writer"); // the API key's name
      const next = (await changes.next()).value as ObserveEvent;
      assert.deepEqual([next.event, next.data.leader, next.data.term], ["leader", "writer", lead.term]);
      assert.equal((await reader.leader(name)).leader, "writer");
      await assert.rejects(reader.resign(name, lead.token), lockd.Forbidden);
    });
  } finally {
    changes.close();
  }
});
