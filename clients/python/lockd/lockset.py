"""LockSet: several locks held all or nothing with one token."""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import Any, Callable, Dict, List, Optional, Protocol, Type

from ._keepalive import grant_expiry, keep_alive, ran_out
from .errors import LeaseLost, LockdError, SessionLost

log = logging.getLogger("lockd")


class LockSetOps(Protocol):
    """LockSetOps is what a LockSet asks of its Client."""

    @property
    def timeout(self) -> float: ...

    def set_call(self, op: str, body: Dict[str, Any], timeout: float) -> Dict[str, Any]: ...


class LockSet:
    """LockSet is several locks taken together (Client.lock_many): every key or none, one token.

    ``leases`` lists ``{"key", "fence"}`` in the order lock_many named the
    keys, ``fences`` maps each key to its fence, ``ttl`` is every lease's
    TTL in seconds. Unless taken with auto_renew=False, a thread renews the
    whole set every ttl/3, as a Lease's does; losing one key loses the set
    (``lost`` is set, ``error`` says why, ``on_lost(set, error)`` is
    called once). ``token`` is the set's secret, ``proof`` its latest
    proof (sent back by renew and release, so that any lockd restores the
    set should Redis lose it): neither appears in repr().

    Use it as a context manager to release every key at the end of the
    block.
    """

    def __init__(
        self,
        ops: LockSetOps,
        answer: Dict[str, Any],
        sent: float,
        arrived: float,
        auto_renew: bool = True,
        on_lost: Optional[Callable[["LockSet", LeaseLost], None]] = None,
    ) -> None:
        self._ops = ops
        self.__token: str = answer["token"]
        # The latest proof a grant or renewal answered: sent back with
        # every renewal and the release, so that any lockd can restore the
        # set should Redis lose it with the lockd that knew it.
        self.__proof: Optional[str] = answer.get("proof")
        self.ttl: float = answer["ttl_ms"] / 1000.0
        self.owner: Optional[str] = answer.get("owner")
        self.leases: List[Dict[str, Any]] = [{"key": l["key"], "fence": int(l["fence"])} for l in answer["leases"]]
        self.fences: Dict[str, int] = {l["key"]: l["fence"] for l in self.leases}
        self.lost = threading.Event()
        self.error: Optional[LeaseLost] = None
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._expires, self._renew_now = grant_expiry(sent, arrived, self.ttl)
        self._renewals = 0
        self._released = False
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if auto_renew:
            self._thread = threading.Thread(target=self._renew_loop, name="lockd-renew lock set", daemon=True)
            self._thread.start()

    @property
    def token(self) -> str:
        """token is the set's secret: renew and release need it. Keep it out of logs."""
        return self.__token

    @property
    def proof(self) -> Optional[str]:
        """proof is the set's latest proof (None: the server signs none), sent back by renew and release. Keep it out of logs."""
        with self._lock:
            return self.__proof

    @property
    def keys(self) -> List[str]:
        """keys are the set's keys, in the order lock_many named them."""
        return [l["key"] for l in self.leases]

    @property
    def renewals(self) -> int:
        """renewals counts the renewals so far."""
        with self._lock:
            return self._renewals

    def check(self) -> None:
        """check raises the LeaseLost that ended the set, if it is lost; else it returns."""
        if self.lost.is_set():
            assert self.error is not None
            raise self.error

    def renew(self) -> None:
        """renew extends every key by the set's TTL now, once; an answer that the set is gone loses it and raises LeaseLost."""
        self.check()
        sent = time.monotonic()
        timeout = min(self._ops.timeout, max(self._expiry() - sent, 0.001))
        body: Dict[str, Any] = {"token": self.__token, "ttl_ms": int(self.ttl * 1000)}
        proof = self.proof
        if proof:
            body["proof"] = proof
        try:
            answer = self._ops.set_call("renew", body, timeout)
        except LeaseLost as err:
            self._lose(err)
            raise
        with self._lock:
            if not self._released:
                self.__proof = answer.get("proof", self.__proof)
                self._expires = sent + self.ttl
                self._renewals += 1

    def release(self) -> Optional[Dict[str, Any]]:
        """release stops the renewer and gives every key back: the server's answer ``{"released": n}``, or None when already released."""
        with self._lock:
            if self._released:
                return None
            self._released = True
        self._stop.set()
        self.check()
        body: Dict[str, Any] = {"token": self.__token}
        proof = self.proof
        if proof:
            body["proof"] = proof
        try:
            return self._ops.set_call("release", body, self._ops.timeout)
        except LeaseLost as err:
            self._lose(err, after_release=True)
            raise

    def __enter__(self) -> "LockSet":
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
                raise
            log.warning("%r: not released after an exception in the block: %s", self, err)

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else ("released" if self._released else "held")
        return f"<lockd.LockSet {self.keys!r} owner={self.owner!r} {state}>"

    __str__ = __repr__

    def _expiry(self) -> float:
        with self._lock:
            return self._expires

    def _done(self) -> bool:
        """_done reports whether the set is released or lost: nothing is left to keep or lose (Session)."""
        with self._lock:
            return self._released or self.error is not None

    def _session_lost(self, err: SessionLost) -> None:
        """_session_lost loses the set with its session."""
        self._lose(
            SessionLost(
                f"lock set: its session was lost: {err.detail}",
                status=err.status,
                code=err.code,
                problem=err.problem,
                retry_after=err.retry_after,
            )
        )

    def _session_ended(self) -> None:
        """_session_ended records that the session's end released every key: the set is released, not lost."""
        with self._lock:
            self._released = True
        self._stop.set()

    def _lose(self, err: LeaseLost, after_release: bool = False) -> None:
        with self._lock:
            if self.error is not None or (self._released and not after_release):
                return
            self.error = err
        self._stop.set()
        self.lost.set()
        log.warning("%r: lock set lost: %s", self, err)
        if self._on_lost is not None:
            try:
                self._on_lost(self, err)
            except Exception:
                log.exception("%r: on_lost callback failed", self)

    def _renew_loop(self) -> None:
        def lose(last: Optional[LockdError], late: Optional[float]) -> None:
            if late is not None:
                self._lose(LeaseLost(f"lock set: {ran_out(late)}"))
                return
            self._lose(LeaseLost(f"lock set: could not renew before the leases expired: {last}"))

        keep_alive(self, self._stop, self.ttl, self._expiry, self.renew, LeaseLost, lose, self._renew_now)
