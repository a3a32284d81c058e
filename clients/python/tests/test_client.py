"""The Python client against a real lockd: what the shared scenarios do not cover."""

from __future__ import annotations

import logging
import threading
import time
import unittest
from typing import List, Optional, Tuple

import harness
from harness import lockd


class Locks(unittest.TestCase):
    def test_explicit_acquire_renew_release(self) -> None:
        c = harness.client()
        key = harness.unique("explicit")
        lease = c.acquire(key, ttl=5, owner="py-explicit", auto_renew=False)
        self.assertEqual((lease.key, lease.kind, lease.owner, lease.mode, lease.limit), (key, "lock", "py-explicit", "exclusive", None))
        self.assertEqual(lease.ttl, 5.0)
        self.assertFalse(lease.replayed)
        renewed = c.renew(key, lease.token, ttl=10)
        self.assertEqual((renewed["fence"], renewed["ttl_ms"]), (lease.fence, 10000))
        lease.renew()
        self.assertEqual(lease.renewals, 1)
        self.assertEqual(lease.info["ttl_ms"], 5000)
        self.assertEqual(c.release(key, lease.token), {"key": key, "released": True, "count": 0})
        # The token is no longer the live one: the lease is lost, and says why.
        with self.assertRaises(lockd.LeaseNotFound) as ctx:
            c.renew(key, lease.token)
        self.assertIsInstance(ctx.exception, lockd.LeaseLost)
        self.assertIsInstance(ctx.exception, lockd.NotFound)
        self.assertEqual((ctx.exception.status, ctx.exception.code), (404, "not_found"))
        with self.assertRaises(lockd.LeaseLost):
            lease.release()
        self.assertTrue(lease.lost.is_set())

    def test_request_release_reaches_the_holder(self) -> None:
        c = harness.client()
        key = harness.unique("step-aside")
        lease = c.acquire(key, ttl=0.6, owner="holder")
        calls: List[dict] = []
        lease.on_release_request = lambda _lease, request: calls.append(request)
        try:
            asked = c.request_release(key, by="deploy-42", reason="the deploy needs it")
            self.assertEqual((asked["owner"], asked["fence"]), ("holder", lease.fence))
            # The renewer learns it on its next renewal, every ttl/3.
            self.assertTrue(lease.release_requested.wait(10), "the lease did not learn of the request")
            request = lease.release_request
            assert request is not None
            self.assertEqual((request["by"], request["reason"], request["at"]), ("deploy-42", "the deploy needs it", asked["requested_at"]))
            # Later renewals answer the same request: one call.
            seen = lease.renewals
            while lease.renewals < seen + 2:
                time.sleep(0.05)
            self.assertEqual(len(calls), 1, calls)
            self.assertFalse(lease.lost.is_set())
        finally:
            lease.release()
        with self.assertRaises(lockd.NotFound):
            c.request_release(key)
        with c.lock(key, mode="shared"):
            with self.assertRaises(lockd.NotExclusive) as ctx:
                c.request_release(key)
            self.assertEqual((ctx.exception.status, ctx.exception.code), (409, "not_exclusive"))

    def test_request_release_reaches_a_holder_in_a_session(self) -> None:
        c = harness.client()
        key = harness.unique("step-aside-session")
        calls: List[dict] = []
        with c.session(ttl=0.6, owner="holder") as session:
            lease = c.acquire(key, owner="holder", session=session)
            lease.on_release_request = lambda _lease, request: calls.append(request)
            asked = c.request_release(key, by="ops", reason="rerun")
            self.assertEqual(asked["fence"], lease.fence)
            # No renewer of its own: the session's renewal, every ttl/3, tells it.
            self.assertTrue(lease.release_requested.wait(10), "the lease did not learn of the request from its session")
            request = lease.release_request
            assert request is not None
            self.assertEqual((request["by"], request["reason"], request["at"]), ("ops", "rerun", asked["requested_at"]))
            # Later renewals answer the same request: one call; a newer request is another.
            seen = session.renewals
            while session.renewals < seen + 2:
                session.check()
                time.sleep(0.05)
            self.assertEqual(len(calls), 1, calls)
            again = c.request_release(key, by="ops", reason="again")
            seen = session.renewals
            while len(calls) < 2 and session.renewals < seen + 3:
                session.check()
                time.sleep(0.05)
            self.assertEqual(len(calls), 2, calls)
            self.assertEqual((calls[1]["reason"], calls[1]["at"]), ("again", again["requested_at"]))
            self.assertEqual(lease.release_request, calls[1])
            self.assertFalse(lease.lost.is_set())

    def test_held_names_holder_and_time_left(self) -> None:
        c = harness.client()
        key = harness.unique("held")
        with c.lock(key, ttl=20, owner="first"):
            began = time.monotonic()
            with self.assertRaises(lockd.LockHeld) as ctx:
                c.acquire(key, wait=0.2, owner="second")
            self.assertGreaterEqual(time.monotonic() - began, 0.2, "the server did not wait")
        err = ctx.exception
        self.assertIsInstance(err, lockd.NotGranted)
        self.assertEqual((err.status, err.code, err.holder), (409, "lock_held", "first"))
        self.assertTrue(0 < err.remaining <= 20, err.remaining)
        self.assertTrue(err.retry_after is not None and 0 < err.retry_after <= 20, err.retry_after)
        self.assertIn("first", str(err))

    def test_lock_delay_holds_the_key_off_after_expiry(self) -> None:
        c = harness.client()
        key = harness.unique("delay")
        c.acquire(key, ttl=0.2, lock_delay=1.0, auto_renew=False)
        time.sleep(0.3)
        with self.assertRaises(lockd.LockDelay) as ctx:
            c.acquire(key, ttl=10)
        err = ctx.exception
        self.assertIsInstance(err, lockd.NotGranted)
        self.assertEqual((err.status, err.code), (409, "lock_delay"))
        self.assertTrue(0 < err.remaining <= 1.0, err.remaining)
        with c.lock(key, ttl=10, wait=3):  # waits the delay out
            pass

    def test_min_hold_keeps_the_key_after_an_early_release(self) -> None:
        c = harness.client()
        key = harness.unique("minhold")
        with c.lock(key, ttl=60, min_hold=1.2):
            pass  # done at once: the window keeps the key
        with self.assertRaises(lockd.MinHold) as ctx:
            c.acquire(key, ttl=10)
        err = ctx.exception
        self.assertIsInstance(err, lockd.NotGranted)
        self.assertEqual((err.status, err.code), (409, "min_hold"))
        self.assertTrue(0 < err.remaining <= 1.2, err.remaining)
        self.assertTrue(err.retry_after is not None and 0 < err.retry_after <= 2, err.retry_after)
        state = c.state(key)
        self.assertEqual((state["count"], state["holders"]), (0, []))
        self.assertIn("min_hold_until", state)
        with c.lock(key, ttl=10, wait=5):  # granted when the window ends
            pass

    def test_wait_is_granted_on_release(self) -> None:
        c = harness.client()
        key = harness.unique("wait")
        first = c.acquire(key, ttl=10)
        threading.Timer(0.3, first.release).start()
        with c.lock(key, ttl=10, wait=5) as second:
            self.assertGreater(second.fence, first.fence)

    def test_shared_holds(self) -> None:
        c = harness.client()
        key = harness.unique("shared")
        with c.lock(key, mode="shared", owner="reader-1") as r1, c.lock(key, mode="shared", owner="reader-2") as r2:
            self.assertEqual((r1.mode, r2.mode), ("shared", "shared"))
            self.assertNotEqual(r1.fence, r2.fence)
            state = c.state(key)
            self.assertEqual(state["mode"], "shared")
            self.assertEqual(sorted(h["owner"] for h in state["holders"]), ["reader-1", "reader-2"])
            with self.assertRaises(lockd.LockHeld):
                c.acquire(key, owner="writer")

    def test_idempotent_retry_gets_the_same_lease(self) -> None:
        # The first answer is lost after lockd granted the lease; the retry
        # carries the same Idempotency-Key and gets that lease back, not a
        # 409 from a lease held by itself.
        proxy = harness.LosingProxy(harness.url(), lose=1)
        self.addCleanup(proxy.close)
        c = harness.client(proxy.url)
        key = harness.unique("idem")
        with self.assertLogs("lockd", level="WARNING"):
            lease = c.acquire(key, ttl=10, auto_renew=False)
        self.addCleanup(lease.release)
        self.assertTrue(lease.replayed)
        keys = [h.get("Idempotency-Key") for h in proxy.seen]
        self.assertEqual(len(keys), 2)
        self.assertIsNotNone(keys[0])
        self.assertEqual(keys[0], keys[1])
        state = harness.client().state(key)
        self.assertEqual((len(state["holders"]), state["count"], state["fence"]), (1, 1, lease.fence))
        # Another call is another Idempotency-Key: that one is held.
        with self.assertRaises(lockd.LockHeld):
            c.acquire(key, ttl=10)
        self.assertNotEqual(proxy.seen[-1].get("Idempotency-Key"), keys[0])

    def test_lost_when_renewals_fail_until_expiry(self) -> None:
        c = harness.client()
        key = harness.unique("expiry")
        lease = c.acquire(key, ttl=0.6)
        harness.pause_redis(1500)
        began = time.monotonic()
        self.assertTrue(lease.lost.wait(2), "the lease outlived its TTL without a renewal")
        # Lost by the client's clock: at most a TTL after the last renewal.
        self.assertLess(time.monotonic() - began, 0.6 + 0.5)
        self.assertIsNone(lease.error.status)
        self.assertIn("could not renew before the lease expired", str(lease.error))
        with self.assertRaises(lockd.LeaseLost):
            lease.check()
        # Let the pause end before the next test.
        harness.eventually(lambda: _answers(c), within=3, what="Redis back")

    def test_body_exception_is_not_masked_by_a_lost_lease(self) -> None:
        c = harness.client()
        key = harness.unique("mask")

        class Boom(Exception):
            pass

        with self.assertRaises(Boom):
            with c.lock(key, ttl=10):
                c.force_release(key)
                raise Boom()

    def test_lost_lease_raises_on_exit(self) -> None:
        c = harness.client()
        key = harness.unique("exit")
        with self.assertRaises(lockd.LeaseLost):
            with c.lock(key, ttl=10):
                c.force_release(key)

    def test_on_lost_callback_failure_is_logged(self) -> None:
        c = harness.client()
        key = harness.unique("callback")

        def broken(lease: lockd.Lease, err: lockd.LeaseLost) -> None:
            raise RuntimeError("callback bug")

        lease = c.acquire(key, ttl=0.3, on_lost=broken)
        with self.assertLogs("lockd", level="ERROR") as logs:
            c.force_release(key)
            self.assertTrue(lease.lost.wait(1))
            harness.eventually(lambda: any("on_lost" in r.getMessage() for r in logs.records), within=1, what="logged")

    def test_list_history_force_release_by_fence(self) -> None:
        c = harness.client()
        prefix = harness.unique("list") + ":"
        a = c.acquire(prefix + "a", ttl=10, auto_renew=False)
        b = c.acquire(prefix + "b", ttl=10, auto_renew=False)
        page = c.list(prefix=prefix, limit=1)
        keys = [s["key"] for s in page["locks"]]
        while page.get("next_cursor"):
            page = c.list(prefix=prefix, limit=1, cursor=page["next_cursor"])
            keys += [s["key"] for s in page["locks"]]
        self.assertEqual(sorted(keys), [prefix + "a", prefix + "b"])
        with self.assertRaises(lockd.LeaseLost):
            c.force_release(prefix + "a", fence=a.fence + 1)
        broken = c.force_release(prefix + "a", fence=a.fence, reason="test")
        self.assertEqual((broken["released"], broken["fence"]), (True, a.fence))
        events = c.history(prefix + "a", limit=1)["events"]
        self.assertEqual((events[0]["type"], events[0]["reason"]), ("force_released", "test"))
        b.release()
        with self.assertRaises(lockd.NotFound):
            c.force_release(prefix + "b")

    def test_values_show_in_the_state(self) -> None:
        c = harness.client()
        key = harness.unique("value")
        with c.lock(key, value={"build": "42"}) as lease:
            self.assertEqual(c.state(key)["value"], {"build": "42"})
            c.renew(key, lease.token, value="draining")
            state = c.state(key)
            self.assertEqual((state["value"], state["holders"][0]["value"]), ("draining", "draining"))
        with self.assertRaises(lockd.InvalidRequest) as ctx:
            c.acquire(harness.unique("big"), value="x" * 5000)
        self.assertEqual(ctx.exception.field, "value")

    def test_invalid_request_names_the_field(self) -> None:
        c = harness.client()
        with self.assertRaises(lockd.InvalidRequest) as ctx:
            c.acquire(harness.unique("ttl"), ttl=0.01)
        self.assertEqual((ctx.exception.status, ctx.exception.field), (400, "ttl_ms"))
        with self.assertRaises(lockd.InvalidRequest):
            c.acquire("bad/key")


