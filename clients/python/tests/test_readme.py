"""The five-line example of clients/python/README.md runs as written."""

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
