// Errors and pieces that need no server: the problem table against the
// contract, Retry-After, backoff, what a Client and a Lease show.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { inspect } from "node:util";
import * as lockd from "lockd-client";
import { Client, Lease, PROBLEM_CLASSES, backoff, errorFor, parseRetryAfter } from "lockd-client";
import { REPO_DIR } from "./harness.js";

/** contractCodes are the problem codes of api/openapi.yaml (Problem.code's enum). */
function contractCodes(): string[] {
  const text = readFileSync(join(REPO_DIR, "api", "openapi.yaml"), "utf8");
  const m = /\n {4}Problem:\n(?:.*\n)*? {8}code:\n {10}type: string\n {10}enum: \[([^\]]*)\]/.exec(text);
  assert.ok(m, "api/openapi.yaml: no enum of Problem.code found; update this test's pattern");
  return m[1]!.split(",").map((c) => c.trim());
}

test("every code of the contract has its own class, exported", () => {
  const codes = contractCodes();
  assert.ok(codes.includes("lock_held"));
  assert.deepEqual(Object.keys(PROBLEM_CLASSES).sort(), [...codes].sort());
  const classes = new Set(Object.values(PROBLEM_CLASSES));
  assert.equal(classes.size, codes.length, "two codes share a class");
  for (const [code, cls] of Object.entries(PROBLEM_CLASSES)) {
    const err = errorFor(409, { code, detail: "d" }, undefined);
    assert.equal(err.constructor, cls, code);
    assert.ok(err instanceof lockd.LockdError);
    assert.ok(err instanceof Error);
    assert.equal(err.code, code);
    assert.equal(err.name, cls.name);
    assert.equal((lockd as Record<string, unknown>)[cls.name], cls, `${cls.name} is not exported`);
  }
});

test("errorFor reads the problem", () => {
  const err = errorFor(
    409,
    { code: "lock_held", detail: "k is held by w for 1500 ms more", holder: "w", remaining_ms: 1500 },
    2000,
  );
  assert.ok(err instanceof lockd.LockHeld);
  assert.ok(err instanceof lockd.NotGranted);
  assert.deepEqual([err.status, err.code, err.holder, err.remainingMs, err.retryAfterMs], [409, "lock_held", "w", 1500, 2000]);
  assert.equal(err.message, "k is held by w for 1500 ms more (409 lock_held)");
  assert.equal(err.detail, "k is held by w for 1500 ms more");

  const queued = errorFor(409, { code: "queued", detail: "d", waiters: 2, next: { owner: "b", waiting_since: "t" } }, 1000);
  assert.ok(queued instanceof lockd.Queued);
  assert.deepEqual([queued.waiters, queued.next?.owner], [2, "b"]);

  const invalid = errorFor(400, { code: "invalid_request", detail: "d", field: "ttl_ms" }, undefined);
  assert.ok(invalid instanceof lockd.InvalidRequest);
  assert.equal(invalid.field, "ttl_ms");

  // Unknown codes and bodies that are not problems fall back on the status.
  const newer = errorFor(409, { code: "some_new_code", detail: "d" }, undefined);
  assert.equal(newer.constructor, lockd.LockdError);
  assert.equal(newer.code, "some_new_code");
  const proxy = errorFor(502, {}, undefined);
  assert.equal(proxy.constructor, lockd.Unavailable);
  assert.equal(proxy.detail, "Bad Gateway");
  assert.ok(errorFor(503, { code: "backend_recovering", detail: "d" }, 30_000) instanceof lockd.Unavailable);
  assert.ok(errorFor(500, { code: "internal", detail: "d" }, undefined) instanceof lockd.Unavailable);
  assert.equal(errorFor(404, {}, undefined).constructor, lockd.NotFound);
  assert.equal(errorFor(418, {}, undefined).message, "HTTP 418 (418)");
  // A code that is a property of every object is not a code.
  assert.equal(errorFor(409, { code: "constructor" }, undefined).constructor, lockd.LockdError);
});

test("LeaseNotFound is a LeaseLost and a NotFound", () => {
  const err = new lockd.LeaseNotFound("gone", { status: 404 });
  assert.ok(err instanceof lockd.LeaseLost);
  assert.ok(err instanceof lockd.NotFound);
  assert.ok(err instanceof lockd.LockdError);
  assert.equal(err.code, "not_found");
  assert.ok(!(new lockd.LeaseLost("lost") instanceof lockd.NotFound));
  assert.ok(!(new lockd.NotFound("none") instanceof lockd.LeaseLost));
});