class Semaphores(unittest.TestCase):
    def test_permits(self) -> None:
        c = harness.client()
        name = harness.unique("permits")
        p1 = c.semaphores.acquire(name, 2, ttl=10, owner="p1")
        p2 = c.semaphores.acquire(name, 2, ttl=10, owner="p2")
        self.assertEqual((p1.kind, p1.mode, p1.limit), ("semaphore", "permit", 2))
        with self.assertRaises(lockd.NoPermits) as ctx:
            c.semaphores.acquire(name, 2, wait=0.1, owner="p3")
        self.assertEqual(ctx.exception.holder, "p1")
        self.assertIsNotNone(ctx.exception.remaining)
        self.assertIsNotNone(ctx.exception.retry_after)
        with self.assertRaises(lockd.LimitMismatch):
            c.semaphores.acquire(name, 5)
        state = c.semaphores.state(name)
        self.assertEqual((state["limit"], len(state["holders"])), (2, 2))
        listed = [s["key"] for s in c.semaphores.list(prefix=name)["semaphores"]]
        self.assertEqual(listed, [name])
        c.semaphores.renew(name, p2.token)
        c.semaphores.force_release(name, fence=p2.fence)
        with self.assertRaises(lockd.LeaseLost):
            p2.release()
        self.assertEqual(p1.release()["released"], True)
        with self.assertRaises(lockd.NotFound):
            c.semaphores.state(name)
        types = [e["type"] for e in c.semaphores.history(name)["events"]]
        self.assertEqual(types[:2], ["released", "force_released"])

    def test_semaphore_context_releases(self) -> None:
        c = harness.client()
        name = harness.unique("sem-ctx")
        with c.semaphore(name, limit=1, ttl=0.6) as permit:
            time.sleep(0.5)
            self.assertGreaterEqual(permit.renewals, 1)
            with self.assertRaises(lockd.NoPermits):
                c.semaphores.acquire(name, 1)
        with self.assertRaises(lockd.NotFound):
            c.semaphores.state(name)


