"""Elections from the Python client against a real lockd: campaign, proclaim, observe, resign.

The hand-over between two lockd processes is the shared scenario
election-handover (test_scenarios.py).
"""

from __future__ import annotations

import threading
import time
import unittest
from typing import Any, Dict, List, Tuple

import harness
from harness import lockd
from lockd import client as client_module


class Elections(unittest.TestCase):
    def test_campaign_proclaim_observe_resign(self) -> None:
        c = harness.client()
        name = harness.unique("elect")
        with c.observe(name, timeout=5) as changes:
            # Nobody leads yet: the first change says so.
            self.assertEqual(next(changes), ("vacant", {"key": name, "term": 0}))
            with c.campaign(name, ttl=0.6, candidate="py-a", value={"addr": "10.0.0.7"}) as lead:
                term = lead.term
                self.assertEqual((lead.kind, lead.key, lead.leader, lead.owner), ("election", name, "py-a", "py-a"))
                self.assertEqual((lead.fence, lead.mode, lead.ttl), (term, "exclusive", 0.6))
                self.assertGreater(term, 0)
                self.assertEqual(lead.value, {"addr": "10.0.0.7"})
                self.assertTrue(lead.token)
                self.assertIn(f"term={term}", repr(lead))
                self.assertNotIn(lead.token, repr(lead) + repr(lead.info))

                event, change = next(changes)
                self.assertEqual(
                    (event, change["leader"], change["term"], change["value"]), ("leader", "py-a", term, {"addr": "10.0.0.7"})
                )
                self.assertNotIn("token", change)
                state = c.leader(name)
                self.assertEqual(
                    (state["leader"], state["term"], state["value"], state["candidates"]),
                    ("py-a", term, {"addr": "10.0.0.7"}, []),
                )

                draining = {"addr": "10.0.0.7", "state": "draining"}
                lead.proclaim(draining)
                event, change = next(changes)
                self.assertEqual((event, change["leader"], change["term"], change["value"]), ("proclaimed", "py-a", term, draining))
                self.assertEqual(lead.value, draining)

                # It renews itself through /renew, every ttl/3, under its term,
                # and a renewal keeps the proclaimed value.
                harness.eventually(lambda: lead.renewals >= 2, within=2, what="two renewals")
                self.assertFalse(lead.lost.is_set(), lead.error)
                self.assertEqual((lead.info["term"], lead.value), (term, draining))
                self.assertEqual(c.leader(name)["value"], draining)
            # Leaving the block resigned.
            self.assertEqual(next(changes), ("vacant", {"key": name, "term": term}))
        self.assertTrue(changes.closed)
        with self.assertRaises(lockd.NotFound):
            c.leader(name)
        events = [(e["type"], e["fence"]) for e in c.election_history(name)["events"]]
        self.assertEqual(events[0], ("released", term))
        self.assertEqual(events[-1], ("acquired", term))
        self.assertIn(("proclaimed", term), events)
        renewed = c.elections.history(name, event_type="renewed")["events"]
        self.assertGreaterEqual(len(renewed), 2)

    def test_waiting_candidate_leads_after_resign_with_a_higher_term(self) -> None:
        one, two = harness.client(), harness.client(harness.url2())
        name = harness.unique("next")
        first = one.elections.campaign(name, ttl=10, candidate="first")
        self.assertEqual(first.kind, "election")
        threading.Timer(0.3, first.release).start()
        began = time.monotonic()
        with two.campaign(name, ttl=10, wait=5, candidate="second") as second:
            self.assertGreaterEqual(time.monotonic() - began, 0.25, "led while the first still led")
            self.assertGreater(second.term, first.term)
            state = one.leader(name)
            self.assertEqual((state["leader"], state["term"]), ("second", second.term))
        types = [(e["type"], e["owner"]) for e in one.election_history(name, limit=4)["events"]]
        self.assertEqual(types, [("released", "second"), ("acquired", "second"), ("released", "first"), ("acquired", "first")])

    def test_handover_to_a_named_candidate(self) -> None:
        c = harness.client()
        name = harness.unique("handover")
        first = c.elections.campaign(name, ttl=10, candidate="first")
        led: List[str] = []

        def campaign(who: str) -> None:
            with c.campaign(name, ttl=10, wait=20, candidate=who):
                led.append(who)

        threads = []
        for who in ("second", "third"):
            threads.append(threading.Thread(target=campaign, args=(who,)))
            threads[-1].start()
            deadline = time.monotonic() + 10
            while [x["candidate"] for x in c.leader(name).get("candidates", [])][-1:] != [who]:
                self.assertLess(time.monotonic(), deadline, f"{who} not in line")
                time.sleep(0.01)
        with self.assertRaises(lockd.NotCandidate):
            first.handover("nobody")
        self.assertEqual(c.leader(name)["leader"], "first")
        self.assertEqual(first.handover("third"), {"key": name, "resigned": True})
        for t in threads:
            t.join(20)
        self.assertEqual(led, ["third", "second"])

    def test_not_granted_after_the_wait(self) -> None:
        c = harness.client()
        name = harness.unique("held")
        with c.campaign(name, ttl=10, candidate="incumbent") as lead:
            began = time.monotonic()
            with self.assertRaises(lockd.LockHeld) as ctx:
                c.elections.campaign(name, wait=0.2, candidate="challenger")
            self.assertGreaterEqual(time.monotonic() - began, 0.2, "the server did not wait")
            self.assertEqual((ctx.exception.status, ctx.exception.holder), (409, "incumbent"))
            with self.assertRaises(lockd.LockHeld):
                with c.campaign(name, wait=0):
                    self.fail("led while another leads")
            self.assertFalse(lead.lost.is_set())

    def test_stale_token_is_lease_lost(self) -> None:
        c = harness.client()
        name = harness.unique("stale")
        old = c.elections.campaign(name, ttl=10, candidate="old", auto_renew=False)
        broken = c.elections.force_release(name, fence=old.term, reason="test")
        self.assertEqual((broken["released"], broken["fence"]), (True, old.term))
        new = c.elections.campaign(name, ttl=10, candidate="new", auto_renew=False)
        self.assertGreater(new.term, old.term)
        with self.assertRaises(lockd.LeaseLost) as ctx:
            c.resign(name, old.token)
        self.assertEqual((ctx.exception.status, ctx.exception.code), (409, "lease_lost"))
        with self.assertRaises(lockd.LeaseLost):
            c.elections.renew(name, old.token)
        with self.assertRaises(lockd.LeaseLost):
            old.proclaim("still here")
        self.assertTrue(old.lost.is_set())
        with self.assertRaises(lockd.LeaseLost):
            old.check()
        self.assertEqual(c.leader(name)["leader"], "new")
        self.assertEqual(new.release(), {"key": name, "resigned": True})
        with self.assertRaises(lockd.LeaseNotFound) as nf:
            c.resign(name, new.token)
        self.assertEqual(nf.exception.status, 404)
        lock = c.acquire(harness.unique("lock"), ttl=5, auto_renew=False)
        self.addCleanup(lock.release)
        with self.assertRaises(ValueError):
            lock.proclaim("a lock has no leader")

    def test_lost_leadership_is_signalled_and_raises_on_exit(self) -> None:
        c = harness.client()
        name = harness.unique("lost")
        calls: List[lockd.LeaseLost] = []
        with self.assertRaises(lockd.LeaseLost):
            with c.campaign(name, ttl=0.6, on_lost=lambda lease, err: calls.append(err)) as lead:
                c.elections.force_release(name, reason="test")
                self.assertTrue(lead.lost.wait(1), "the loss was not noticed within the TTL")
                with self.assertRaises(lockd.LeaseLost):
                    lead.check()
        self.assertEqual(len(calls), 1)
        self.assertIs(calls[0], lead.error)

    def test_wait_none_campaigns_in_rounds(self) -> None:
        # Rounds of 0.3 s instead of a minute: the candidate campaigns
        # again after each 409 until it leads.
        self.addCleanup(setattr, client_module, "_WAIT_ROUND", client_module._WAIT_ROUND)
        client_module._WAIT_ROUND = 0.3
        proxy = harness.LosingProxy(harness.url(), lose=0)
        self.addCleanup(proxy.close)
        c = harness.client()
        name = harness.unique("rounds")
        first = c.elections.campaign(name, ttl=10, candidate="first")
        threading.Timer(1.0, first.release).start()
        with harness.client(proxy.url).campaign(name, ttl=10, candidate="patient") as lead:
            self.assertGreater(lead.term, first.term)
        rounds = len([h for h in proxy.seen if "Idempotency-Key" in h])
        self.assertGreaterEqual(rounds, 3, "it did not campaign again after a round")

    def test_wait_none_fits_its_rounds_to_the_server(self) -> None:
        # A round longer than the server's --max-wait (60 s) is answered
        # 400 wait_ms with max_ms; the rounds are then of that.
        self.addCleanup(setattr, client_module, "_WAIT_ROUND", client_module._WAIT_ROUND)
        client_module._WAIT_ROUND = 240.0
        c = harness.client()
        with c.campaign(harness.unique("fit"), ttl=10) as lead:
            self.assertGreater(lead.term, 0)

    def test_observe_timeout_and_close(self) -> None:
        c = harness.client()
        name = harness.unique("quiet")
        with c.observe(name, timeout=0.3) as changes:
            self.assertEqual(next(changes)[0], "vacant")
            began = time.monotonic()
            with self.assertRaises(TimeoutError):
                next(changes)
            took = time.monotonic() - began
            self.assertTrue(0.25 <= took < 1.5, took)
            self.assertTrue(changes.closed)
            with self.assertRaises(StopIteration):
                next(changes)

        # close() from another thread ends an iteration under way, cleanly.
        changes = c.observe(name)
        self.assertEqual(next(changes)[0], "vacant")
        got: List[Tuple[str, Dict[str, Any]]] = []
        raised: List[BaseException] = []

        def read() -> None:
            try:
                got.extend(changes)
            except BaseException as err:
                raised.append(err)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        time.sleep(0.2)
        began = time.monotonic()
        changes.close()
        reader.join(2)
        self.assertFalse(reader.is_alive(), "close() did not end the iteration")
        self.assertLess(time.monotonic() - began, 1)
        self.assertEqual((got, raised), ([], []))
        changes.close()  # again: nothing

        with self.assertRaises(ValueError):
            c.observe(name, timeout=0)
        with self.assertRaises(lockd.InvalidRequest):
            c.observe("bad/name")

    def test_scopes(self) -> None:
        server = harness.env("LOCKD_AUTH_URL")
        writer = lockd.Client(server, api_key=harness.env("LOCKD_TEST_WRITE_KEY"))
        reader = lockd.Client(server, api_key=harness.env("LOCKD_TEST_READ_KEY"))
        name = harness.unique("auth")
        with self.assertRaises(lockd.Unauthorized):
            lockd.Client(server).observe(name)
        with self.assertRaises(lockd.Forbidden):
            reader.elections.campaign(name, wait=0)
        with reader.observe(name, timeout=5) as changes:
            self.assertEqual(next(changes)[0], "vacant")
            with writer.campaign(name, ttl=5) as lead:
                self.assertEqual(lead.leader, "writer")  # the API key's name
                event, change = next(changes)
                self.assertEqual((event, change["leader"], change["term"]), ("leader", "writer", lead.term))
                self.assertEqual(reader.leader(name)["leader"], "writer")
                with self.assertRaises(lockd.Forbidden):
                    reader.resign(name, lead.token)


if __name__ == "__main__":
    unittest.main()
