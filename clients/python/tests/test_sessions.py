"""Sessions against a real lockd: one keep-alive for many grants, what ends them, and how a loss shows."""

from __future__ import annotations

import logging
import threading
import time
import unittest
from typing import Any, Dict, List

import harness
from harness import lockd

# Slack for a loss or a lapse to show, on a busy machine.
SLACK = 0.3


class Sessions(unittest.TestCase):
    def test_create_renew_info_end(self) -> None:
        c = harness.client()
        key = harness.unique("session-life")
        session = c.session(ttl=0.6, owner="py-session")
        self.assertEqual((session.ttl, session.owner), (0.6, "py-session"))
        self.assertRegex(session.id, r"^[A-Za-z0-9_-]{32}$")
        for text in (repr(session), str(session)):
            self.assertNotIn(session.id, text)
        self.assertEqual(repr(session), "<lockd.Session owner='py-session' ttl=0.6 live>")
        self.assertEqual(session.info()["holds"], [])

        lease = c.acquire(key, session=session, owner="py-session")
        self.assertIs(lease.session, session)
        self.assertIsNone(lease._thread, "a lease in a session must not renew itself")
        self.assertEqual(session.leases, [lease])
        self.assertIn("in a session", repr(lease))
        info = session.info()
        self.assertNotIn("session", info)
        self.assertEqual((info["owner"], info["ttl_ms"], info["holds"]), ("py-session", 600, [{"kind": "lock", "key": key}]))

        time.sleep(1.2)  # two TTLs: only the session's renewals keep the lock
        self.assertGreaterEqual(session.renewals, 3)
        self.assertEqual(c.state(key)["fence"], lease.fence)
        self.assertFalse(lease.lost.is_set(), lease.error)
        renewals = session.renewals
        answer = session.renew()
        self.assertNotIn("session", answer)
        self.assertEqual(answer["holds"], [{"kind": "lock", "key": key}])
        self.assertGreater(session.renewals, renewals)
        # A lease in a session is renewed by renewing its session.
        renewals = session.renewals
        lease.renew()
        self.assertGreater(session.renewals, renewals)

        ended = session.end()
        assert ended is not None
        self.assertNotIn("session", ended)
        self.assertEqual(ended["holds"], [{"kind": "lock", "key": key}])
        self.assertIsNone(session.end(), "a second end asks nothing")
        self.assertEqual(repr(session), "<lockd.Session owner='py-session' ttl=0.6 ended>")
        with self.assertRaises(lockd.NotFound):
            c.state(key)
        newest = c.history(key, limit=1)["events"][0]
        self.assertEqual((newest["type"], newest["actor"], newest["fence"]), ("released", "session", lease.fence))
        # Ended, not lost: the lease is released, and its release asks nothing.
        self.assertFalse(session.lost.is_set() or lease.lost.is_set())
        self.assertIsNone(lease.release())
        with self.assertRaises(lockd.SessionLost) as ctx:
            c.sessions.get(session.id)
        self.assertEqual((ctx.exception.status, ctx.exception.code), (404, "session_not_found"))

    def test_grants_of_each_kind_end_with_the_session(self) -> None:
        c, other = harness.client(), harness.client(harness.url2())
        key, shared, name, election = (harness.unique(n) for n in ("s-lock", "s-shared", "s-sem", "s-election"))
        got: Dict[str, Any] = {}
        errors: List[BaseException] = []

        def wait_for_the_lock() -> None:
            try:
                got["lease"] = other.acquire(key, ttl=5, wait=10, owner="waiter")
                got["at"] = time.monotonic()
            except BaseException as err:
                errors.append(err)

        with c.session(ttl=0.6) as session:
            lock = c.acquire(key, session=session)
            reader = c.acquire(shared, mode="shared", session=session)
            permit = c.semaphores.acquire(name, 3, session=session)
            lead = c.elections.campaign(election, session=session, candidate="py-session", wait=5)
            # Through the other server, a waiter for the lock.
            waiter = threading.Thread(target=wait_for_the_lock, daemon=True)
            waiter.start()
            harness.eventually(lambda: other.state(key)["waiters"] == 1, what="the waiter queued")
            time.sleep(1.0)  # past the TTL
            self.assertEqual(other.state(key)["fence"], lock.fence)
            self.assertEqual(other.state(shared)["holders"][0]["fence"], reader.fence)
            self.assertEqual(other.semaphores.state(name)["holders"][0]["fence"], permit.fence)
            self.assertEqual(other.leader(election)["term"], lead.term)
            holds = sorted((h["kind"], h["key"]) for h in session.info()["holds"])
            self.assertEqual(holds, sorted([("lock", key), ("lock", shared), ("semaphore", name), ("election", election)]))
        ended = time.monotonic()
        waiter.join(10)
        self.assertEqual(errors, [])
        # The end served the waiter at once.
        self.assertLessEqual(got["at"] - ended, SLACK)
        self.assertGreater(got["lease"].fence, lock.fence)
        got["lease"].release()
        for state in (lambda: other.state(key), lambda: other.state(shared),
                      lambda: other.semaphores.state(name), lambda: other.leader(election)):
            with self.assertRaises(lockd.NotFound):
                state()
        ends = [
            [e for e in other.history(key)["events"] if e["fence"] == lock.fence][0],
            other.history(shared, limit=1)["events"][0],
            other.semaphores.history(name, limit=1)["events"][0],
            other.election_history(election, limit=1)["events"][0],
        ]
        for e in ends:
            self.assertEqual((e["type"], e["actor"]), ("released", "session"), e)
        for lease in (lock, reader, permit, lead):
            self.assertFalse(lease.lost.is_set(), lease.error)

    def test_a_lease_released_on_its_own_leaves_the_session(self) -> None:
        c = harness.client()
        key, kept = harness.unique("s-own"), harness.unique("s-kept")
        with c.session(ttl=0.6) as session:
            held = c.acquire(kept, session=session)
            with c.lock(key, session=session) as lease:
                self.assertEqual(c.state(key)["fence"], lease.fence)
            # Released by its holder at the end of its block, at once.
            with self.assertRaises(lockd.NotFound):
                c.state(key)
            newest = c.history(key, limit=1)["events"][0]
            self.assertEqual(newest["type"], "released")
            self.assertNotEqual(newest["actor"], "session")
            self.assertEqual(session.leases, [held])
            # The session's list forgets it at a renewal; the other grant stays.
            harness.eventually(
                lambda: [h["key"] for h in session.info()["holds"]] == [kept], within=2, what="the released grant off the list"
            )
            self.assertFalse(lease.lost.is_set() or held.lost.is_set() or session.lost.is_set())
        self.assertFalse(lease.lost.is_set() or held.lost.is_set())

    def test_ended_elsewhere_loses_the_session_and_its_leases(self) -> None:
        c = harness.client()
        key = harness.unique("s-elsewhere")
        ttl = 0.9
        session_losses: List[lockd.SessionLost] = []
        lease_losses: List[lockd.LeaseLost] = []
        with self.assertRaises(lockd.SessionLost):
            with c.session(ttl=ttl, on_lost=lambda s, err: session_losses.append(err)) as session:
                with self.assertRaises(lockd.SessionLost):  # leaving the lease's block raises too
                    with c.lock(key, session=session, on_lost=lambda l, err: lease_losses.append(err)) as lease:
                        ended = c.sessions.end(session.id)  # as another process with the id would
                        began = time.monotonic()
                        self.assertEqual(ended["holds"], [{"kind": "lock", "key": key}])
                        self.assertTrue(session.lost.wait(ttl / 3 + SLACK), "the end was not noticed at the next renewal")
                        took = time.monotonic() - began
                        self.assertLessEqual(took, ttl / 3 + SLACK)
                        self.assertTrue(lease.lost.is_set())
                # Lost: an acquire in it raises its loss without asking.
                with self.assertRaises(lockd.SessionLost):
                    c.acquire(harness.unique("s-after"), session=session)
        err = session.error
        assert err is not None
        self.assertEqual((err.status, err.code), (404, "session_not_found"))
        self.assertIsInstance(err, lockd.LeaseLost)
        self.assertIsInstance(lease.error, lockd.SessionLost)
        self.assertIn("its session was lost", str(lease.error))
        self.assertEqual(lease_losses, [lease.error])  # called before the session's loss showed
        harness.eventually(lambda: len(session_losses) > 0, within=1, what="the session's on_lost called")
        self.assertEqual(session_losses, [err])
        with self.assertRaises(lockd.NotFound):
            c.state(key)

    def test_lapsed_session_is_lost_and_its_lock_free(self) -> None:
        # The session's client is cut off from lockd: its renewals stop
        # arriving, the session lapses, and the client says so by its clock.
        proxy = harness.LosingProxy(harness.url(), lose=0)
        self.addCleanup(proxy.close)
        cut_off, c = harness.client(proxy.url), harness.client()
        key = harness.unique("s-lapse")
        ttl = 0.5
        lines = _Collect()
        logger = logging.getLogger("lockd")
        logger.addHandler(lines)
        old_level = logger.level
        logger.setLevel(logging.DEBUG)
        try:
            session = cut_off.session(ttl=ttl, owner="py-lapse")
            lease = cut_off.acquire(key, session=session)
            proxy.cut()
            cut = time.monotonic()
            self.assertTrue(session.lost.wait(ttl + SLACK), "the lapse was not noticed within the TTL and slack")
            self.assertLessEqual(time.monotonic() - cut, ttl + SLACK)
            self.assertTrue(lease.lost.is_set())
        finally:
            logger.removeHandler(lines)
            logger.setLevel(old_level)
        err = session.error
        assert err is not None
        self.assertIsNone(err.status)
        self.assertIn("could not renew the session before it expired", str(err))
        for lost in (session, lease):
            with self.assertRaises(lockd.SessionLost):
                lost.check()
        with self.assertRaises(lockd.SessionLost):
            session.end()  # lost: raised without asking
        harness.eventually(lambda: _free(c, key), within=SLACK, what="the lock free after the lapse")
        newest = c.history(key, limit=1)["events"][0]
        self.assertEqual((newest["type"], newest["actor"], newest["reason"]), ("released", "session", "session expired"))
        with c.lock(key, ttl=5):
            pass
        # The id, a secret, is in no message and no log line.
        texts = lines.lines + [repr(session), str(err), repr(err), str(lease.error), repr(lease)]
        self.assertTrue(any("session lost" in t for t in lines.lines), lines.lines)
        self.assertTrue(any("renew failed" in t for t in lines.lines), lines.lines)
        for t in texts:
            self.assertNotIn(session.id, t)

    def test_force_released_grant_in_a_session_is_lost_alone(self) -> None:
        c = harness.client()
        key, kept = harness.unique("s-broken"), harness.unique("s-unbroken")
        ttl = 0.6
        with c.session(ttl=ttl) as session:
            held = c.acquire(kept, session=session)
            lease = c.acquire(key, session=session)
            c.force_release(key, reason="test")
            broken = time.monotonic()
            # The session's list drops it at the renewal that finds it
            # gone, and the renewal after that says so.
            self.assertTrue(lease.lost.wait(2 * ttl / 3 + SLACK), "the force-release was not noticed")
            self.assertLessEqual(time.monotonic() - broken, 2 * ttl / 3 + SLACK)
            self.assertNotIsInstance(lease.error, lockd.SessionLost)
            self.assertIsInstance(lease.error, lockd.LeaseLost)
            with self.assertRaises(lockd.LeaseLost):
                lease.release()
            self.assertFalse(session.lost.is_set() or held.lost.is_set())
            self.assertEqual(session.leases, [held])
        self.assertFalse(held.lost.is_set())
        with self.assertRaises(lockd.NotFound):
            c.state(kept)

    def test_a_session_by_id(self) -> None:
        # A session something else keeps alive: its id on acquire, no keep-alive here.
        c = harness.client()
        key = harness.unique("s-id")
        created = c.sessions.create(ttl=5, owner="py-by-id")
        session_id = created["session"]
        self.assertEqual((created["owner"], created["ttl_ms"], created["holds"]), ("py-by-id", 5000, []))
        lease = c.acquire(key, session=session_id)
        self.assertIsNone(lease.session)
        self.assertIsNone(lease._thread, "a lease in a session must not renew itself")
        renewed = c.sessions.renew(session_id)
        self.assertEqual(renewed["holds"], [{"kind": "lock", "key": key}])
        self.assertNotIn("session", renewed)
        self.assertEqual(c.sessions.get(session_id)["holds"], [{"kind": "lock", "key": key}])
        self.assertEqual(c.sessions.end(session_id)["holds"], [{"kind": "lock", "key": key}])
        with self.assertRaises(lockd.NotFound):
            c.state(key)
        for call in (c.sessions.renew, c.sessions.end, c.sessions.get):
            with self.assertRaises(lockd.SessionLost):
                call(session_id)
        with self.assertRaises(lockd.SessionLost) as ctx:
            c.acquire(key, session=session_id)
        self.assertEqual((ctx.exception.status, ctx.exception.code), (404, "session_not_found"))

    def test_manual_renewal(self) -> None:
        c = harness.client()
        session = c.session(ttl=0.6, auto_renew=False)
        self.addCleanup(session.end)
        time.sleep(0.35)
        session.renew()
        time.sleep(0.35)  # past the first expiry: the renewal kept it
        self.assertEqual(session.renewals, 1)
        self.assertEqual(session.info()["holds"], [])

    def test_bad_input(self) -> None:
        c = harness.client()
        key = harness.unique("s-bad")
        with self.assertRaises(ValueError):
            c.acquire(key, ttl=5, session="A" * 32)
        with self.assertRaises(ValueError):
            c.lock(key, ttl=5, session="A" * 32).__enter__()
        with self.assertRaises(TypeError):
            c.acquire(key, session=42)  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            c.session(ttl=-1)
        with self.assertRaises(lockd.InvalidRequest) as ctx:
            c.session(ttl=0.05)
        self.assertEqual(ctx.exception.field, "ttl_ms")
        with self.assertRaises(lockd.InvalidRequest) as ctx:
            c.acquire(key, session="not-a-session")
        self.assertEqual((ctx.exception.status, ctx.exception.field), (400, "session"))
        with self.assertRaises(lockd.InvalidRequest) as ctx:
            c.semaphores.acquire(key, 2, session="short")
        self.assertEqual(ctx.exception.field, "session")
        with self.assertRaises(lockd.InvalidRequest) as ctx:
            c.sessions.get("short")
        self.assertEqual(ctx.exception.field, "id")
        unknown = "Z" * 32
        for call in (lambda: c.sessions.get(unknown), lambda: c.acquire(key, session=unknown),
                     lambda: c.semaphores.acquire(key, 2, session=unknown),
                     lambda: c.elections.campaign(key, session=unknown, wait=0)):
            with self.assertRaises(lockd.SessionLost) as lost:
                call()
            self.assertEqual((lost.exception.status, lost.exception.code), (404, "session_not_found"))
            self.assertNotIn(unknown, str(lost.exception))
        with self.assertRaises(lockd.NotFound):
            c.state(key)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def _free(c: lockd.Client, key: str) -> bool:
    try:
        c.state(key)
        return False
    except lockd.NotFound:
        return True


if __name__ == "__main__":
    unittest.main()
