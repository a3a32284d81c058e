"""The examples of clients/python/README.md run as written: the first (five lines), the election's and the session's."""

from __future__ import annotations

import re
import unittest
from typing import Any, Dict, List

import harness
from harness import lockd


class Readme(unittest.TestCase):
    def test_first_example_runs(self) -> None:
        text = (harness.PYTHON_DIR / "README.md").read_text(encoding="utf-8")
        m = re.search(r"```python\n(.*?)```", text, re.S)
        assert m is not None, "README.md has no python example"
        example = m.group(1)
        self.assertLessEqual(len([line for line in example.splitlines() if line.strip()]), 5)
        self.assertIn('"http://lockd:8080"', example)
        fences: List[int] = []
        scope: Dict[str, Any] = {"build_report": lambda fence: fences.append(fence)}
        exec(compile(example.replace('"http://lockd:8080"', repr(harness.url())), "README.md", "exec"), scope)
        self.assertEqual(len(fences), 1)
        with self.assertRaises(lockd.NotFound):  # released at the end of the block
            lockd.Client(harness.url()).state("report:daily")

    def test_elections_example_runs(self) -> None:
        text = (harness.PYTHON_DIR / "README.md").read_text(encoding="utf-8")
        m = re.search(r"```python\n(with client\.campaign\(.*?)```", text, re.S)
        assert m is not None, "README.md has no python example of client.campaign"
        example = m.group(1)
        self.assertLessEqual(len([line for line in example.splitlines() if line.strip()]), 5)
        self.assertIn('"billing:leader"', example)
        name = harness.unique("readme")
        c = lockd.Client(harness.url())
        led: List[Dict[str, Any]] = []

        def serve_while_leading(lead: lockd.Lease) -> None:
            led.append({"term": lead.term, "lost": lead.lost.is_set(), "state": c.leader(name)})

        scope: Dict[str, Any] = {"client": c, "serve_while_leading": serve_while_leading}
        exec(compile(example.replace('"billing:leader"', repr(name)), "README.md", "exec"), scope)
        self.assertEqual(len(led), 1)
        state = led[0]["state"]
        self.assertEqual((state["leader"], state["term"], state["value"]), ("host-a", led[0]["term"], {"addr": "10.0.0.7:8080"}))
        self.assertFalse(led[0]["lost"])
        with self.assertRaises(lockd.NotFound):  # resigned at the end of the block
            c.leader(name)

    def test_sessions_example_runs(self) -> None:
        text = (harness.PYTHON_DIR / "README.md").read_text(encoding="utf-8")
        m = re.search(r"```python\n(with client\.session\(.*?)```", text, re.S)
        assert m is not None, "README.md has no python example of client.session"
        example = m.group(1)
        self.assertLessEqual(len([line for line in example.splitlines() if line.strip()]), 5)
        key, pool = harness.unique("readme-session"), harness.unique("readme-pool")
        example = example.replace('"orders:export"', repr(key)).replace('"db:pool"', repr(pool))
        c = lockd.Client(harness.url())
        seen: List[Dict[str, Any]] = []

        def export_orders(fence: int) -> None:
            seen.append({"fence": fence, "lock": c.state(key), "pool": c.semaphores.state(pool)})

        scope: Dict[str, Any] = {"client": c, "export_orders": export_orders}
        exec(compile(example, "README.md", "exec"), scope)
        self.assertEqual(len(seen), 1)
        self.assertEqual(seen[0]["lock"]["fence"], seen[0]["fence"])
        self.assertEqual(len(seen[0]["pool"]["holders"]), 1)
        self.assertFalse(scope["session"].lost.is_set())
        for state in (lambda: c.state(key), lambda: c.semaphores.state(pool)):
            with self.assertRaises(lockd.NotFound):  # released at the end of the blocks
                state()
