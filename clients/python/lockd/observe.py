"""Observer: an election's changes as they happen, from its event stream.

``GET /v1/elections/{name}/observe`` answers server-sent events: at once
the current leader (``leader``) or ``vacant``, then every change. The
server sends a comment line (a heartbeat) at least every 15 s, so a stream
silent for much longer than that is dead even when no FIN came (the
server's host vanished): the observer gives it up after SILENCE seconds.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from types import TracebackType
from typing import Any, Dict, List, Optional, Tuple, Type

from .errors import Unreachable

# The longest a stream may say nothing, not even a heartbeat, before it is
# taken for dead: three of the server's heartbeats (10 s; at most 15 s).
SILENCE = 45.0

# A longer line is not lockd's (an event's data is an ElectionChange,
# whose value is at most 4 KiB).
_MAX_LINE = 1 << 20

# Change is what an observer is told: the ElectionChange of the API
# (key, leader, value, term, since, expires_at; never a token).
Change = Dict[str, Any]


class Observer:
    """Observer iterates over an election's changes as ``(event, change)`` pairs.

        with client.observe("billing:leader") as changes:
            for event, change in changes:
                print(event, change["term"], change.get("leader"), change.get("value"))

    ``event`` is "leader" (a new term; or the current leader, when
    observing begins), "proclaimed" (the leader's new value) or "vacant"
    (nobody leads: ``change["term"]`` is the term that ended, 0 when none
    is known). Every change names the term it is about, and the first one
    says where things stand, so an observer that had to start over (the
    stream ended: observe again) misses nothing silently.

    Iteration ends when the server ends the stream (it shuts down) or
    ``close()`` is called, from any thread. ``timeout`` (seconds, None: no
    limit) bounds the wait for each event: when it passes without one,
    the stream is closed and TimeoutError is raised. A stream that breaks,
    or stays silent past SILENCE seconds (not even a heartbeat), raises
    Unreachable.
    """

    def __init__(
        self,
        name: str,
        conn: http.client.HTTPConnection,
        resp: http.client.HTTPResponse,
        timeout: Optional[float] = None,
    ) -> None:
        if timeout is not None and timeout <= 0:
            raise ValueError(f"lockd: timeout must be positive, got {timeout}")
        self.name = name
        self.timeout = timeout
        self._conn = conn
        self._resp = resp
        self._lock = threading.Lock()
        self._closed = False
        # A read is under way: close() from another thread must not close
        # the response under it, only wake it; the reader then closes it.
        self._reading = False

    @property
    def closed(self) -> bool:
        with self._lock:
            return self._closed

    def __iter__(self) -> "Observer":
        return self

    def __next__(self) -> Tuple[str, Change]:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        event = ""
        data: List[str] = []
        while True:
            line = self._readline(deadline)
            if line is None:
                self.close()
                raise StopIteration
            if line == "":
                # A blank line ends an event; one without data is nothing.
                if data:
                    return event or "message", self._decode(event, "\n".join(data))
                event = ""
                continue
            if line.startswith(":"):
                continue  # a comment: the heartbeat
            field, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if field == "event":
                event = value
            elif field == "data":
                data.append(value)
            # id and retry: lockd sends neither, and a reconnection starts
            # from the current state anyway.

    def close(self) -> None:
        """close ends the stream; an iteration under way in another thread ends too (StopIteration)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            reading = self._reading
        sock = self._conn.sock
        if sock is not None:
            try:
                # Wakes a reader blocked in another thread: it reads the end.
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if not reading:
            self._release()

    def _release(self) -> None:
        self._resp.close()
        self._conn.close()

    def __enter__(self) -> "Observer":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<lockd.Observer {self.name!r} {'closed' if self.closed else 'open'}>"

    def _readline(self, deadline: Optional[float]) -> Optional[str]:
        """_readline is the stream's next line without its end, or None once the stream is over or closed."""
        wait = SILENCE
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise TimeoutError(f"lockd: observe {self.name}: no change within {self.timeout} s")
            wait = min(wait, left)
        with self._lock:
            if self._closed:
                return None
            sock = self._conn.sock
            if sock is None:
                return None
            self._reading = True
        try:
            sock.settimeout(wait)
            raw = self._resp.readline(_MAX_LINE + 1)
        except socket.timeout:
            if self.closed:
                return None
            self.close()
            if deadline is not None and time.monotonic() >= deadline - 0.001:
                raise TimeoutError(f"lockd: observe {self.name}: no change within {self.timeout} s") from None
            raise Unreachable(f"observe {self.name}: the stream was silent for {SILENCE:g} s, not even a heartbeat") from None
        except (OSError, ValueError, http.client.HTTPException) as err:
            if self.closed:
                return None  # close() woke this read
            self.close()
            raise Unreachable(f"observe {self.name}: the stream broke: {type(err).__name__}: {err}") from None
        finally:
            with self._lock:
                self._reading = False
                closed = self._closed
            if closed:
                self._release()
        if not raw:
            return None
        if len(raw) > _MAX_LINE:
            self.close()
            raise Unreachable(f"observe {self.name}: a line longer than {_MAX_LINE} bytes; not lockd's")
        return raw.decode("utf-8", "replace").rstrip("\r\n")

    def _decode(self, event: str, data: str) -> Change:
        try:
            change = json.loads(data)
        except ValueError:
            change = None
        if not isinstance(change, dict):
            self.close()
            raise Unreachable(f"observe {self.name}: the data of a {event or 'message'} event is not a JSON object; not lockd's")
        return change
