// Sessions against a real lockd: one keep-alive for many grants, what
// ends them, and how a loss shows. The cases of the Python client's
// tests/test_sessions.py, and withSession's.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { inspect } from "node:util";
import * as lockd from "lockd-client";
import { Lease, Session, type Client, type SessionInfo } from "lockd-client";
import * as h from "./harness.js";

// Slack for a loss or a lapse to show, on a busy machine.
const SLACK = 300;

describe("sessions", () => {
  test("create, renew, info, end", async () => {
    const rec = h.recordingFetch();
    const c = h.client(undefined, { fetch: rec.fetch });
    const key = h.unique("session-life");
    // A TTL a busy machine's scheduling cannot eat: the session renews
    // every ttl/3, and three renewals are waited for, not slept for.
    const ttl = 1500;
    const session = await c.session({ ttlMs: ttl, owner: "ts-session" });
    assert.deepEqual([session.ttlMs, session.owner], [ttl, "ts-session"]);
    assert.match(session.id, /^[A-Za-z0-9_-]{32}$/);
    for (const text of shown(session)) {
      assert.ok(!text.includes(session.id), text);
    }
    assert.equal(String(session), `Session(owner="ts-session" ttlMs=${ttl} live)`);
    assert.deepEqual((await session.info()).holds, []);

    const lease = await c.acquire(key, { session, owner: "ts-session" });
    assert.equal(lease.session, session);
    assert.deepEqual(session.leases, [lease]);
    assert.match(String(lease), / held in a session\)$/);
    const info = await session.info();
    assert.ok(!("session" in info));
    assert.deepEqual([info.owner, info.ttl_ms, info.holds], ["ts-session", ttl, [{ kind: "lock", key }]]);

    const before = rec.seen.length;
    // Past a TTL: only the session's renewals keep the lock.
    const started = Date.now();
    while (session.renewals < 3 && Date.now() - started < 20_000) await h.delay(50);
    const elapsed = Date.now() - started;
    assert.ok(session.renewals >= 3, `${session.renewals} renewals in ${elapsed} ms`);
    // Every ttl/3, by the session alone: the lease has no renewer of its own.
    const sent = rec.seen.slice(before);
    assert.ok(!sent.some((r) => r.startsWith("POST /v1/locks/")), `a lease in a session renewed itself: ${sent.join(", ")}`);
    const renews = sent.filter((r) => /^POST \/v1\/sessions\/[^/]+\/renew$/.test(r)).length;
    assert.ok(renews >= 3 && renews <= Math.ceil(elapsed / (ttl / 3)) + 3, `${renews} renewals of the session in ${elapsed} ms at ttl/3 = ${ttl / 3} ms`);
    assert.equal(lease.renewals, 0);
    assert.equal((await c.state(key)).fence, lease.fence);
    assert.equal(lease.lost, false, String(lease.error));
    let renewals = session.renewals;
    const answer = await session.renew();
    assert.ok(!("session" in answer));
    assert.deepEqual(answer.holds, [{ kind: "lock", key }]);
    assert.ok(session.renewals > renewals);
    // A lease in a session is renewed by renewing its session.
    renewals = session.renewals;
    await lease.renew();
    assert.ok(session.renewals > renewals);

    const ended = await session.end();
    assert.ok(ended !== undefined && !("session" in ended));
    assert.deepEqual(ended.holds, [{ kind: "lock", key }]);
    assert.equal(await session.end(), undefined, "a second end asks nothing");
    assert.equal(String(session), `Session(owner="ts-session" ttlMs=${ttl} ended)`);
    await assert.rejects(c.state(key), lockd.NotFound);
    const newest = (await c.history(key, { limit: 1 })).events[0]!;
    assert.deepEqual([newest.type, newest.actor, newest.fence], ["released", "session", lease.fence]);
    // Ended, not lost: the lease is released, and its release asks nothing.
    assert.equal(session.lost || lease.lost, false);
    assert.equal(session.signal.aborted || lease.signal.aborted, false);
    assert.equal(lease.released, true);
    assert.equal(await lease.release(), undefined);
    const err = await c.sessions.get(session.id).catch((e: unknown) => e);
    assert.ok(err instanceof lockd.SessionLost);
    assert.deepEqual([err.status, err.code], [404, "session_not_found"]);
  });

  test("grants of each kind end with the session, whose end serves their waiters at once", async () => {
    const c = h.client();
    const other = h.client(h.url2());
    const [key, shared, name, election] = ["s-lock", "s-shared", "s-sem", "s-election"].map(h.unique) as [string, string, string, string];
    let leases: Lease[] = [];
    let waiting: Promise<{ lease: Lease; at: number }> | undefined;
    await c.withSession({ ttlMs: 600 }, async (session, signal) => {
      const lock = await c.acquire(key, { session });
      const reader = await c.acquire(shared, { mode: "shared", session });
      const permit = await c.semaphores.acquire(name, { limit: 3, session });
      const lead = await c.elections.campaign(election, { session, candidate: "ts-session", waitMs: 5000 });
      leases = [lock, reader, permit, lead];
      // Through the other server, a waiter for the lock.
      waiting = other.acquire(key, { ttlMs: 5000, waitMs: 10_000, owner: "waiter" }).then((lease) => ({ lease, at: performance.now() }));
      await h.eventually(async () => (await other.state(key)).waiters === 1, "the waiter queued");
      await h.delay(1000); // past the TTL
      assert.equal((await other.state(key)).fence, lock.fence);
      assert.equal((await other.state(shared)).holders[0]!.fence, reader.fence);
      assert.equal((await other.semaphores.state(name)).holders[0]!.fence, permit.fence);
      assert.equal((await other.leader(election)).term, lead.term);
      assert.deepEqual(
        sortedHolds(await session.info()),
        [
          ["election", election],
          ["lock", key],
          ["lock", shared],
          ["semaphore", name],
        ].sort(),
      );
      assert.equal(signal.aborted, false);
    });
    const ended = performance.now();
    const got = await h.within(waiting!, 10_000, "the waiter");
    // The end served the waiter at once.
    assert.ok(got.at - ended <= SLACK, `the waiter was granted ${(got.at - ended).toFixed(0)} ms after the end`);
    const [lock, reader, permit, lead] = leases as [Lease, Lease, Lease, Lease];
    assert.ok(got.lease.fence > lock.fence);
    await got.lease.release();
    await assert.rejects(other.state(key), lockd.NotFound);
    await assert.rejects(other.state(shared), lockd.NotFound);
    await assert.rejects(other.semaphores.state(name), lockd.NotFound);
    await assert.rejects(other.leader(election), lockd.NotFound);
    const ends = [
      (await other.history(key)).events.find((e) => e.fence === lock.fence)!,
      (await other.history(shared, { limit: 1 })).events[0]!,
      (await other.semaphores.history(name, { limit: 1 })).events[0]!,
      (await other.electionHistory(election, { limit: 1 })).events[0]!,
    ];
    for (const e of ends) {
      assert.deepEqual([e.type, e.actor], ["released", "session"], JSON.stringify(e));
    }
    for (const lease of [lock, reader, permit, lead]) {
      assert.equal(lease.lost, false, String(lease.error));
      assert.equal(lease.released, true);
    }
  });

  test("a lease released on its own leaves the session", async () => {
    const c = h.client();
    const key = h.unique("s-own");
    const kept = h.unique("s-kept");
    let own: Lease | undefined;
    let held: Lease | undefined;
    await c.withSession({ ttlMs: 600 }, async (session) => {
      held = await c.acquire(kept, { session });
      await c.withLock(key, { session }, async (_signal, lease) => {
        own = lease;
        assert.equal((await c.state(key)).fence, lease.fence);
      });
      // Released by its holder at the end of its callback, at once.
      await assert.rejects(c.state(key), lockd.NotFound);
      const newest = (await c.history(key, { limit: 1 })).events[0]!;
      assert.equal(newest.type, "released");
      assert.notEqual(newest.actor, "session");
      assert.deepEqual(session.leases, [held]);
      // The session's list forgets it at a renewal; the other grant stays.
      await h.eventually(
        async () => (await session.info()).holds.map((x) => x.key).join() === kept,
        "the released grant off the list",
        2000,
      );
      assert.equal(own!.lost || held.lost || session.lost, false);
    });
    assert.equal(own!.lost || held!.lost, false);
  });

  test("ended elsewhere: the session and its leases are lost", async () => {
    const rec = h.recordingFetch();
    const c = h.client(undefined, { fetch: rec.fetch });
    const key = h.unique("s-elsewhere");
    const ttl = 900;
    const sessionLosses: lockd.SessionLost[] = [];
    const leaseLosses: lockd.LeaseLost[] = [];
    let session: Session | undefined;
    let lease: Lease | undefined;
    let outer: AbortSignal | undefined;
    const err = await c
      .withSession({ ttlMs: ttl, onLost: (_s, e) => sessionLosses.push(e) }, async (s, signal) => {
        session = s;
        outer = signal;
        // Leaving the lease's callback rejects too.
        const leaseErr = await c
          .withLock(key, { session: s, onLost: (_l, e) => leaseLosses.push(e) }, async (leaseSignal, l) => {
            lease = l;
            const ended = await c.sessions.end(s.id); // as another process with the id would
            const began = performance.now();
            assert.deepEqual(ended.holds, [{ kind: "lock", key }]);
            const at = await h.within(h.aborted(signal), ttl / 3 + SLACK, "the end was not noticed at the next renewal");
            assert.ok(at - began <= ttl / 3 + SLACK, `noticed after ${(at - began).toFixed(0)} ms`);
            assert.ok(leaseSignal.aborted);
            assert.ok(l.lost);
          })
          .catch((e: unknown) => e);
        assert.ok(leaseErr instanceof lockd.SessionLost, String(leaseErr));
        // Lost: an acquire in it rejects with its loss without asking.
        const sent = rec.seen.length;
        await assert.rejects(c.acquire(h.unique("s-after"), { session: s }), lockd.SessionLost);
        assert.equal(rec.seen.length, sent, "an acquire in a lost session was sent");
      })
      .catch((e: unknown) => e);
    assert.ok(err instanceof lockd.SessionLost, String(err));
    assert.equal(err, session!.error);
    assert.deepEqual([err.status, err.code], [404, "session_not_found"]);
    assert.ok(err instanceof lockd.LeaseLost);
    assert.ok(err instanceof lockd.NotFound);
    assert.equal(session!.signal.reason, err);
    assert.equal(outer!.reason, err);
    assert.ok(lease!.error instanceof lockd.SessionLost);
    assert.match(lease!.error.message, /its session was lost/);
    assert.deepEqual(leaseLosses, [lease!.error]);
    assert.deepEqual(sessionLosses, [err]);
    await assert.rejects(c.state(key), lockd.NotFound);
  });

  test("a lapsed session is lost by the client's clock, and its lock is free", async () => {
    // The session's client is cut off from lockd: its renewals stop
    // arriving, the session lapses, and the client says so by its clock.
    const network = h.cuttingFetch();
    const log = new h.Lines();
    const cutOff = h.client(undefined, { fetch: network.fetch, logger: log });
    const c = h.client();
    const key = h.unique("s-lapse");
    const ttl = 500;
    const session = await cutOff.session({ ttlMs: ttl, owner: "ts-lapse" });
    const lease = await cutOff.acquire(key, { session });
    network.cut();
    const cut = performance.now();
    const at = await h.within(h.aborted(session.signal), ttl + SLACK, "the lapse was not noticed within the TTL and slack");
    assert.ok(at - cut <= ttl + SLACK, `lost ${(at - cut).toFixed(0)} ms after the cut`);
    assert.ok(lease.lost);
    const err = session.error!;
    assert.equal(err.status, undefined);
    assert.match(err.message, /could not renew the session before it expired/);
    assert.equal(session.signal.reason, err);
    assert.throws(() => session.check(), lockd.SessionLost);
    assert.throws(() => lease.check(), lockd.SessionLost);
    await assert.rejects(session.end(), lockd.SessionLost); // lost: without asking
    await h.eventually(() => free(c, key), "the lock free after the lapse", SLACK);
    const newest = (await c.history(key, { limit: 1 })).events[0]!;
    assert.deepEqual([newest.type, newest.actor, newest.reason], ["released", "session", "session expired"]);
    await c.withLock(key, { ttlMs: 5000 }, () => undefined);
    // The id, a secret, is in no message and no log line.
    assert.ok(log.at("warn").some((l) => /session lost/.test(l.message)), log.text());
    assert.ok(log.at("info").some((l) => /renew failed/.test(l.message)), log.text());
    const texts = [log.text(), ...shown(session), ...shown(err), ...shown(lease.error), ...shown(lease)];
    for (const t of texts) {
      assert.ok(!t.includes(session.id), `the session's id in: ${t}`);
    }
  });

  test("a force-released grant in a session is lost alone", async () => {
    const c = h.client();
    const key = h.unique("s-broken");
    const kept = h.unique("s-unbroken");
    const ttl = 600;
    let held: Lease | undefined;
    await c.withSession({ ttlMs: ttl }, async (session) => {
      held = await c.acquire(kept, { session });
      const lease = await c.acquire(key, { session });
      await c.forceRelease(key, { reason: "test" });
      const broken = performance.now();
      // The session's list drops it at the renewal that finds it gone,
      // and the renewal after that says so.
      const at = await h.within(h.aborted(lease.signal), (2 * ttl) / 3 + SLACK, "the force-release was not noticed");
      assert.ok(at - broken <= (2 * ttl) / 3 + SLACK, `noticed after ${(at - broken).toFixed(0)} ms`);
      assert.ok(!(lease.error instanceof lockd.SessionLost));
      assert.ok(lease.error instanceof lockd.LeaseLost);
      await assert.rejects(lease.release(), lockd.LeaseLost);
      assert.equal(session.lost || held.lost, false);
      assert.deepEqual(session.leases, [held]);
    });
    assert.equal(held!.lost, false);
    await assert.rejects(c.state(kept), lockd.NotFound);
  });

  test("a session by its id: kept alive elsewhere, no renewer here", async () => {
    const rec = h.recordingFetch();
    const c = h.client(undefined, { fetch: rec.fetch });
    const key = h.unique("s-id");
    const created = await c.sessions.create({ ttlMs: 600, owner: "ts-by-id" });
    const id = created.session;
    assert.deepEqual([created.owner, created.ttl_ms, created.holds], ["ts-by-id", 600, []]);
    const lease = await c.acquire(key, { session: id });
    assert.equal(lease.session, undefined);
    await h.delay(400); // past ttl/3: a lease renewing itself would have
    assert.deepEqual(
      rec.seen.filter((r) => r.endsWith("/renew")),
      [],
      "a lease in a session must not renew itself",
    );
    const renewed = await c.sessions.renew(id);
    assert.deepEqual(renewed.holds, [{ kind: "lock", key }]);
    assert.ok(!("session" in renewed));
    assert.deepEqual((await c.sessions.get(id)).holds, [{ kind: "lock", key }]);
    assert.deepEqual((await c.sessions.end(id)).holds, [{ kind: "lock", key }]);
    await assert.rejects(c.state(key), lockd.NotFound);
    for (const call of [c.sessions.renew, c.sessions.end, c.sessions.get]) {
      await assert.rejects(call.call(c.sessions, id), lockd.SessionLost);
    }
    const err = await c.acquire(key, { session: id }).catch((e: unknown) => e);
    assert.ok(err instanceof lockd.SessionLost);
    assert.deepEqual([err.status, err.code], [404, "session_not_found"]);
  });

  test("manual renewal", async () => {
    const c = h.client();
    const session = await c.session({ ttlMs: 600, autoRenew: false });
    try {
      await h.delay(350);
      await session.renew();
      await h.delay(350); // past the first expiry: the renewal kept it
      assert.equal(session.renewals, 1);
      assert.deepEqual((await session.info()).holds, []);
    } finally {
      await session.end();
    }
  });

  test("bad input", async () => {
    const c = h.client();
    const key = h.unique("s-bad");
    const some = "A".repeat(32);
    await assert.rejects(c.acquire(key, { ttlMs: 5000, session: some }), TypeError);
    await assert.rejects(
      c.withLock(key, { ttlMs: 5000, session: some }, () => assert.fail("ran")),
      TypeError,
    );
    await assert.rejects(c.semaphores.acquire(key, { limit: 2, ttlMs: 5000, session: some }), TypeError);
    await assert.rejects(c.campaign(key, { ttlMs: 5000, session: some }), TypeError);
    await assert.rejects(c.acquire(key, { session: 42 as unknown as string }), TypeError);
    await assert.rejects(c.session({ ttlMs: -1 }), RangeError);
    const short = await c.session({ ttlMs: 50 }).catch((e: unknown) => e);
    assert.ok(short instanceof lockd.InvalidRequest);
    assert.equal(short.field, "ttl_ms");
    const malformed = await c.acquire(key, { session: "not-a-session" }).catch((e: unknown) => e);
    assert.ok(malformed instanceof lockd.InvalidRequest);
    assert.deepEqual([malformed.status, malformed.field], [400, "session"]);
    const permit = await c.semaphores.acquire(key, { limit: 2, session: "short" }).catch((e: unknown) => e);
    assert.ok(permit instanceof lockd.InvalidRequest);
    assert.equal(permit.field, "session");
    const read = await c.sessions.get("short").catch((e: unknown) => e);
    assert.ok(read instanceof lockd.InvalidRequest);
    assert.equal(read.field, "id");
    const unknown = "Z".repeat(32);
    for (const call of [
      () => c.sessions.get(unknown),
      () => c.acquire(key, { session: unknown }),
      () => c.semaphores.acquire(key, { limit: 2, session: unknown }),
      () => c.elections.campaign(key, { session: unknown, waitMs: 0 }),
    ]) {
      const err = await call().catch((e: unknown) => e);
      assert.ok(err instanceof lockd.SessionLost, String(err));
      assert.deepEqual([err.status, err.code], [404, "session_not_found"]);
      assert.ok(!err.message.includes(unknown), err.message);
    }
    await assert.rejects(c.state(key), lockd.NotFound);
  });
});

