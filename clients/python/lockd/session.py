"""Session: one keep-alive for many grants, renewing itself.

A session (``client.session(ttl=...)``) is renewed every ttl/3 by a daemon
thread, as a lease is. Grants acquired in it (``session=`` on acquire,
lock, semaphore or campaign) have no renewer of their own and no TTL: they
live exactly as long as the session. Ending the session (``end()``, or
the end of its ``with`` block) releases every grant in it at once; a
session nobody renews lapses at its expiry and takes every grant with it.

Loss is a lease's: a renew answered 404 ``session_not_found`` loses the
session at once; a renew that fails otherwise (503, no answer) is retried
with backoff until the session's expiry by this process's monotonic
clock, from when the last successful renew was sent, then it is lost.
Loss records ``session.error`` (a SessionLost), loses every lease in the
session with a SessionLost of its own, then sets ``session.lost`` (whoever
sees it set sees its leases lost) and calls ``on_lost`` once. A renewal
that no longer lists a lease's grant (it was force-released, or lapsed
after a renewal failed) loses that lease alone. A renewal whose answer
says that somebody asked the holder of a lock in it to step aside tells
that lock's lease (``release_requested``, ``on_release_request``), once
per request, as a lease's own renewal would.

The session's id is a secret like a lease's token: whoever has it can end
the session. It never appears in a repr, a message or a log line.
"""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Protocol, Tuple, Type, Union

from ._keepalive import grant_expiry, keep_alive, ran_out
from .errors import LeaseLost, LockdError, SessionLost

from .lockset import LockSet

if TYPE_CHECKING:
    from .lease import Lease

log = logging.getLogger("lockd")

# OnSessionLost is called once, from the thread that noticed, when a session is lost.
OnSessionLost = Callable[["Session", SessionLost], None]


class SessionOps(Protocol):
    """SessionOps is what a Session asks of its Client (internal)."""

    @property
    def timeout(self) -> float: ...

    def call(self, method: str, session_id: str, op: str, timeout: float) -> Dict[str, Any]:
        """call is one request on /v1/sessions/{id}[op], sent once."""
        ...

    def read(self, session_id: str) -> Dict[str, Any]:
        """read is GET /v1/sessions/{id}, retried as reads are."""
        ...


