"""Lease: a granted lock, semaphore permit or election's leadership that renews itself.

A lease's renewer is a daemon thread that renews every ttl/3. A renew
answered 404 or 409 means the lease is gone: it is lost at once. A renew
that fails for any other reason (503, no answer) is retried with jittered
backoff until the lease's expiry as measured by this process's monotonic
clock, from when the last successful renew was sent; then it is lost. That
clock never runs ahead of the server's expiry, so the client gives up no
later than the server drops the lease. A grant that waited in the queue
counts from its answer and is renewed at once (_keepalive.grant_expiry).

Loss sets ``lease.lost`` (a threading.Event), records ``lease.error`` (a
LeaseLost) and calls ``on_lost`` once. The protected work should check
``lease.lost`` or call ``lease.check()`` between steps, and pass
``lease.fence`` to the resource it protects: a process paused past its TTL
notices the loss only once it runs again, and only a fence check at the
resource closes that window.

A leadership is the same lease under the election's words: its term is
its fence (``lease.term``), its leader its owner (``lease.leader``),
release resigns, and ``proclaim`` sets its value.

A lease in a session (``session=`` on acquire, lock, semaphore or
campaign) has no renewer of its own: the session's renewals keep it, and
it is lost when its session is, with a SessionLost. The session also
loses it when its renewal no longer lists the grant (force-released, or
lapsed after a renewal of the session failed). Releasing it still
releases the grant at once. A request that its holder step aside comes
with the session's renewal, and sets ``release_requested`` and calls
``on_release_request`` as for a lease that renews itself.
"""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import Any, Callable, Dict, List, Optional, Protocol, Type

from ._keepalive import grant_expiry, keep_alive, ran_out
from .errors import LeaseLost, LockdError, SessionLost

log = logging.getLogger("lockd")

# OnLost is called once, from the thread that noticed, when a lease is lost.
OnLost = Callable[["Lease", LeaseLost], None]


class LeaseOps(Protocol):
    """LeaseOps is what a Lease asks of its Client (internal): the requests on a granted lease, each sent once."""

    @property
    def timeout(self) -> float: ...

    def renew(self, kind: str, key: str, token: str, ttl: float, timeout: float, proof: Optional[str]) -> Dict[str, Any]: ...

    def proclaim(self, key: str, token: str, value: Any, proof: Optional[str]) -> Dict[str, Any]: ...

    def handover(self, key: str, token: str, to: str) -> Dict[str, Any]: ...

    def release(self, kind: str, key: str, token: str, proof: Optional[str]) -> Dict[str, Any]: ...


class LeaseSession(Protocol):
    """LeaseSession is the Session that keeps a lease alive, as the lease sees it.

    session.py builds on this module (a Session tells its leases of its
    loss and its end); this one names its session by what it offers, not
    by its class, so that the dependency goes one way.
    """

    ttl: float
    owner: Optional[str]
    lost: threading.Event
    error: Optional[SessionLost]

    @property
    def id(self) -> str: ...

    @property
    def renewals(self) -> int: ...

    @property
    def leases(self) -> List["Lease"]: ...

    def check(self) -> None: ...

    def renew(self) -> Dict[str, Any]: ...

    def info(self) -> Dict[str, Any]: ...

    def end(self) -> Optional[Dict[str, Any]]: ...