class Auth(unittest.TestCase):
    def test_scopes(self) -> None:
        server = harness.env("LOCKD_AUTH_URL")
        write_key = harness.env("LOCKD_TEST_WRITE_KEY")
        read_key = harness.env("LOCKD_TEST_READ_KEY")
        key = harness.unique("auth")
        with self.assertRaises(lockd.Unauthorized) as ctx:
            lockd.Client(server).acquire(key)
        self.assertEqual(ctx.exception.status, 401)
        with self.assertRaises(lockd.Forbidden):
            lockd.Client(server, api_key=read_key).acquire(key)
        with lockd.Client(server, api_key=write_key).lock(key, ttl=5) as lease:
            self.assertEqual(lease.owner, "writer")
            state = lockd.Client(server, api_key=read_key).state(key)
            self.assertEqual(state["owner"], "writer")

    def test_secrets_stay_out_of_reprs_messages_and_logs(self) -> None:
        server = harness.env("LOCKD_AUTH_URL")
        write_key = harness.env("LOCKD_TEST_WRITE_KEY")
        wrong_key = "not-a-key-" + write_key[::-1]
        key = harness.unique("secrets")
        texts: List[str] = []
        handler = _Collect()
        logger = logging.getLogger("lockd")
        logger.addHandler(handler)
        old_level = logger.level
        logger.setLevel(logging.DEBUG)
        try:
            c = lockd.Client(server, api_key=write_key)
            texts += [repr(c), str(c)]
            try:
                lockd.Client(server, api_key=wrong_key).acquire(key)
            except lockd.Unauthorized as err:
                texts += [repr(err), str(err), repr(err.problem)]
            lease = c.acquire(key, ttl=0.3)
            token = lease.token
            texts += [repr(lease), str(lease), repr(lease.info)]
            time.sleep(0.25)
            lockd.Client(server, api_key=write_key).release(key, token)
            self.assertTrue(lease.lost.wait(1))
            texts += [repr(lease), str(lease.error), repr(lease.error)]
            try:
                lease.release()
            except lockd.LeaseLost as err:
                texts += [str(err), repr(err)]
        finally:
            logger.removeHandler(handler)
            logger.setLevel(old_level)
        texts += handler.lines
        self.assertTrue(any("lease lost" in t for t in handler.lines), handler.lines)
        for secret in (write_key, wrong_key, token):
            for t in texts:
                self.assertNotIn(secret, t)