class Session:
    """Session is a live session of lockd and its keep-alive.

    ``ttl`` is its TTL in seconds, ``owner`` whose it is, ``lost`` a
    threading.Event set when it is lost, ``error`` the SessionLost that
    lost it. ``id`` is its secret: it never appears in repr() or str().
    Pass the Session as ``session=`` to acquire, lock, semaphore or
    campaign; ``session.leases`` are the leases in it that are neither
    released nor lost.

    Use it as a context manager to end it at the end of the block. Its
    methods are safe to call from any thread.
    """

    def __init__(
        self,
        ops: SessionOps,
        answer: Dict[str, Any],
        sent: float,
        auto_renew: bool = True,
        on_lost: Optional[OnSessionLost] = None,
        arrived: Optional[float] = None,
    ) -> None:
        self._ops = ops
        self.__id: str = answer["session"]
        self.ttl: float = answer["ttl_ms"] / 1000.0
        self.owner: Optional[str] = answer.get("owner")
        self.lost = threading.Event()
        self.error: Optional[SessionLost] = None
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._info = _without_id(answer)
        # A creation does not wait, but its answer may be slow: the same
        # rule as a lease's grant (grant_expiry).
        self._expires, self._renew_now = grant_expiry(sent, sent if arrived is None else arrived, self.ttl)
        self._renewals = 0
        self._ended = False
        self._closed = False  # ended, and its leases told so
        # The leases in the session, each with when it joined (monotonic):
        # a renewal sent before a lease joined may not list its grant.
        self._leases: List[Tuple[Union["Lease", LockSet], float]] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if auto_renew:
            self._thread = threading.Thread(target=self._renew_loop, name=f"lockd-session {self.owner}", daemon=True)
            self._thread.start()

    @property
    def id(self) -> str:
        """id is the session's secret: acquires in it need it, and whoever has it can end it. Keep it out of logs."""
        return self.__id

    @property
    def renewals(self) -> int:
        """renewals is how many renewals of the session succeeded."""
        with self._lock:
            return self._renewals

    @property
    def leases(self) -> List["Lease"]:
        """leases are the leases acquired in this session that are neither released nor lost (lock sets aside)."""
        with self._lock:
            leases = [lease for lease, _ in self._leases]
        return [lease for lease in leases if not isinstance(lease, LockSet) and not lease._done()]

    def check(self) -> None:
        """check raises the SessionLost that ended the session, if it is lost; else it returns."""
        err = self.error  # set before lost is: check raises from the moment the loss is known
        if err is not None:
            raise err

    def renew(self) -> Dict[str, Any]:
        """renew keeps the session, and every grant in it, alive for its TTL from now, once.

        It returns the session as the server answered (``owner``,
        ``ttl_ms``, ``expires_at``, ``holds``), without its id. The
        renewer thread calls it; call it yourself after
        ``client.session(..., auto_renew=False)``. An answer that the
        session is gone loses it and raises SessionLost; any other failure
        raises and leaves the session as it was (a 503 may mean that a
        grant in it was not renewed: renew again soon).
        """
        self.check()
        sent = time.monotonic()
        timeout = min(self._ops.timeout, max(self._expiry() - sent, 0.001))
        try:
            answer = self._ops.call("POST", self.__id, "/renew", timeout)
        except SessionLost as err:
            self._lose(err)
            raise
        with self._lock:
            if self._ended:
                return _without_id(answer)
            self._info = _without_id(answer)
            self._expires = sent + self.ttl
            self._renewals += 1
            joined = [(lease, at) for lease, at in self._leases if not lease._done()]
            self._leases = joined
        listed = [lease for lease, at in joined if at < sent]
        self._drop_missing(answer, listed)
        self._pass_requests(answer, listed)
        return _without_id(answer)

    def info(self) -> Dict[str, Any]:
        """info reads the session from the server: ``owner``, ``ttl_ms``, ``created_at``, ``expires_at`` and ``holds``.

        ``holds`` lists the grants in it as ``{"kind", "key"}`` (a grant
        released on its own may stay listed until the next renewal). It
        retries as reads do; a session that is gone is lost and raises
        SessionLost.
        """
        try:
            answer = self._ops.read(self.__id)
        except SessionLost as err:
            self._lose(err)
            raise
        return _without_id(answer)

    def end(self) -> Optional[Dict[str, Any]]:
        """end stops the renewer and ends the session: the server releases every grant in it at once.

        It returns the server's answer, the session and the ``holds`` it
        released, or None when it was already ended. The leases in it are
        released (not lost). A session that was lost raises its
        SessionLost, without asking the server; one that the server says
        is gone is lost and raises SessionLost. The end is sent once: if
        it fails otherwise, the session lapses at its expiry.
        """
        with self._lock:
            if self._ended:
                return None
            # From here the renewer records nothing, not even a 404 from a
            # renew that races this end.
            self._ended = True
        self._stop.set()
        self.check()
        try:
            answer = self._ops.call("DELETE", self.__id, "", self._ops.timeout)
        except SessionLost as err:
            self._lose(err, after_end=True)
            raise
        with self._lock:
            leases = [lease for lease, _ in self._leases]
            self._leases = []
            self._closed = True
        for lease in leases:
            lease._session_ended()
        return _without_id(answer)

    def __enter__(self) -> "Session":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            self.end()
        except LockdError as err:
            if exc is None:
                # The block finished, but not under the session (it was
                # lost on the way), or the end failed: the caller must know.
                raise
            # The block's own exception is what went wrong; the session
            # being gone too (often its cause) must not replace it.
            log.warning("%r: not ended after an exception in the block: %s", self, err)

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else ("ended" if self._ended else "live")
        return f"<lockd.Session owner={self.owner!r} ttl={self.ttl:g} {state}>"

    __str__ = __repr__

    def _attach(self, lease: Union["Lease", LockSet]) -> None:
        """_attach puts a lease just granted in the session; a session lost meanwhile loses it at once.

        A lease that joins once the end was answered had its grant in the
        session when it ended (its acquire would have failed otherwise):
        the end released it with the others.
        """
        with self._lock:
            err, closed = self.error, self._closed
            if err is None and not closed:
                self._leases.append((lease, time.monotonic()))
        if err is not None:
            lease._session_lost(err)
        elif closed:
            lease._session_ended()

    def _drop_missing(self, answer: Dict[str, Any], leases: List[Union["Lease", LockSet]]) -> None:
        """_drop_missing loses the leases whose grant a renewal of the session no longer lists.

        The server lists a grant until the renewal after the one that
        found it gone (force-released, or lapsed after a failed renewal).
        Grants are listed by kind and key, so a lease is kept while any
        grant of its key is in the session.
        """
        holds = answer.get("holds")
        if not isinstance(holds, list):
            return
        listed = {(h.get("kind"), h.get("key")) for h in holds if isinstance(h, dict)}
        for lease in leases:
            if isinstance(lease, LockSet):
                # A set holds every key or none: one missing loses it.
                if any(("lock", k) not in listed for k in lease.keys):
                    lease._lose(LeaseLost("lock set: its session no longer holds it (a key was force-released, or it lapsed)"))
            elif (lease.kind, lease.key) not in listed:
                lease._lose(LeaseLost(f"{lease.key}: its session no longer holds it (force-released, or it lapsed)"))

    def _pass_requests(self, answer: Dict[str, Any], leases: List["Lease"]) -> None:
        """_pass_requests tells each lock lease of the request to step aside that its grant's hold carries.

        A grant in a session is renewed by the session, so its lease learns
        of a request here, as a lone lease from its own renewal. Only
        leases that joined before the renewal was sent are told: a hold of
        their key in an older answer may be an earlier grant's.
        """
        holds = answer.get("holds")
        if not isinstance(holds, list):
            return
        asked = {
            h.get("key"): h["release_requested"]
            for h in holds
            if isinstance(h, dict) and h.get("kind") == "lock" and isinstance(h.get("release_requested"), dict)
        }
        for lease in leases:
            # A lock set (no kind) is not told key by key.
            if getattr(lease, "kind", None) == "lock" and lease.key in asked:
                lease._note_request(asked[lease.key])

    def _expiry(self) -> float:
        with self._lock:
            return self._expires

    def _lose(self, err: SessionLost, after_end: bool = False) -> None:
        """_lose records why the session was lost, once, and loses every lease in it."""
        with self._lock:
            if self.error is not None or (self._ended and not after_end):
                return
            self.error = err
            leases = [lease for lease, _ in self._leases]
            self._leases = []
        self._stop.set()
        # Its leases first: whoever sees the session lost sees them lost.
        for lease in leases:
            lease._session_lost(err)
        self.lost.set()
        log.warning("%r: session lost: %s", self, err)
        if self._on_lost is not None:
            try:
                self._on_lost(self, err)
            except Exception:  # a callback's bug must not kill the renewer silently
                log.exception("%r: on_lost callback failed", self)

    def _renew_loop(self) -> None:
        """_renew_loop renews every ttl/3 until released or lost (_keepalive)."""
        def lose(last: Optional[LockdError], late: Optional[float]) -> None:
            if late is not None:
                self._lose(SessionLost(f"the session: {ran_out(late)}"))
                return
            self._lose(SessionLost(f"could not renew the session before it expired: {last}"))

        keep_alive(self, self._stop, self.ttl, self._expiry, self.renew, SessionLost, lose, self._renew_now)


def _without_id(answer: Dict[str, Any]) -> Dict[str, Any]:
    """_without_id is an answer to keep or hand out: never the session's id."""
    return {k: v for k, v in answer.items() if k != "session"}
