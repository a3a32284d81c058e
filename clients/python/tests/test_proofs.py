"""Proofs: a lease sends the latest proof the server answered with every renewal, proclaim and release."""

from __future__ import annotations

import time
import unittest
from typing import Any, Dict, List, Optional, Tuple

import harness


def tick() -> None:
    """tick lets the server's millisecond clock move on: a renewal's proof signs the expiry it sets, so two renewals within one millisecond answer the same proof."""
    time.sleep(0.002)


class Proofs(unittest.TestCase):
    def tap(self, c: Any) -> List[Tuple[str, Optional[str], Optional[str]]]:
        """tap records each renew, proclaim and release: its path's last part, the proof sent and the proof answered."""
        calls: List[Tuple[str, Optional[str], Optional[str]]] = []
        request = c._t.request

        def recording(method: str, path: str, body: Optional[Dict[str, Any]] = None, *args: Any, **kw: Any) -> Dict[str, Any]:
            answer = request(method, path, body, *args, **kw)
            op = path.rsplit("/", 1)[-1]
            if op in ("renew", "proclaim", "release", "resign"):
                calls.append((op, (body or {}).get("proof"), answer.get("proof")))
            return answer

        c._t.request = recording
        return calls

    def check_chain(self, first: Optional[str], calls: List[Tuple[str, Optional[str], Optional[str]]]) -> None:
        self.assertTrue(first, "the grant answered no proof")
        latest = first
        for op, sent, answered in calls:
            self.assertEqual(sent, latest, f"{op} sent another proof than the latest answered")
            if op not in ("release", "resign"):
                self.assertTrue(answered and answered != sent, f"{op} answered no new proof")
                latest = answered

    def test_lease_sends_its_latest_proof(self) -> None:
        c = harness.client()
        calls = self.tap(c)
        for take in (
            lambda key: c.acquire(key, ttl=10, value={"n": 1}, auto_renew=False),
            lambda key: c.semaphores.acquire(key, 2, ttl=10, auto_renew=False),
            lambda key: c.elections.campaign(key, ttl=10, auto_renew=False),
        ):
            lease = take(harness.unique("proof"))
            first = lease.proof
            tick()
            lease.renew()
            tick()
            lease.renew()
            if lease.kind == "election":
                lease.proclaim({"n": 2})
            self.assertNotIn("proof", lease.info)
            for text in (repr(lease), str(lease), repr(lease.info)):
                self.assertNotIn(lease.proof, text)
            lease.release()
            self.assertGreaterEqual(len(calls), 3)
            self.check_chain(first, calls)
            calls.clear()

    def test_the_renewer_sends_it_too(self) -> None:
        c = harness.client()
        calls = self.tap(c)
        lease = c.acquire(harness.unique("proof-renewer"), ttl=0.3)
        first = lease.proof
        deadline = time.monotonic() + 5
        while lease.renewals < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        lease.release()
        self.assertGreaterEqual(len(calls), 4)
        self.check_chain(first, calls)

    def test_lock_set_sends_its_latest_proof(self) -> None:
        c = harness.client()
        calls = self.tap(c)
        key = harness.unique("proof-set")
        lock_set = c.lock_many([key + ":1", key + ":2"], ttl=10, value={"n": 1}, auto_renew=False)
        first = lock_set.proof
        tick()
        lock_set.renew()
        tick()
        lock_set.renew()
        for text in (repr(lock_set), str(lock_set)):
            self.assertNotIn(lock_set.proof, text)
        lock_set.release()
        self.assertEqual([op for op, _, _ in calls], ["renew", "renew", "release"])
        self.check_chain(first, calls)

    def test_tokens_kept_elsewhere(self) -> None:
        c = harness.client()
        key = harness.unique("proof-token")
        lease = c.acquire(key, ttl=10, auto_renew=False)
        answer = c.renew(key, lease.token, proof=lease.proof)
        self.assertTrue(answer["proof"])
        self.assertEqual(c.renew(key, lease.token, proof="not a proof")["key"], key)
        self.assertTrue(c.release(key, lease.token, proof=answer["proof"])["released"])
        lease.abandon()


if __name__ == "__main__":
    unittest.main()
