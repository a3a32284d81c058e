// The examples of clients/typescript/README.md run as written: the first
// (five lines), the election's and the session's. scripts/test.mjs compiled every ```ts
// block of the README with tsc (dist/readme/example-N.js); these tests run
// three of them against the harness's lockd.

import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { pathToFileURL } from "node:url";
import * as lockd from "lockd-client";
import * as h from "./harness.js";

const README = readFileSync(join(h.PACKAGE_DIR, "README.md"), "utf8");
const BLOCKS = [...README.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);

/** run imports the compiled example n (1-based) with its strings replaced. */
async function run(n: number, replace: [string, string][]): Promise<void> {
  const dir = join(h.env("LOCKD_TS_BUILD_DIR"), "dist", "readme");
  let js = readFileSync(join(dir, `example-${n}.js`), "utf8");
  for (const [from, to] of replace) {
    assert.ok(js.includes(from), `example ${n} has no ${from}`);
    js = js.replaceAll(from, to);
  }
  const file = join(dir, `example-${n}.run-${Date.now()}.js`);
  writeFileSync(file, js);
  await import(pathToFileURL(file).href);
}

test("the first example is five lines, and runs", async () => {
  const example = BLOCKS[0]!;
  assert.ok(example.split("\n").filter((l) => l.trim()).length <= 5, example);
  assert.match(example, /withLock\("report:daily"/);
  const fences: number[] = [];
  globalThis.buildReport = async ({ signal, fence }) => {
    assert.equal(signal.aborted, false);
    assert.equal((await h.client().state("report:daily")).fence, fence);
    fences.push(fence);
  };
  await run(1, [['"http://lockd:8080"', JSON.stringify(h.url())]]);
  assert.equal(fences.length, 1);
  // Released at the end of the callback.
  await assert.rejects(h.client().state("report:daily"), lockd.NotFound);
});

test("the election's example runs", async () => {
  const n = BLOCKS.findIndex((b) => b.startsWith("await client.withLeadership(")) + 1;
  assert.ok(n > 0, "README.md has no example of client.withLeadership");
  const example = BLOCKS[n - 1]!;
  assert.ok(example.split("\n").filter((l) => l.trim()).length <= 5, example);
  const name = h.unique("readme");
  const c = h.client();
  const led: { term: number; aborted: boolean; state: lockd.ElectionState }[] = [];
  globalThis.client = c;
  globalThis.serveWhileLeading = async ({ signal, term }) => {
    led.push({ term, aborted: signal.aborted, state: await c.leader(name) });
  };
  await run(n, [['"billing:leader"', JSON.stringify(name)]]);
  assert.equal(led.length, 1);
  const { state, term, aborted } = led[0]!;
  assert.deepEqual([state.leader, state.term, state.value], ["host-a", term, { addr: "10.0.0.7:8080" }]);
  assert.equal(aborted, false);
  // Resigned at the end of the callback.
  await assert.rejects(c.leader(name), lockd.NotFound);
});

test("the session's example runs", async () => {
  const n = BLOCKS.findIndex((b) => b.startsWith("await client.withSession(")) + 1;
  assert.ok(n > 0, "README.md has no example of client.withSession");
  const example = BLOCKS[n - 1]!;
  assert.ok(example.split("\n").filter((l) => l.trim()).length <= 5, example);
  const key = h.unique("readme-report");
  const pool = h.unique("readme-pool");
  const c = h.client();
  const seen: { fence: number; aborted: boolean; lock: lockd.LockState; permits: lockd.LockState }[] = [];
  globalThis.client = c;
  globalThis.buildReport = async ({ signal, fence }) => {
    seen.push({ fence, aborted: signal.aborted, lock: await c.state(key), permits: await c.semaphores.state(pool) });
  };
  await run(n, [
    ['"report:daily"', JSON.stringify(key)],
    ['"db:pool"', JSON.stringify(pool)],
  ]);
  assert.equal(seen.length, 1);
  const { fence, aborted, lock, permits } = seen[0]!;
  assert.deepEqual([lock.fence, aborted], [fence, false]);
  assert.deepEqual([permits.limit, permits.holders.length], [4, 1]);
  // Both released at once by the end of the session.
  await assert.rejects(c.state(key), lockd.NotFound);
  await assert.rejects(c.semaphores.state(pool), lockd.NotFound);
  for (const events of [(await c.history(key, { limit: 1 })).events, (await c.semaphores.history(pool, { limit: 1 })).events]) {
    assert.deepEqual([events[0]!.type, events[0]!.actor], ["released", "session"]);
  }
});