describe("withSession", () => {
  test("answers what the callback did, and ends the session", async () => {
    const c = h.client();
    const key = h.unique("ws-result");
    let id = "";
    const fence = await c.withSession({ ttlMs: 5000 }, async (session, signal) => {
      id = session.id;
      assert.equal(signal.aborted, false);
      return c.withLock(key, { session }, (_s, lease) => lease.fence);
    });
    assert.ok(fence > 0);
    await assert.rejects(c.sessions.get(id), lockd.SessionLost);
  });

  test("the callback's error is not replaced, and the session is ended", async () => {
    const c = h.client();
    const key = h.unique("ws-throw");
    class Boom extends Error {}
    let id = "";
    await assert.rejects(
      c.withSession({ ttlMs: 5000 }, async (session) => {
        id = session.id;
        await c.acquire(key, { session });
        throw new Boom();
      }),
      Boom,
    );
    await assert.rejects(c.state(key), lockd.NotFound); // released by the end
    await assert.rejects(c.sessions.get(id), lockd.SessionLost);

    // Lost too: still the callback's error.
    const log = new h.Lines();
    const logged = h.client(undefined, { logger: log });
    await assert.rejects(
      logged.withSession({ ttlMs: 600 }, async (session, signal) => {
        await logged.sessions.end(session.id);
        await h.within(h.aborted(signal), 600, "the loss");
        throw new Boom();
      }),
      Boom,
    );
    assert.ok(log.at("warn").some((l) => /not ended after an error in the callback/.test(l.message)), log.text());
  });

  test("the caller's signal aborts the callback's too", async () => {
    const c = h.client();
    const outer = new AbortController();
    const reason = await c.withSession({ ttlMs: 5000, signal: outer.signal }, async (session, signal) => {
      setTimeout(() => outer.abort(new Error("shutting down")), 50);
      await h.within(h.aborted(signal), 1000, "the callback's signal");
      assert.equal(session.lost, false);
      return (signal.reason as Error).message;
    });
    assert.equal(reason, "shutting down");
  });
});

