"""Errors and pieces that need no server: the problem table against the contract, Retry-After, backoff, reprs."""

from __future__ import annotations

import email.utils
import re
import time
import unittest
from typing import List

import harness
from harness import lockd
from lockd import errors
from lockd._http import backoff


def contract_codes() -> List[str]:
    """contract_codes are the problem codes of api/openapi.yaml (Problem.code's enum)."""
    text = (harness.REPO_DIR / "api" / "openapi.yaml").read_text(encoding="utf-8")
    m = re.search(r"\n    Problem:\n(?:.*\n)*?        code:\n          type: string\n          enum: \[([^\]]*)\]", text)
    if m is None:
        raise AssertionError("api/openapi.yaml: no enum of Problem.code found; update this test's pattern")
    return [c.strip() for c in m.group(1).split(",")]


class ProblemTable(unittest.TestCase):
    def test_every_code_of_the_contract_has_its_class(self) -> None:
        codes = contract_codes()
        self.assertIn("lock_held", codes)
        self.assertEqual(sorted(errors.PROBLEM_CLASSES), sorted(codes))
        classes = set(errors.PROBLEM_CLASSES.values())
        self.assertEqual(len(classes), len(codes), "two codes share a class")
        for code, cls in errors.PROBLEM_CLASSES.items():
            self.assertTrue(issubclass(cls, lockd.LockdError))
            self.assertEqual(cls.CODE, code)
            self.assertIs(getattr(lockd, cls.__name__), cls, f"lockd.{cls.__name__} is not exported")
            err = errors.error_for(409, {"code": code, "detail": "d"}, None)
            self.assertIs(type(err), cls)

    def test_error_for(self) -> None:
        err = errors.error_for(
            409,
            {"code": "lock_held", "detail": "k is held by w for 1500 ms more", "holder": "w", "remaining_ms": 1500},
            2.0,
        )
        self.assertIsInstance(err, lockd.LockHeld)
        self.assertEqual((err.status, err.code, err.holder, err.remaining, err.retry_after), (409, "lock_held", "w", 1.5, 2.0))
        self.assertEqual(str(err), "k is held by w for 1500 ms more (409 lock_held)")

        queued = errors.error_for(409, {"code": "queued", "detail": "d", "waiters": 2, "next": {"owner": "b"}}, 1.0)
        self.assertIsInstance(queued, lockd.Queued)
        self.assertIsInstance(queued, lockd.NotGranted)
        self.assertEqual((queued.waiters, queued.next), (2, {"owner": "b"}))

        # Unknown codes and bodies that are not problems fall back on the status.
        newer = errors.error_for(409, {"code": "some_new_code", "detail": "d"}, None)
        self.assertIs(type(newer), lockd.LockdError)
        self.assertEqual(newer.code, "some_new_code")
        proxy = errors.error_for(502, {}, None)
        self.assertIs(type(proxy), lockd.Unavailable)
        self.assertEqual(proxy.detail, "Bad Gateway")
        self.assertIsInstance(errors.error_for(503, {"code": "backend_recovering", "detail": "d"}, 30.0), lockd.Unavailable)
        self.assertIsInstance(errors.error_for(500, {"code": "internal", "detail": "d"}, None), lockd.Unavailable)
        self.assertIs(type(errors.error_for(404, {}, None)), lockd.NotFound)

        # A session gone is its leases lost, and a 404.
        gone = errors.error_for(404, {"code": "session_not_found", "detail": "the session ended or lapsed"}, None)
        self.assertIs(type(gone), lockd.SessionLost)
        self.assertIsInstance(gone, lockd.LeaseLost)
        self.assertIsInstance(gone, lockd.NotFound)
        self.assertEqual(str(gone), "the session ended or lapsed (404 session_not_found)")

    def test_retry_after(self) -> None:
        self.assertEqual(errors.parse_retry_after("3"), 3.0)
        self.assertIsNone(errors.parse_retry_after(None))
        self.assertIsNone(errors.parse_retry_after("soon"))
        date = email.utils.formatdate(time.time() + 30, usegmt=True)
        self.assertTrue(25 < errors.parse_retry_after(date) <= 30)
        past = email.utils.formatdate(time.time() - 30, usegmt=True)
        self.assertEqual(errors.parse_retry_after(past), 0.0)

    def test_backoff(self) -> None:
        for attempt in range(30):
            d = backoff(attempt, 0.1, 5.0, None)
            ceiling = min(0.1 * 2**attempt, 5.0)
            self.assertTrue(ceiling / 2 <= d <= ceiling, (attempt, d))
        self.assertEqual(backoff(0, 0.1, 5.0, 7.0), 7.0)
        # Jitter: clients that failed together do not retry together.
        self.assertGreater(len({backoff(3, 0.1, 5.0, None) for _ in range(20)}), 1)


class Offline(unittest.TestCase):
    def test_reprs_hide_token_and_api_key(self) -> None:
        c = lockd.Client("http://127.0.0.1:1", api_key="api-key-secret")
        self.assertEqual(repr(c), "lockd.Client('http://127.0.0.1:1', api_key=<set>)")
        answer = {"key": "k", "token": "token-secret", "fence": 7, "ttl_ms": 3000, "owner": "me", "mode": "exclusive"}
        lease = lockd.Lease(c._ops, "lock", answer, time.monotonic(), auto_renew=False)
        self.assertEqual(lease.token, "token-secret")
        for text in (repr(lease), str(lease), repr(lease.info), repr(vars(lease).get("_info"))):
            self.assertNotIn("token-secret", text)
        self.assertNotIn("api-key-secret", repr(vars(c)))
        lease.abandon()

        session_answer = {
            "session": "session-id-secret", "owner": "me", "ttl_ms": 3000,
            "created_at": "2026-01-01T00:00:00Z", "expires_at": "2026-01-01T00:00:03Z", "holds": [],
        }
        session = lockd.Session(c._ops, session_answer, time.monotonic(), auto_renew=False)
        self.assertEqual(session.id, "session-id-secret")
        in_session = lockd.Lease(c._ops, "lock", answer, time.monotonic(), session=session)
        texts = (repr(session), str(session), repr(vars(session).get("_info")), repr(in_session), repr(in_session.info))
        for text in texts:
            self.assertNotIn("session-id-secret", text)
        self.assertEqual(repr(session), "<lockd.Session owner='me' ttl=3 live>")
        self.assertIsNone(in_session._thread)

    def test_urls(self) -> None:
        self.assertEqual(lockd.Client("https://lockd.example:8443/base/").url, "https://lockd.example:8443/base")
        for bad in ("ftp://x", "localhost:8080", "http://user:pw@host"):
            with self.assertRaises(ValueError):
                lockd.Client(bad)
        with self.assertRaises(ValueError):
            lockd.Client("http://127.0.0.1:1").acquire("k", ttl=-1)


if __name__ == "__main__":
    unittest.main()