test("SessionLost is a LeaseLost and a NotFound; SessionNotFound is its former name", () => {
  const err = errorFor(404, { code: "session_not_found", detail: "the session ended or lapsed" }, undefined);
  assert.ok(err instanceof lockd.SessionLost);
  assert.ok(err instanceof lockd.LeaseLost);
  assert.ok(err instanceof lockd.NotFound);
  assert.ok(!(err instanceof lockd.LeaseNotFound));
  assert.deepEqual([err.status, err.code, err.name], [404, "session_not_found", "SessionLost"]);
  // Lost by the client's clock: no status, the class's code.
  const lapsed = new lockd.SessionLost("could not renew the session before it expired");
  assert.deepEqual([lapsed.status, lapsed.code], [undefined, "session_not_found"]);
  assert.ok(lapsed instanceof lockd.NotFound);
  assert.equal(lockd.SessionNotFound, lockd.SessionLost);
});

test("Retry-After: seconds or a date, in milliseconds", () => {
  assert.equal(parseRetryAfter("3"), 3000);
  assert.equal(parseRetryAfter(" 1 "), 1000);
  assert.equal(parseRetryAfter(null), undefined);
  assert.equal(parseRetryAfter("soon"), undefined);
  const at = Date.now();
  const date = new Date(at + 30_000).toUTCString();
  const ms = parseRetryAfter(date, at)!;
  assert.ok(ms > 29_000 && ms <= 30_000, String(ms));
  assert.equal(parseRetryAfter(new Date(at - 30_000).toUTCString(), at), 0);
});

test("backoff doubles from 100 ms to 5 s, with jitter, never under Retry-After", () => {
  for (let attempt = 0; attempt < 30; attempt++) {
    const d = backoff(attempt, 100, 5000);
    const ceiling = Math.min(100 * 2 ** attempt, 5000);
    assert.ok(d >= ceiling / 2 && d <= ceiling, `${attempt}: ${d}`);
  }
  assert.equal(backoff(0, 100, 5000, 7000), 7000);
  // Jitter: clients that failed together do not retry together.
  assert.ok(new Set(Array.from({ length: 20 }, () => backoff(3, 100, 5000))).size > 1);
});

test("a Client and a Lease show neither the API key nor the token", () => {
  const c = new Client({ baseUrl: "http://127.0.0.1:1/", apiKey: "api-key-secret" });
  assert.equal(String(c), 'Client("http://127.0.0.1:1", apiKey=<set>)');
  const ops = {
    timeoutMs: 1000,
    logger: undefined,
    renew: () => Promise.reject(new Error("no")),
    proclaim: () => Promise.reject(new Error("no")),
    release: () => Promise.reject(new Error("no")),
  };
  const grant = {
    key: "k",
    token: "token-secret",
    fence: 7,
    ttl_ms: 3000,
    owner: "me",
    mode: "exclusive" as const,
    count: 1,
    acquired_at: "2026-01-01T00:00:00Z",
    expires_at: "2026-01-01T00:00:03Z",
  };
  const lease = new Lease(ops, "lock", grant, performance.now(), { autoRenew: false });
  assert.equal(lease.token, "token-secret");
  assert.equal(String(lease), 'Lease(lock "k" fence=7 owner="me" held)');
  const shown = [
    String(lease),
    inspect(lease, { showHidden: true, depth: 5 }),
    JSON.stringify(lease),
    JSON.stringify(lease.info),
    inspect(lease.info),
    JSON.stringify(Object.entries(lease)),
    inspect(c, { showHidden: true, depth: 5 }),
    JSON.stringify(c),
    JSON.stringify(Object.entries(c)),
  ];
  for (const text of shown) {
    assert.ok(!text.includes("token-secret"), text);
    assert.ok(!text.includes("api-key-secret"), text);
  }
  lease.abandon();
  assert.equal(String(lease), 'Lease(lock "k" fence=7 owner="me" released)');
});

test("URLs and durations are checked", async () => {
  assert.equal(new Client({ baseUrl: "https://lockd.example:8443/base/" }).baseUrl, "https://lockd.example:8443/base");
  for (const bad of ["ftp://x", "localhost:8080", "http://user:pw@host", "not a url"]) {
    assert.throws(() => new Client({ baseUrl: bad }), TypeError, bad);
  }
  const c = new Client({ baseUrl: "http://127.0.0.1:1" });
  await assert.rejects(c.acquire("k", { ttlMs: -1 }), RangeError);
  await assert.rejects(c.acquire("k", { ttlMs: Number.NaN }), RangeError);
  await assert.rejects(c.semaphores.acquire("k", { limit: 2, waitMs: -5 }), RangeError);
  assert.throws(() => c.observe("k", { timeoutMs: 0 }), RangeError);
});
