"""The shared scenarios of clients/scenarios.json, for the Python client.

Each test is marked with its scenario's id and reads its figures from the
scenario's entry; test_every_scenario_has_a_test checks that none is left
out.
"""

from __future__ import annotations

import importlib
import statistics
import threading
import time
import unittest
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Tuple

import harness
from harness import lockd, scenario


class Scenarios(unittest.TestCase):
    @scenario("lease-lifecycle")
    def test_lease_lifecycle(self, spec: Dict[str, Any]) -> None:
        c = harness.client()
        key = harness.unique("lifecycle")
        ttl = spec["ttl_ms"] / 1000
        with c.lock(key, ttl=ttl, owner="py-lifecycle") as lease:
            fence = lease.fence
            self.assertEqual(c.state(key)["fence"], fence)
            time.sleep(spec["hold_ms"] / 1000)
            self.assertFalse(lease.lost.is_set(), lease.error)
            self.assertGreaterEqual(lease.renewals, spec["min_renewals"])
        renewed = c.renewals(key, limit=100)["events"]
        self.assertGreaterEqual(len(renewed), spec["min_renewals"])
        self.assertEqual({e["fence"] for e in renewed}, {fence})
        # Every ttl/3: a renewal finds two thirds of the lease left. The
        # median, so that one renewal delayed by a busy machine does not
        # fail the test; renewals every ttl/2 (half left) still do.
        least = spec["ttl_ms"] * 2 / 3 - spec["slack_ms"]
        self.assertGreaterEqual(statistics.median(e["remaining_ms"] for e in renewed), least, renewed)
        with self.assertRaises(lockd.NotFound):
            c.state(key)
        events = c.history(key)["events"]
        self.assertEqual([(e["type"], e["fence"]) for e in events[:2]], [("released", fence), ("acquired", fence)])

    @scenario("value-round-trip")
    def test_value_round_trip(self, spec: Dict[str, Any]) -> None:
        c = harness.client()
        key = harness.unique("values")
        for value in spec["values"]:
            with c.lock(key, ttl=10, value=value):
                got = c.state(key)["value"]
                self.assertEqual((got, type(got)), (value, type(value)))
        with self.assertRaises(lockd.InvalidRequest) as refused:
            c.acquire(key, ttl=10, value="\ud800")
        self.assertEqual(refused.exception.field, "value")
        with self.assertRaises(lockd.NotFound):
            c.state(key)

    @scenario("lost-after-force-release")
    def test_lost_after_force_release(self, spec: Dict[str, Any]) -> None:
        c = harness.client()
        admin = harness.client()
        key = harness.unique("lost")
        ttl = spec["ttl_ms"] / 1000
        calls: List[lockd.LeaseLost] = []
        with self.assertRaises(lockd.LeaseLost):
            with c.lock(key, ttl=ttl, on_lost=lambda lease, err: calls.append(err)) as lease:
                # Just after a renewal, the next comes ttl/3 later: the
                # longest the loss can go unnoticed.
                harness.eventually(lambda: lease.renewals >= 1, within=ttl, what="a renewal")
                admin.force_release(key, reason="scenario lost-after-force-release")
                broken = time.monotonic()
                self.assertTrue(lease.lost.wait(ttl), "the loss was not noticed within the TTL")
                took = time.monotonic() - broken
                limit = ttl / 3 + spec["slack_ms"] / 1000
                self.assertLessEqual(took, limit, f"loss noticed after {took:.3f} s, want <= {limit:.3f} s")
                self.assertIsInstance(lease.error, lockd.LeaseLost)
                with self.assertRaises(lockd.LeaseLost):
                    lease.check()
            # Leaving the block raises: the work did not finish under the lock.
        self.assertEqual(len(calls), 1)
        self.assertIs(calls[0], lease.error)

    @scenario("fifo-across-servers")
    def test_fifo_across_servers(self, spec: Dict[str, Any]) -> None:
        servers = [harness.client(harness.url()), harness.client(harness.url2())]
        key = harness.unique("fifo")
        holder = servers[0].acquire(key, ttl=10, owner="holder")
        order: List[str] = []
        errors: List[BaseException] = []
        order_lock = threading.Lock()

        def wait_then_hold(c: lockd.Client, owner: str) -> None:
            try:
                with c.lock(key, ttl=10, wait=spec["wait_ms"] / 1000, owner=owner):
                    with order_lock:
                        order.append(owner)
                    time.sleep(spec["hold_ms"] / 1000)
            except BaseException as err:  # reported below, on the test's thread
                errors.append(err)

        owners = [f"waiter-{i}" for i in range(spec["waiters"])]
        threads = []
        for i, owner in enumerate(owners):
            # Alternate servers: waiter-1 waits on the other process than waiter-0.
            t = threading.Thread(target=wait_then_hold, args=(servers[(i + 1) % 2], owner), daemon=True)
            t.start()
            threads.append(t)
            # The next waiter starts only once this one is queued.
            harness.eventually(lambda: c_waiters(servers[0], key) == i + 1, what=f"{owner} queued")
        queue = [w["owner"] for w in servers[1].state(key)["queue"]]
        self.assertEqual(queue, owners)
        holder.release()
        for t in threads:
            t.join(spec["wait_ms"] / 1000)
        self.assertEqual(errors, [])
        self.assertEqual(order, owners)

    @scenario("semaphore-limit")
    def test_semaphore_limit(self, spec: Dict[str, Any]) -> None:
        servers = [harness.client(harness.url()), harness.client(harness.url2())]
        name = harness.unique("sem")
        limit = spec["limit"]
        held = 0
        most_held = 0
        most_holders = 0
        done = 0
        errors: List[BaseException] = []
        count = threading.Lock()
        stop = threading.Event()

        def work(c: lockd.Client, owner: str) -> None:
            nonlocal held, most_held, done
            try:
                with c.semaphore(name, limit=limit, ttl=10, wait=spec["wait_ms"] / 1000, owner=owner):
                    with count:
                        held += 1
                        most_held = max(most_held, held)
                    time.sleep(spec["hold_ms"] / 1000)
                    with count:
                        held -= 1
                with count:
                    done += 1
            except BaseException as err:
                errors.append(err)

        def watch() -> None:
            nonlocal most_holders
            while not stop.is_set():
                try:
                    holders = len(servers[0].semaphores.state(name)["holders"])
                except lockd.NotFound:
                    holders = 0
                most_holders = max(most_holders, holders)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        workers = [
            threading.Thread(target=work, args=(servers[i % 2], f"worker-{i}"), daemon=True)
            for i in range(spec["workers"])
        ]
        for t in workers:
            t.start()
        for t in workers:
            t.join(spec["wait_ms"] / 1000)
        stop.set()
        watcher.join()
        self.assertEqual(errors, [])
        self.assertEqual(done, spec["workers"])
        self.assertLessEqual(most_held, limit, "more workers held a permit at once than the limit")
        self.assertLessEqual(most_holders, limit, "the semaphore's state showed more holders than the limit")
        self.assertEqual(most_held, limit, "the limit was never reached: the test proves nothing")

    @scenario("ride-out-503")
    def test_ride_out_503(self, spec: Dict[str, Any]) -> None:
        c = harness.client()
        key = harness.unique("503")
        ttl = spec["ttl_ms"] / 1000
        with c.lock(key, ttl=ttl) as held:
            renewals = held.renewals
            with self.assertLogs("lockd", level="WARNING") as logs:
                harness.pause_redis(spec["pause_ms"])
                began = time.monotonic()
                lease = c.acquire(harness.unique("503-other"), ttl=5)
                took = time.monotonic() - began
            lease.release()
            retries = [r for r in logs.records if "retry" in r.getMessage()]
            self.assertTrue(retries, "the acquire never met a 503: Redis was not paused, or lockd waited it out")
            first = retries[0]
            self.assertIn("503 backend_unavailable", first.getMessage())
            # Retry-After: 1 (the 503's) is the least delay before the retry.
            delay = float(first.args[-1])
            self.assertGreaterEqual(delay, 1.0, first.getMessage())
            self.assertGreaterEqual(took, spec["pause_ms"] / 1000)
            harness.eventually(lambda: held.renewals > renewals + 1, within=ttl, what="renewals after the pause")
            self.assertFalse(held.lost.is_set(), held.error)

    @scenario("election-handover")
    def test_election_handover(self, spec: Dict[str, Any]) -> None:
        one, two = harness.client(harness.url()), harness.client(harness.url2())
        name = harness.unique("handover")
        ttl, wait, slack = spec["ttl_ms"] / 1000, spec["wait_ms"] / 1000, spec["slack_ms"] / 1000
        errors: List[BaseException] = []

        # The observer reads on its own thread, from the second server,
        # everything until it is closed.
        seen: List[Tuple[str, Dict[str, Any]]] = []
        observer = two.observe(name, timeout=wait)
        self.addCleanup(observer.close)

        def observe() -> None:
            try:
                seen.extend(observer)
            except BaseException as err:
                errors.append(err)

        reader = threading.Thread(target=observe, daemon=True)
        reader.start()
        harness.eventually(lambda: len(seen) == 1, what="the observer's first change")

        def campaign_waiting(c: lockd.Client, candidate: str) -> Tuple[threading.Thread, Dict[str, Any]]:
            """campaign_waiting campaigns on a thread; it returns once candidate waits in line."""
            got: Dict[str, Any] = {}

            def run() -> None:
                try:
                    got["lease"] = c.elections.campaign(name, ttl=ttl, wait=wait, candidate=candidate)
                    got["at"] = time.monotonic()
                except BaseException as err:
                    errors.append(err)

            t = threading.Thread(target=run, daemon=True)
            t.start()
            harness.eventually(lambda: candidates(one, name) == [candidate], what=f"{candidate} waiting in line")
            return t, got

        # A leads through the first server; B waits on the second; A resigns.
        a = one.elections.campaign(name, ttl=ttl, candidate="A")
        self.addCleanup(a.abandon)
        t, b_got = campaign_waiting(two, "B")
        self.assertEqual(one.leader(name)["leader"], "A")
        resigned = time.monotonic()
        self.assertEqual(a.release(), {"key": name, "resigned": True})
        t.join(wait)
        self.assertEqual(errors, [])
        b: lockd.Lease = b_got["lease"]
        self.addCleanup(b.abandon)
        took = b_got["at"] - resigned
        self.assertGreater(b.term, a.term)
        self.assertLessEqual(took, slack, f"B led {took:.3f} s after A resigned")

        # C waits on the first server; B's renewals stop, and its
        # leadership lapses after its TTL.
        t, c_got = campaign_waiting(one, "C")
        self.assertFalse(b.lost.is_set(), b.error)
        b.abandon()
        stopped = time.monotonic()
        t.join(wait)
        self.assertEqual(errors, [])
        c: lockd.Lease = c_got["lease"]
        took = c_got["at"] - stopped
        self.assertGreater(c.term, b.term)
        self.assertGreaterEqual(took, ttl * 2 / 3 - 0.05, f"C led {took:.3f} s after B stopped renewing: before B lapsed")
        self.assertLessEqual(took, ttl + slack, f"C led {took:.3f} s after B stopped renewing")
        self.assertEqual(one.leader(name)["leader"], "C")
        c.release()
        ended = {e["fence"]: e["type"] for e in one.election_history(name)["events"] if e["type"] in ("released", "expired")}
        self.assertEqual(ended, {a.term: "released", b.term: "expired", c.term: "released"})

        harness.eventually(lambda: len(seen) >= 7 or bool(errors), within=wait, what="the observer's seven changes")
        observer.close()
        reader.join(5)
        self.assertEqual(errors, [])
        got = [(event, change["term"], change.get("leader")) for event, change in seen]
        want = [
            ("vacant", 0, None),
            ("leader", a.term, "A"),
            ("vacant", a.term, None),
            ("leader", b.term, "B"),
            ("vacant", b.term, None),
            ("leader", c.term, "C"),
            ("vacant", c.term, None),
        ]
        self.assertEqual(got, want)

    @scenario("session-grants")
    def test_session_grants(self, spec: Dict[str, Any]) -> None:
        c = harness.client()
        key, name = harness.unique("session-lock"), harness.unique("session-sem")
        ttl, slack = spec["ttl_ms"] / 1000, spec["slack_ms"] / 1000

        # A lock and a permit in one session, held past several TTLs.
        with c.session(ttl=ttl, owner="py-session-grants") as session:
            lock = c.acquire(key, session=session)
            permit = c.semaphores.acquire(name, spec["limit"], session=session)
            time.sleep(spec["hold_ms"] / 1000)
            self.assertFalse(session.lost.is_set(), session.error)
            self.assertGreaterEqual(session.renewals, spec["min_renewals"])
            self.assertEqual(c.state(key)["fence"], lock.fence)
            self.assertEqual([h["fence"] for h in c.semaphores.state(name)["holders"]], [permit.fence])
            holds = sorted((h["kind"], h["key"]) for h in session.info()["holds"])
            self.assertEqual(holds, sorted([("lock", key), ("semaphore", name)]))
            for lease in (lock, permit):
                self.assertFalse(lease.lost.is_set(), lease.error)
        # Ended: both free at once, released by the session.
        with self.assertRaises(lockd.NotFound):
            c.state(key)
        with self.assertRaises(lockd.NotFound):
            c.semaphores.state(name)
        for events in (c.history(key, limit=1)["events"], c.semaphores.history(name, limit=1)["events"]):
            self.assertEqual((events[0]["type"], events[0]["actor"]), ("released", "session"), events)
        for lease in (lock, permit):
            self.assertFalse(lease.lost.is_set(), lease.error)

        # A second session, cut off from lockd just after a renewal: it
        # lapses, and the client notices by its own clock.
        proxy = harness.LosingProxy(harness.url(), lose=0)
        self.addCleanup(proxy.close)
        cut_off = harness.client(proxy.url)
        key = harness.unique("session-lapse")
        second = cut_off.session(ttl=ttl, owner="py-session-lapse")
        lease = cut_off.acquire(key, session=second)
        renewals = second.renewals
        harness.eventually(lambda: second.renewals > renewals, within=ttl, what="a renewal of the second session")
        proxy.cut()
        cut = time.monotonic()
        self.assertTrue(second.lost.wait(ttl + slack), "the lapse was not noticed within ttl plus slack")
        took = time.monotonic() - cut
        self.assertGreaterEqual(took, ttl * 2 / 3 - 0.05, f"lost {took:.3f} s after the cut: before the session could lapse")
        self.assertLessEqual(took, ttl + slack, f"lost {took:.3f} s after the cut")
        self.assertTrue(lease.lost.is_set())
        for lost in (second, lease):
            with self.assertRaises(lockd.SessionLost):
                lost.check()
        harness.eventually(lambda: _free(c, key), within=slack, what="the lock free after the lapse")
        newest = c.history(key, limit=1)["events"][0]
        self.assertEqual((newest["type"], newest["actor"], newest["reason"]), ("released", "session", "session expired"))

    @scenario("grant-after-wait")
    def test_grant_after_wait(self, spec: Dict[str, Any]) -> None:
        c = harness.client()
        slow = harness.client(harness.slow_url())
        key = harness.unique("grant-after-wait")
        ttl = spec["ttl_ms"] / 1000
        holder = c.acquire(key, ttl=spec["holder_ttl_ms"] / 1000, owner="py-holder")
        got: List[Any] = []

        def wait() -> None:
            start = time.monotonic()
            try:
                lease = slow.acquire(key, ttl=ttl, wait=spec["wait_ms"] / 1000, owner="py-waiter")
                got.append((lease, time.monotonic() - start))
            except BaseException as err:  # reported by the test's thread
                got.append(err)

        waiter = threading.Thread(target=wait)
        waiter.start()
        harness.eventually(lambda: c.state(key)["waiters"] == 1, within=5, what="the waiter queues")
        time.sleep(spec["hold_ms"] / 1000)  # the wait to outlast: longer than the waiter's TTL
        holder.release()
        waiter.join()
        if isinstance(got[0], BaseException):
            raise got[0]
        lease, waited = got[0]
        self.addCleanup(lease.abandon)  # stops its renewer if an assertion fails
        self.assertGreater(waited, ttl, "granted before the TTL ran out: the test proves nothing")
        lost = lease.lost.wait(spec["keep_ms"] / 1000)
        self.assertFalse(lost, f"lost after a grant that waited {waited:.3f} s: {lease.error}")
        self.assertGreaterEqual(lease.renewals, spec["min_renewals"])
        self.assertEqual(c.state(key)["fence"], lease.fence)
        lease.release()

    @scenario("wait-in-rounds")
    def test_wait_in_rounds(self, spec: Dict[str, Any]) -> None:
        c = harness.client(harness.short_wait_url())
        key = harness.unique("wait-in-rounds")
        holder = c.acquire(key, ttl=30, owner="py-holder")
        order: List[str] = []
        errors: List[BaseException] = []

        def wait(owner: str) -> None:
            try:
                lease = harness.client(harness.short_wait_url()).acquire(
                    key, ttl=10, wait=spec["wait_ms"] / 1000, owner=owner, auto_renew=False
                )
                order.append(owner)
                lease.release()
            except BaseException as err:  # reported by the test's thread
                errors.append(err)

        first = threading.Thread(target=wait, args=("py-first",))
        first.start()
        harness.eventually(lambda: c.state(key)["waiters"] == 1, within=5, what="the first waiter queues")
        time.sleep(spec["later_ms"] / 1000)
        second = threading.Thread(target=wait, args=("py-second",))
        second.start()
        harness.eventually(lambda: c.state(key)["waiters"] == 2, within=5, what="the second waiter queues")
        time.sleep(spec["hold_ms"] / 1000)  # more than one round of the first waiter
        queue = c.state(key)["queue"]
        holder.release()
        first.join()
        second.join()
        if errors:
            raise errors[0]
        self.assertEqual([w["owner"] for w in queue], ["py-first", "py-second"], queue)
        since = [datetime.fromisoformat(w["waiting_since"].replace("Z", "+00:00")) for w in queue]
        self.assertLessEqual(since[0], since[1], queue)
        self.assertEqual(order, ["py-first", "py-second"])

    def test_every_scenario_has_a_test(self) -> None:
        # Import every test module, so that a scenario test in another file
        # counts too.
        for path in sorted(Path(__file__).parent.glob("test_*.py")):
            importlib.import_module(path.stem)
        missing = sorted(set(harness.SCENARIOS) - set(harness.COVERED))
        self.assertEqual(missing, [], "scenarios of clients/scenarios.json without a Python test")


def candidates(c: lockd.Client, name: str) -> List[str]:
    try:
        return [w["candidate"] for w in c.leader(name)["candidates"]]
    except lockd.NotFound:
        return []


def _free(c: lockd.Client, key: str) -> bool:
    try:
        c.state(key)
        return False
    except lockd.NotFound:
        return True


def c_waiters(c: lockd.Client, key: str) -> int:
    try:
        return int(c.state(key)["waiters"])
    except lockd.NotFound:
        return 0
