// Proofs: a lease sends the latest proof the server answered with every
// renewal, proclaim and release, without being asked.

import assert from "node:assert/strict";
import { test } from "node:test";
import { inspect } from "node:util";
import type { Lease } from "lockd-client";
import * as h from "./harness.js";

type Call = { op: string; sent: string | undefined; answered: string | undefined };

/** tapped is a client whose renewals, proclaims, releases and resigns are recorded with the proofs sent and answered. */
function tapped(): { c: ReturnType<typeof h.client>; calls: Call[] } {
  const calls: Call[] = [];
  const c = h.client(undefined, {
    fetch: async (input: string, init: RequestInit) => {
      const res = await fetch(input, init);
      const op = new URL(input).pathname.split("/").pop() ?? "";
      if (["renew", "proclaim", "release", "resign"].includes(op)) {
        const sent = (JSON.parse(String(init.body)) as { proof?: string }).proof;
        const answered = ((await res.clone().json()) as { proof?: string }).proof;
        calls.push({ op, sent, answered });
      }
      return res;
    },
  });
  return { c, calls };
}

function checkChain(first: string | undefined, calls: Call[]): void {
  assert.ok(first, "the grant answered no proof");
  let latest = first;
  for (const call of calls) {
    assert.equal(call.sent, latest, `${call.op} sent another proof than the latest answered`);
    if (call.op !== "release" && call.op !== "resign") {
      assert.ok(call.answered && call.answered !== call.sent, `${call.op} answered no new proof`);
      latest = call.answered;
    }
  }
}

// tick lets the server's millisecond clock move on: a renewal's proof
// signs the expiry it sets, so two renewals within one millisecond answer
// the same proof.
const tick = () => new Promise((r) => setTimeout(r, 2));

test("a lease sends its latest proof with each renewal, proclaim and release", async () => {
  const { c, calls } = tapped();
  const takes: Array<(key: string) => Promise<Lease>> = [
    (key) => c.acquire(key, { ttlMs: 10_000, value: { n: 1 }, autoRenew: false }),
    (key) => c.semaphores.acquire(key, { limit: 2, ttlMs: 10_000, autoRenew: false }),
    (key) => c.elections.campaign(key, { ttlMs: 10_000, autoRenew: false }),
  ];
  for (const take of takes) {
    const lease = await take(h.unique("proof"));
    const first = lease.proof;
    await tick();
    await lease.renew();
    await tick();
    await lease.renew();
    if (lease.kind === "election") {
      await lease.proclaim({ n: 2 });
    }
    assert.ok(!("proof" in lease.info), "info shows the proof");
    for (const text of [String(lease), JSON.stringify(lease), inspect(lease), JSON.stringify(lease.info)]) {
      assert.ok(!text.includes(lease.proof ?? "-"), `a proof in ${text}`);
    }
    await lease.release();
    assert.ok(calls.length >= 3, JSON.stringify(calls.map((x) => x.op)));
    checkChain(first, calls);
    calls.length = 0;
  }
});

test("the renewer sends it too", async () => {
  const { c, calls } = tapped();
  const lease = await c.acquire(h.unique("proof-renewer"), { ttlMs: 300 });
  const first = lease.proof;
  for (const until = Date.now() + 5000; lease.renewals < 3 && Date.now() < until; ) {
    await new Promise((r) => setTimeout(r, 20));
  }
  await lease.release();
  assert.ok(calls.length >= 4, JSON.stringify(calls.map((x) => x.op)));
  checkChain(first, calls);
});

test("a lock set sends its latest proof with each renewal and its release", async () => {
  const { c, calls } = tapped();
  const key = h.unique("proof-set");
  const set = await c.lockMany([`${key}:1`, `${key}:2`], { ttlMs: 10_000, value: { n: 1 }, autoRenew: false });
  const first = set.proof;
  await tick();
  await set.renew();
  await tick();
  await set.renew();
  for (const text of [String(set), JSON.stringify(set), inspect(set)]) {
    assert.ok(!text.includes(set.proof ?? "-"), `a proof in ${text}`);
  }
  await set.release();
  assert.deepEqual(
    calls.map((x) => x.op),
    ["renew", "renew", "release"],
  );
  checkChain(first, calls);
});

test("tokens kept elsewhere: renew and release take the proof", async () => {
  const c = h.client();
  const key = h.unique("proof-token");
  const lease = await c.acquire(key, { ttlMs: 10_000, autoRenew: false });
  const renewed = await c.renew(key, lease.token, { proof: lease.proof });
  assert.ok(renewed.proof && renewed.proof !== lease.proof);
  assert.equal((await c.renew(key, lease.token, { proof: "not a proof" })).key, key);
  assert.equal((await c.release(key, lease.token, renewed.proof)).released, true);
  lease.abandon();
});