describe("sessions without a server", () => {
  // A Session and a Lease on ops that answer as lockd would.
  const answer = (): SessionInfo => ({
    owner: "me",
    ttl_ms: 3000,
    created_at: "2026-01-01T00:00:00Z",
    expires_at: "2026-01-01T00:00:03Z",
    holds: [],
  });
  const sessionOps = {
    timeoutMs: 1000,
    logger: undefined,
    call: () => Promise.resolve(answer()),
    read: () => Promise.resolve(answer()),
  };
  const leaseOps = {
    timeoutMs: 1000,
    logger: undefined,
    renew: () => Promise.reject(new Error("no")),
    proclaim: () => Promise.reject(new Error("no")),
    release: () => Promise.reject(new Error("no")),
  };
  const grant = (key: string) => ({
    key,
    token: "token-secret",
    fence: 7,
    ttl_ms: 3000,
    owner: "me",
    mode: "exclusive" as const,
    count: 1,
    acquired_at: "2026-01-01T00:00:00Z",
    expires_at: "2026-01-01T00:00:03Z",
  });

  test("the id is shown by session.id alone", () => {
    const session = new Session(sessionOps, { ...answer(), session: "session-id-secret" }, performance.now(), { autoRenew: false });
    assert.equal(session.id, "session-id-secret");
    const lease = new Lease(leaseOps, "lock", grant("k"), performance.now(), { session });
    assert.equal(String(lease), 'Lease(lock "k" fence=7 owner="me" held in a session)');
    for (const text of [...shown(session), ...shown(lease), JSON.stringify(Object.entries(lease))]) {
      assert.ok(!text.includes("session-id-secret"), text);
    }
    assert.deepEqual(JSON.parse(JSON.stringify(session)), { owner: "me", ttl_ms: 3000, lost: false, ended: false });
  });

  test("a lease that joins after the end is released; after a loss, lost", async () => {
    const ended = new Session(sessionOps, { ...answer(), session: "a" }, performance.now(), { autoRenew: false });
    await ended.end();
    const late = new Lease(leaseOps, "lock", grant("late"), performance.now(), { session: ended });
    ended._attach(late);
    assert.deepEqual([late.released, late.lost], [true, false]);

    const gone = new Session(sessionOps, { ...answer(), session: "b" }, performance.now(), { autoRenew: false });
    const loss = new lockd.SessionLost("gone", { status: 404 });
    gone._lose(loss);
    const after = new Lease(leaseOps, "lock", grant("after"), performance.now(), { session: gone });
    gone._attach(after);
    assert.ok(after.error instanceof lockd.SessionLost);
    assert.equal(after.signal.reason, after.error);
    assert.match(after.error.message, /after: its session was lost: gone/);
    assert.deepEqual(gone.leases, []);
  });
});

/** shown is what a value shows of itself: String, util.inspect, JSON.stringify. */
function shown(v: unknown): string[] {
  return [String(v), inspect(v, { showHidden: true, depth: 6 }), JSON.stringify(v) ?? ""];
}

function sortedHolds(info: SessionInfo): string[][] {
  return info.holds.map((x) => [x.kind, x.key]).sort();
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
