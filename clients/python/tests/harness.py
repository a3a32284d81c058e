"""What the tests share: the servers the Go harness started, scenarios.json,
and a proxy that loses answers.

The tests run against a real lockd on a real Redis, started by the Go test
in clients/ (go test ./clients/), which passes their addresses in the
environment (see clients/doc.go). Run by hand, they need the same
variables.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import socket
import sys
import threading
import time
import unittest
import urllib.parse
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

PYTHON_DIR = Path(__file__).resolve().parents[1]  # clients/python
CLIENTS_DIR = PYTHON_DIR.parent  # clients
REPO_DIR = CLIENTS_DIR.parent

# The package under test, from this tree: clients/python on sys.path.
if str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))

import lockd  # noqa: E402  (needs the path above)


def env(name: str) -> str:
    """env is a variable the Go harness sets; a clear failure without it."""
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(
            f"{name} is not set: run these tests through the Go harness, "
            "`go test -race -count=1 ./clients/` (it starts Redis and lockd), or set it by hand"
        )
    return value


def url() -> str:
    """url is the in-process lockd, checked against the OpenAPI contract; 503 during a Redis pause."""
    return env("LOCKD_URL")


def slow_url() -> str:
    """slow_url is the in-process lockd behind a proxy that passes each request on 25 ms late, as a network would."""
    return env("LOCKD_SLOW_URL")


def short_wait_url() -> str:
    """short_wait_url is an in-process lockd whose longest wait (--max-wait) is 1 s."""
    return env("LOCKD_SHORT_WAIT_URL")


def url2() -> str:
    """url2 is the second lockd process (lockd serve) on the same Redis."""
    return env("LOCKD_URL_2")


def client(server: Optional[str] = None, **kwargs: Any) -> lockd.Client:
    return lockd.Client(server or url(), **kwargs)


def unique(name: str) -> str:
    """unique is a key no other test uses, so that tests never see each other's leases."""
    return f"py:{name}:{uuid.uuid4().hex[:10]}"


def pause_redis(ms: int) -> None:
    """pause_redis stops redis-server (SIGSTOP) and returns once it is stopped; it continues ms later."""
    parts = urllib.parse.urlsplit(env("LOCKD_CONTROL_URL"))
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("POST", f"/redis/pause?ms={ms}")
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    if resp.status != 204:
        raise RuntimeError(f"pause redis: {resp.status} {body!r}")


def eventually(check: Callable[[], bool], within: float = 5.0, what: str = "condition") -> None:
    """eventually polls check until it is true, or fails after within seconds."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not true within {within} s")
        time.sleep(0.01)


# Scenarios: clients/scenarios.json, shared with every client.

with open(CLIENTS_DIR / "scenarios.json", encoding="utf-8") as _f:
    SCENARIOS: Dict[str, Dict[str, Any]] = {s["id"]: s for s in json.load(_f)["scenarios"]}

# COVERED maps each scenario id to the test that covers it.
COVERED: Dict[str, str] = {}

_results_lock = threading.Lock()


def _record(scenario_id: str, result: str, reason: str, seconds: float) -> None:
    """_record appends a scenario's result where the Go harness reads it (LOCKD_SCENARIO_RESULTS)."""
    path = os.environ.get("LOCKD_SCENARIO_RESULTS")
    if not path:
        return
    line = json.dumps({"client": "python", "id": scenario_id, "result": result, "reason": reason, "seconds": round(seconds, 3)})
    with _results_lock, open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def scenario(scenario_id: str) -> Callable[[Callable[[Any, Dict[str, Any]], None]], Callable[[Any], None]]:
    """scenario marks a test as the Python test of a scenario of scenarios.json.

    The test gets the scenario's entry (its figures). A pending scenario is
    skipped with "pending: <reason>" and its test is not run; every outcome
    is recorded for the Go harness.
    """
    spec = SCENARIOS[scenario_id]  # a KeyError here: the id is not in scenarios.json

    def wrap(fn: Callable[[Any, Dict[str, Any]], None]) -> Callable[[Any], None]:
        if scenario_id in COVERED:
            raise AssertionError(f"scenario {scenario_id} has two tests: {COVERED[scenario_id]} and {fn.__qualname__}")
        COVERED[scenario_id] = fn.__qualname__

        @functools.wraps(fn)
        def test(self: Any) -> None:
            began = time.monotonic()
            if spec.get("pending"):
                reason = "pending: " + spec["pending"]
                _record(scenario_id, "skip", reason, 0.0)
                raise unittest.SkipTest(reason)
            try:
                fn(self, spec)
            except unittest.SkipTest as err:
                _record(scenario_id, "skip", str(err), time.monotonic() - began)
                raise
            except BaseException as err:
                _record(scenario_id, "fail", f"{type(err).__name__}: {err}", time.monotonic() - began)
                raise
            _record(scenario_id, "pass", "", time.monotonic() - began)

        return test

    return wrap


class LosingProxy:
    """LosingProxy forwards HTTP requests to lockd, and loses the answers of the first `lose` of them.

    The request reaches lockd and is carried out; the client sees its
    connection closed without an answer, as when a network drops a reply.
    Each connection carries one request (the client opens one per request).
    cut() stops it at once, as a network partition: from then on the
    client's connections are refused and nothing reaches lockd.
    """

    def __init__(self, upstream: str, lose: int) -> None:
        parts = urllib.parse.urlsplit(upstream)
        self._upstream = (parts.hostname, parts.port)
        self.lose = lose
        self.seen: List[Dict[str, str]] = []  # the headers of every request, in order
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.url = "http://127.0.0.1:%d" % self._sock.getsockname()[1]
        self._cut = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.cut()

    def cut(self) -> None:
        """cut refuses every connection from now on; a request already forwarded gets no answer."""
        self._cut.set()
        try:
            # A socket closed while another thread waits in accept() on it
            # keeps listening on Linux; shutdown wakes the accept first.
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            with conn:
                if not self._cut.is_set():
                    self._one(conn)

    def _one(self, conn: socket.socket) -> None:
        f = conn.makefile("rb")
        request_line = f.readline().decode("latin-1").rstrip("\r\n")
        if not request_line:
            return
        method, path, _ = request_line.split(" ", 2)
        headers: Dict[str, str] = {}
        while True:
            line = f.readline().decode("latin-1").rstrip("\r\n")
            if not line:
                break
            name, _, value = line.partition(":")
            headers[name.strip()] = value.strip()
        body = f.read(int(headers.get("Content-Length", "0")))
        self.seen.append(headers)
        up = http.client.HTTPConnection(*self._upstream, timeout=30)
        try:
            up.request(method, path, body=body, headers={k: v for k, v in headers.items() if k.lower() != "connection"})
            resp = up.getresponse()
            answer = resp.read()
        finally:
            up.close()
        if self._cut.is_set():
            return  # cut meanwhile: the client never hears
        if self.lose > 0:
            self.lose -= 1
            return  # lockd did it; the client never hears
        out = [f"HTTP/1.1 {resp.status} {resp.reason}"]
        for k, v in resp.getheaders():
            if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                out.append(f"{k}: {v}")
        out.append(f"Content-Length: {len(answer)}")
        out.append("Connection: close")
        conn.sendall(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + answer)