class Retries(unittest.TestCase):
    def test_unreachable_is_retried_a_bounded_number_of_times(self) -> None:
        c = lockd.Client("http://127.0.0.1:1", retries=2, timeout=1)
        began = time.monotonic()
        with self.assertLogs("lockd", level="WARNING") as logs, self.assertRaises(lockd.Unreachable) as ctx:
            c.acquire("py:unreachable")
        self.assertIsNone(ctx.exception.status)
        self.assertEqual(len(logs.records), 2)
        self.assertLess(time.monotonic() - began, 2)

    def test_retry_for_bounds_the_time(self) -> None:
        c = lockd.Client("http://127.0.0.1:1", retries=100, retry_for=0.5)
        began = time.monotonic()
        with self.assertRaises(lockd.Unavailable), self.assertLogs("lockd", level="WARNING"):
            c.state("py:unreachable")
        self.assertLess(time.monotonic() - began, 0.5 + 0.2)


class KeepAlive(unittest.TestCase):
    """The renewal loop's deadline after a grant, without a server (issue 35)."""

    def test_grant_expiry(self) -> None:
        from lockd._keepalive import grant_expiry

        # Answered within ttl/3: from the send. Later (it waited): from the
        # answer, renewed at once.
        cases = [
            (0.002, (103.0, False)),
            (1.0, (103.0, False)),
            (1.1, (104.1, True)),
            (4.0, (107.0, True)),
        ]
        for took, want in cases:
            with self.subTest(took=took):
                expires, renew_now = grant_expiry(100.0, 100.0 + took, 3.0)
                self.assertAlmostEqual(expires, want[0])
                self.assertEqual(renew_now, want[1])

    def test_ran_out_before_a_renewal_is_not_blamed_on_the_server(self) -> None:
        from lockd._keepalive import keep_alive, ran_out

        lost: List[Tuple[Optional[lockd.LockdError], Optional[float]]] = []
        renewed: List[bool] = []
        expired = time.monotonic() - 1
        keep_alive(
            self,
            threading.Event(),
            3.0,
            lambda: expired,
            lambda: renewed.append(True),
            lockd.LeaseLost,
            lambda last, late: lost.append((last, late)),
            renew_now=True,
        )
        self.assertEqual(renewed, [], "a renewal was sent past the expiry")
        self.assertEqual(len(lost), 1)
        last, late = lost[0]
        self.assertIsNone(last)
        assert late is not None
        self.assertGreaterEqual(late, 1.0)
        self.assertIn("before a renewal could be sent: this process did not run in time", ran_out(late))


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def _answers(c: lockd.Client) -> bool:
    try:
        c.list(limit=1)
        return True
    except lockd.Unavailable:
        return False


if __name__ == "__main__":
    unittest.main()