class Lease:
    """Lease is one grant: a lock (exclusive or shared), a semaphore permit or an election's leadership.

    ``key`` is the lock's key, the semaphore's or the election's name,
    ``kind`` is "lock", "semaphore" or "election", ``fence`` the grant's
    fencing number (a leadership's term: ``term`` is the same number),
    ``ttl`` its TTL in seconds, ``owner`` who holds it (a leadership's
    leader: ``leader`` is the same), ``mode`` "exclusive", "shared" or
    "permit" (a leadership is "exclusive"), ``limit`` the semaphore's limit
    (None otherwise), ``replayed`` whether the server answered with an
    earlier grant of the same Idempotency-Key. ``token`` is the lease's
    secret: it never appears in repr() or str(). ``session`` is the
    Session that keeps it alive, or None (a lease in a session has no
    renewer of its own, and its ``ttl`` is the time its session had left
    when it was granted).

    Use it as a context manager to release it at the end of the block.
    Its methods are safe to call from any thread.
    """

    def __init__(
        self,
        ops: LeaseOps,
        kind: str,
        answer: Dict[str, Any],
        sent: float,
        auto_renew: bool = True,
        on_lost: Optional[OnLost] = None,
        session: Optional[LeaseSession] = None,
        arrived: Optional[float] = None,
    ) -> None:
        self._ops = ops
        self.session = session
        self.kind = kind
        self.key: str = answer["key"]
        self.ttl: float = answer["ttl_ms"] / 1000.0
        if kind == "election":
            # A Leadership: its term is the fence, its leader the owner.
            self.fence: int = int(answer["term"])
            self.owner: Optional[str] = answer.get("leader")
            self.mode: Optional[str] = "exclusive"
        else:
            self.fence = int(answer["fence"])
            self.owner = answer.get("owner")
            self.mode = answer.get("mode")
        self.limit: Optional[int] = answer.get("limit")
        self.replayed: bool = bool(answer.get("replayed"))
        self.__token: str = answer["token"]
        # The latest proof a grant or renewal answered: sent back with
        # every renewal, proclaim and release, so that any lockd can
        # restore the lease should Redis lose it.
        self.__proof: Optional[str] = answer.get("proof")
        self.lost = threading.Event()
        self.error: Optional[LeaseLost] = None
        self._on_lost = on_lost
        # A request that the holder step aside (Client.request_release), as
        # the latest renewal answered it: release_requested is set on the
        # first, release_request is the newest ({"by", "reason", "at"}),
        # and on_release_request(lease, request), when set, is called once
        # per request on the renewing thread (a lease in a session: its
        # session's). The holder decides.
        self.release_requested = threading.Event()
        self.release_request: Optional[Dict[str, Any]] = None
        self.on_release_request: Optional[Callable[["Lease", Dict[str, Any]], None]] = None
        self._lock = threading.Lock()
        self._info = _without_token(answer)
        # The grant came after sent and before arrived (grant_expiry).
        self._expires, self._renew_now = grant_expiry(sent, sent if arrived is None else arrived, self.ttl)
        self._renewals = 0
        self._released = False
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if auto_renew and session is None:
            self._thread = threading.Thread(target=self._renew_loop, name=f"lockd-renew {self.key}", daemon=True)
            self._thread.start()

    @property
    def token(self) -> str:
        """token is the lease's secret: renew, release and re-entry need it. Keep it out of logs."""
        return self.__token

    @property
    def proof(self) -> Optional[str]:
        """proof is the lease's latest proof (None: the server signs none), sent back by renew, proclaim and release. Keep it out of logs."""
        with self._lock:
            return self.__proof

    @property
    def term(self) -> int:
        """term is a leadership's term, strictly increasing per election: its fence under the election's word."""
        return self.fence

    @property
    def leader(self) -> Optional[str]:
        """leader is who leads, for a leadership: its owner under the election's word."""
        return self.owner

    @property
    def value(self) -> Any:
        """value is the lease's value as last sent (acquire, campaign, proclaim, renew with a value); None when it has none."""
        with self._lock:
            return self._info.get("value")

    @property
    def info(self) -> Dict[str, Any]:
        """info is the server's latest answer about the lease, without the token."""
        with self._lock:
            return dict(self._info)

    @property
    def renewals(self) -> int:
        """renewals is how many renewals succeeded."""
        with self._lock:
            return self._renewals

    def check(self) -> None:
        """check raises the LeaseLost that ended the lease, if it is lost; else it returns."""
        if self.lost.is_set():
            assert self.error is not None
            raise self.error

    def renew(self) -> None:
        """renew extends the lease by its TTL now, once.

        It asks for the lease's own TTL, so that the expiry this client
        computes stays the server's. The renewer thread calls it; call it
        yourself after
        acquire(..., auto_renew=False). An answer that the lease is gone
        loses it and raises LeaseLost; any other failure raises and leaves
        the lease as it was. A lease in a session is renewed by renewing
        its session (every grant in it), since only the session's
        renewals move its expiry.
        """
        self.check()
        if self.session is not None:
            try:
                self.session.renew()
            except SessionLost:
                self.check()  # the session lost this lease with it
                raise
            self.check()  # the renewal no longer lists its grant
            return
        sent = time.monotonic()
        timeout = min(self._ops.timeout, max(self._expiry() - sent, 0.001))
        try:
            answer = self._ops.renew(self.kind, self.key, self.__token, self.ttl, timeout, self.proof)
        except LeaseLost as err:
            self._lose(err)
            raise
        with self._lock:
            if self._released:
                return
            self.__proof = answer.get("proof", self.__proof)
            self._info = _without_token(answer, self._info)
            self._expires = sent + self.ttl
            self._renewals += 1
        self._note_request(answer.get("release_requested"))

    def proclaim(self, value: Any) -> None:
        """proclaim sets a leadership's value (any JSON, at most 4 KiB), keeping the leadership.

        It renews the leadership by its TTL too; observers get a
        "proclaimed" event. A leadership that no longer leads is lost and
        raises LeaseLost, as renew does.
        """
        if self.kind != "election":
            raise ValueError(f"lockd: proclaim is for a leadership (client.campaign), not a {self.kind}")
        if value is None:
            raise ValueError("lockd: proclaim needs a value; JSON null is not one")
        self.check()
        sent = time.monotonic()
        try:
            answer = self._ops.proclaim(self.key, self.__token, value, self.proof)
        except LeaseLost as err:
            self._lose(err)
            raise
        with self._lock:
            if self._released:
                return
            self.__proof = answer.get("proof", self.__proof)
            self._info = _without_token(answer, self._info)
            self._expires = sent + self.ttl

    def handover(self, to: str) -> Dict[str, Any]:
        """handover gives up a leadership to the candidate ``to``, who leads next ahead of earlier candidates.

        It returns ``{"key", "resigned"}`` and stops the renewer. NotCandidate
        (the leadership goes on, renewed) when ``to`` is not campaigning.
        """
        if self.kind != "election":
            raise ValueError(f"lockd: handover is for a leadership (client.campaign), not a {self.kind}")
        self.check()
        try:
            answer = self._ops.handover(self.key, self.__token, to)
        except LeaseLost as err:
            self._lose(err)
            raise
        self.abandon()
        return answer

    def release(self) -> Optional[Dict[str, Any]]:
        """release stops the renewer and gives the lease back; a leadership resigns.

        It returns the server's answer (``{"key", "released", "count"}``;
        a leadership's ``{"key", "resigned"}``), or None when the lease was
        already released. A lease that was lost raises its LeaseLost,
        without asking the server.
        """
        with self._lock:
            if self._released:
                return None
            # From here the renewer records nothing, not even a 404 from a
            # renew that races this release.
            self._released = True
        self._stop.set()
        self.check()
        try:
            return self._ops.release(self.kind, self.key, self.__token, self.proof)
        except LeaseLost as err:
            self._lose(err, after_release=True)
            raise

    def abandon(self) -> None:
        """abandon stops the renewer without releasing: the lease lasts until its TTL runs out."""
        with self._lock:
            self._released = True
        self._stop.set()

    def __enter__(self) -> "Lease":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            self.release()
        except LockdError as err:
            if exc is None:
                # The block finished, but not under the lease (it was lost
                # on the way), or the release failed: the caller must know.
                raise
            # The block's own exception is what went wrong; the lease being
            # gone too (often its cause) must not replace it.
            log.warning("%r: not released after an exception in the block: %s", self, err)

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else ("released" if self._released else "held")
        if self.session is not None:
            state += " in a session"
        if self.kind == "election":
            return f"<lockd.Lease election {self.key!r} term={self.fence} leader={self.owner!r} {state}>"
        return f"<lockd.Lease {self.kind} {self.key!r} fence={self.fence} owner={self.owner!r} {state}>"

    __str__ = __repr__

    def _expiry(self) -> float:
        with self._lock:
            return self._expires

    def _lose(self, err: LeaseLost, after_release: bool = False) -> None:
        """_lose records why the lease was lost, once, and tells everyone."""
        with self._lock:
            if self.error is not None or (self._released and not after_release):
                return
            self.error = err
        self._stop.set()
        self.lost.set()
        log.warning("%r: lease lost: %s", self, err)
        if self._on_lost is not None:
            try:
                self._on_lost(self, err)
            except Exception:  # a callback's bug must not kill the renewer silently
                log.exception("%r: on_lost callback failed", self)

    def _done(self) -> bool:
        """_done reports whether the lease is released or lost: nothing is left to keep or lose."""
        with self._lock:
            return self._released or self.error is not None

    def _note_request(self, request: Optional[Dict[str, Any]]) -> None:
        """_note_request keeps a renewal's request that the holder step aside, and tells the holder once per request.

        A lone lease's renewal passes it on; a lease in a session hears it
        from the session's renewal (its grant's hold carries it).
        """
        if request is None:
            return
        with self._lock:
            if self._released or self.error is not None:
                return
            if self.release_request is not None and self.release_request.get("at") == request.get("at"):
                return
            self.release_request = request
            notify = self.on_release_request
        self.release_requested.set()
        if notify is not None:
            try:
                notify(self, request)
            except Exception:  # a callback's bug must not kill the renewer silently
                log.exception("%r: on_release_request callback failed", self)

    def _session_lost(self, err: SessionLost) -> None:
        """_session_lost loses the lease with its session."""
        self._lose(
            SessionLost(
                f"{self.key}: its session was lost: {err.detail}",
                status=err.status,
                code=err.code,
                problem=err.problem,
                retry_after=err.retry_after,
            )
        )

    def _session_ended(self) -> None:
        """_session_ended records that the session's end released the grant: the lease is released, not lost."""
        with self._lock:
            self._released = True
        self._stop.set()

    def _renew_loop(self) -> None:
        """_renew_loop renews every ttl/3 until released or lost (_keepalive)."""
        def lose(last: Optional[LockdError], late: Optional[float]) -> None:
            if late is not None:
                self._lose(LeaseLost(f"{self.key}: {ran_out(late)}"))
                return
            self._lose(LeaseLost(f"{self.key}: could not renew before the lease expired: {last}"))

        keep_alive(self, self._stop, self.ttl, self._expiry, self.renew, LeaseLost, lose, self._renew_now)


def _without_token(answer: Dict[str, Any], before: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """_without_token is an answer to keep: never the token or the proof; the value from before when the answer has none.

    A renew without a value keeps the lease's value, but a leadership's
    renew answer names the value only when the renew set it.
    """
    out = {k: v for k, v in answer.items() if k not in ("token", "proof")}
    if before is not None and "value" not in out and "value" in before:
        out["value"] = before["value"]
    return out
