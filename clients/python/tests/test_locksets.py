"""Lock sets (Client.lock_many) against a real lockd."""

from __future__ import annotations

import threading
import unittest

import harness
from harness import lockd


class LockSets(unittest.TestCase):
    def test_all_or_nothing_renewed_and_released(self) -> None:
        c = harness.client()
        a, b, k = harness.unique("set-a"), harness.unique("set-b"), harness.unique("set-c")
        with c.lock(b, ttl=20, owner="single"):
            with self.assertRaises(lockd.LockHeld) as ctx:
                c.lock_many([a, b, k], ttl=5)
            self.assertEqual((ctx.exception.problem.get("key"), ctx.exception.holder), (b, "single"))
            with self.assertRaises(lockd.NotFound):
                c.state(a)
        renewed = threading.Event()
        with c.lock_many([k, a, b], ttl=0.6, owner="py-set") as s:
            self.assertEqual(s.keys, [k, a, b])
            self.assertTrue(all(f > 0 for f in s.fences.values()))
            self.assertNotIn(s.token, repr(s))
            state = c.state(a)
            self.assertEqual((state["owner"], state["set"], state["fence"]), ("py-set", 3, s.fences[a]))
            # Three renewals: the set outlives its TTL twice over.
            while s.renewals < 3:
                self.assertFalse(s.lost.wait(0.01), s.error)
            renewed.set()
        self.assertTrue(renewed.is_set())
        with self.assertRaises(lockd.NotFound):
            c.state(k)

    def test_losing_a_key_loses_the_set(self) -> None:
        c = harness.client()
        a, b = harness.unique("lose-a"), harness.unique("lose-b")
        lost = []
        s = c.lock_many([a, b], ttl=0.6, on_lost=lambda st, err: lost.append(err))
        c.force_release(b, reason="test")
        self.assertTrue(s.lost.wait(5), "the set was not lost within 5 s of losing a key")
        self.assertIsInstance(s.error, lockd.LeaseLost)
        self.assertEqual(len(lost), 1)
        with self.assertRaises(lockd.LeaseLost):
            s.release()
        with self.assertRaises(lockd.NotFound):
            c.state(a)

    def test_shared_sets_hold_together(self) -> None:
        c = harness.client()
        a, b, k = harness.unique("sh-a"), harness.unique("sh-b"), harness.unique("sh-c")
        with c.lock_many([a, b], ttl=5, mode="shared"), c.lock_many([b, k], ttl=5, mode="shared"):
            state = c.state(b)
            self.assertEqual((state["mode"], len(state["holders"]), state["set"]), ("shared", 2, 2))
            with self.assertRaises(lockd.LockHeld):
                c.lock_many([a, k])

    def test_bad_keys_name_the_field(self) -> None:
        c = harness.client()
        for keys, field in ((["x"], "keys"), (["x", "y", "x"], "keys[2]"), (["x", "-bad"], "keys[1]")):
            with self.assertRaises(lockd.InvalidRequest) as ctx:
                c.lock_many(keys)
            self.assertEqual(ctx.exception.field, field)

    def test_a_set_in_a_session(self) -> None:
        c = harness.client()
        a, b = harness.unique("sess-a"), harness.unique("sess-b")
        with c.session(ttl=0.9, owner="py-worker") as sess:
            s = c.lock_many([a, b], session=sess)
            # Past two TTLs: the session's renewals keep every key.
            while sess.renewals < 3:
                self.assertFalse(s.lost.wait(0.01), s.error)
            state = c.state(b)
            self.assertEqual((state["owner"], state["set"], state["fence"]), ("py-worker", 2, s.fences[b]))
            self.assertEqual(sorted(h["key"] for h in sess.info()["holds"]), sorted([a, b]))
            with self.assertRaises(ValueError):
                c.lock_many([a, b], ttl=5, session=sess)
        self.assertFalse(s.lost.is_set())
        for k in (a, b):
            with self.assertRaises(lockd.NotFound):
                c.state(k)
        with self.assertRaises(lockd.SessionLost):
            c.lock_many([a, b], session=sess.id)


if __name__ == "__main__":
    unittest.main()
