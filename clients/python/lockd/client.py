"""Client: lockd's HTTP API for locks, semaphores and elections.

Every kind of lease (a lock, a semaphore permit, an election's
leadership) is the same wire shape under its own path: acquire, renew,
release, force-release, state, list, history; an election calls acquire
"campaign" and release "resign". The private methods of Client take the
kind ("lock", "semaphore", "election") and do the work once; the public
ones are the lock's, ``client.semaphores`` (a Semaphores) names the
semaphore's and ``client.elections`` (an Elections) the election's, with
the common ones (campaign, leader, observe) on Client too. A new kind of
lease is a new entry in _KINDS, a small class beside Semaphores for its
own operations, and the same Lease.

Sessions are not a kind of lease but what keeps leases alive:
``client.session()`` starts one with its keep-alive (a Session), and
``session=`` on every acquire puts the grant in it instead of giving it
a TTL; ``client.sessions`` (a Sessions) has the bare operations by id.
"""

from __future__ import annotations

import logging
import secrets
import ssl
import time
import urllib.parse
from types import TracebackType
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Type, TypeVar, Union

from ._http import Transport, backoff
from .errors import InvalidRequest, LeaseLost, LeaseNotFound, NotFound, NotGranted, SessionLost, TooManyHolders, Unavailable
from .lease import Lease, OnLost
from .lockset import LockSet
from .observe import Observer
from .session import OnSessionLost, Session

log = logging.getLogger("lockd")

T = TypeVar("T")


class _Kind(NamedTuple):
    """_Kind is a kind of lease on the wire: its path and the names of its acquire and release."""

    path: str
    acquire: str = "acquire"
    release: str = "release"


_KINDS = {
    "lock": _Kind("/v1/locks"),
    "semaphore": _Kind("/v1/semaphores"),
    "election": _Kind("/v1/elections", acquire="campaign", release="resign"),
}

# A campaign that waits as long as it takes (wait=None) waits a century:
# like every wait longer than the server's longest, it goes in rounds
# (Client._acquire) that keep the candidate's place in line.
_FOREVER = 100 * 365 * 24 * 3600.0

# _WAIT_ROUND caps each round of a wait, in seconds (None: the server's
# longest wait alone, learnt from its first refusal). Tests shorten it.
_WAIT_ROUND: Optional[float] = None

# _ROUND_MAX bounds a round before the server has said its longest wait:
# a day, far past any --max-wait.
_ROUND_MAX = 24 * 3600.0

# The TTL of a grant, or of a session, when none is given.
_DEFAULT_TTL = 30.0

# A grant's session: a Session of this client (its keep-alive and loss
# are the grant's), or the id of a session something else keeps alive.
SessionArg = Union[Session, str]

# Backoff of the retries of acquire and reads: 100 ms doubling up to 5 s,
# at least the server's Retry-After (the Go client's figures).
_RETRY_BASE = 0.1
_RETRY_CEILING = 5.0


class Client:
    """Client talks to one lockd server. One Client may serve many threads.

    ``url`` is the server (``http://127.0.0.1:8080``; https:// for TLS,
    with ``ssl_context`` to trust a private CA). ``api_key`` is sent as
    ``Authorization: Bearer``. ``timeout`` bounds each request in seconds;
    a waiting acquire gets its wait on top. Acquire and the reads retry 503
    answers and connection errors with jittered exponential backoff (at
    least the server's Retry-After), at most ``retries`` times and for at
    most ``retry_for`` seconds past the wait.
    """

    def __init__(
        self,
        url: str,
        api_key: Optional[str] = None,
        timeout: float = 10.0,
        retries: int = 10,
        retry_for: float = 30.0,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        self._t = Transport(url, api_key, ssl_context)
        self.url = self._t.url
        self.timeout = timeout
        self.retries = max(0, retries)
        self.retry_for = max(0.0, retry_for)
        # The server's longest wait (its --max-wait) in seconds, learnt
        # from the first wait it refused as too long (max_ms); None: not
        # known yet.
        self._max_wait: Optional[float] = None
        self.semaphores = Semaphores(self)
        self.elections = Elections(self)
        self.sessions = Sessions(self)
        self._ops = _Ops(self)

    def __repr__(self) -> str:
        key = ", api_key=<set>" if self._t.has_api_key else ""
        return f"lockd.Client({self.url!r}{key})"

    # Locks.

    def acquire(
        self,
        key: str,
        ttl: Optional[float] = None,
        wait: float = 0.0,
        owner: Optional[str] = None,
        value: Any = None,
        mode: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        auto_renew: bool = True,
        on_lost: Optional[OnLost] = None,
        lock_delay: Optional[float] = None,
        session: Optional[SessionArg] = None,
        min_hold: Optional[float] = None,
    ) -> Lease:
        """acquire takes the lock on key and returns its Lease, renewing itself every ttl/3.

        ``ttl`` (default 30) and ``wait`` are in seconds. While another lease holds key,
        the server waits up to ``wait`` (FIFO across every lockd replica),
        then raises LockHeld, or Queued when the key is free but kept for
        requests that began to wait earlier. ``mode`` is "exclusive" (the
        default) or "shared" (a read hold beside other shared holders).
        ``value`` is any JSON for the lock's state; it needs a server with
        values on locks (older ones answer InvalidRequest, field "value").
        ``idempotency_key`` defaults to a new random one per call, which
        makes this call's own retries safe: a retry whose first attempt was
        granted gets that same lease back. ``on_lost(lease, error)`` is
        called once if the lease is lost. ``lock_delay`` (seconds, exclusive
        only) holds the key off for that long after this lease ends by
        expiry or force-release; acquires meanwhile raise LockDelay.
        ``min_hold`` (seconds, exclusive only, at most ``ttl``, not with a
        session) is a hold window, ShedLock's lockAtLeastFor: a release
        earlier than that after the grant ends the lease but keeps the key
        taken, by nobody, until the window ends, so that a job many nodes
        start at once runs once per window; acquires meanwhile raise
        MinHold, and a waiting one is granted when it ends.

        ``session`` (a Session from ``client.session()``, or a session's
        id) puts the grant in that session instead of giving it a TTL
        (``ttl`` must then be left out): it lives as long as the session
        and has no renewer of its own; with a Session it is lost when the
        session is. A session that is gone raises SessionLost.
        """
        body = _lifetime(ttl, session)
        if lock_delay is not None:
            body["lock_delay_ms"] = _ms(lock_delay, "lock_delay")
        if min_hold is not None:
            body["min_hold_ms"] = _ms(min_hold, "min_hold")
        if owner is not None:
            body["owner"] = owner
        if value is not None:
            body["value"] = value
        if mode is not None:
            body["mode"] = mode
        return self._acquire("lock", key, body, wait, idempotency_key, auto_renew, on_lost, session)

    def lock(
        self,
        key: str,
        ttl: Optional[float] = None,
        wait: float = 0.0,
        owner: Optional[str] = None,
        value: Any = None,
        mode: Optional[str] = None,
        on_lost: Optional[OnLost] = None,
        idempotency_key: Optional[str] = None,
        lock_delay: Optional[float] = None,
        session: Optional[SessionArg] = None,
        min_hold: Optional[float] = None,
    ) -> "LeaseContext":
        """lock is acquire as a context manager: it acquires on entry, yields the Lease and releases on exit.

            with client.lock("report:daily", ttl=30, wait=10) as lease:
                for part in parts:
                    lease.check()          # raises LeaseLost once it is lost
                    write(part, fence=lease.fence)

        On exit a lease that was lost raises LeaseLost, unless the block
        raised first: the block's exception is never replaced. With
        ``session=`` the grant lives as long as the session (see acquire);
        the end of the block still releases it.
        """
        return LeaseContext(
            lambda: self.acquire(
                key, ttl=ttl, wait=wait, owner=owner, value=value, mode=mode,
                idempotency_key=idempotency_key, on_lost=on_lost, lock_delay=lock_delay, session=session,
                min_hold=min_hold,
            )
        )

    def lock_many(
        self,
        keys: List[str],
        ttl: Optional[float] = None,
        wait: float = 0.0,
        owner: Optional[str] = None,
        value: Any = None,
        mode: Optional[str] = None,
        auto_renew: bool = True,
        on_lost: Optional[Callable[[LockSet, LeaseLost], None]] = None,
        session: Optional[SessionArg] = None,
    ) -> LockSet:
        """lock_many takes every key of keys (2 … 64 distinct lock keys), or none of them, and returns the LockSet.

        ``mode`` is "exclusive" (the default) or "shared" (every key held
        beside other shared holders).

        It waits up to ``wait`` seconds: sets wait for their keys in one
        order, so two sets never wait for each other, and a waiting set
        holds none of its keys. A key that is not free raises what a lone
        acquire of it would (LockHeld, Queued, LockDelay), naming that key
        (``err.problem["key"]``). The set renews itself every ttl/3 (unless
        auto_renew=False) and is lost when any key is.

        ``session`` (a Session, or a session's id) puts every key in that
        session instead of giving the set a TTL (``ttl`` must then be left
        out), as acquire's does: the set lives as long as the session, has
        no renewer of its own, and with a Session is lost when the session
        is; the session's end releases it.

            with client.lock_many(["account:alice", "account:bob"], ttl=30, wait=10) as s:
                transfer(fence_a=s.fences["account:alice"], fence_b=s.fences["account:bob"])
        """
        body: Dict[str, Any] = {"keys": list(keys)}
        in_session = session if isinstance(session, Session) else None
        if session is not None:
            body.update(_lifetime(ttl, session))
            if in_session is not None:
                in_session.check()
        elif ttl is not None:
            body["ttl_ms"] = _ms(ttl, "ttl")
        if owner is not None:
            body["owner"] = owner
        if value is not None:
            body["value"] = value
        if mode is not None:
            body["mode"] = mode
        wait_until = time.monotonic() + max(0.0, wait)
        sent = 0.0
        asked = 0

        def attempt() -> Dict[str, Any]:
            nonlocal sent, asked
            b = dict(body)
            left = wait_until - time.monotonic()
            for cap in (_ROUND_MAX, self._max_wait, _WAIT_ROUND):
                if cap is not None:
                    left = min(left, cap)
            asked = 0
            if left > 0:
                b["wait_ms"] = asked = _ms(left, "wait")
            sent = time.monotonic()
            return self._t.request("POST", "/v1/lock-sets/acquire", b, timeout=self.timeout + max(left, 0.0))

        while True:
            try:
                answer = self._retrying("acquire lock set", wait_until + self.retry_for, attempt)
                break
            except SessionLost as err:
                if in_session is not None:
                    in_session._lose(err)
                raise
            except InvalidRequest as err:
                max_ms = err.problem.get("max_ms")
                if err.field != "wait_ms" or not isinstance(max_ms, int) or max_ms <= 0 or asked <= max_ms:
                    raise
                self._max_wait = max_ms / 1000.0
            except NotGranted as err:
                if asked <= 0 or isinstance(err, TooManyHolders) or wait_until - time.monotonic() < 0.001:
                    raise
        s = LockSet(self._ops, answer, sent, time.monotonic(), auto_renew=auto_renew and session is None, on_lost=on_lost)
        if in_session is not None:
            in_session._attach(s)
        return s

    def renew(
        self, key: str, token: str, ttl: Optional[float] = None, value: Any = None, proof: Optional[str] = None
    ) -> Dict[str, Any]:
        """renew extends the lease with token on key by ttl seconds (None: its own TTL), once.

        proof is the lease's latest proof (the "proof" of its grant or
        last renewal): sent beside the token, it lets any lockd restore the
        lease should Redis have lost it; keep the answer's for the next call.

        Leases from acquire renew themselves: this is for tokens kept
        elsewhere. A lease that is no longer live raises LeaseLost
        (LeaseNotFound when the key has no live lease at all).
        """
        return self._renew("lock", key, token, ttl, self.timeout, value, proof)

    def release(self, key: str, token: str, proof: Optional[str] = None) -> Dict[str, Any]:
        """release gives back one level of the lease with token on key (proof: as renew's): ``{"key", "released", "count"}``."""
        return self._release("lock", key, token, proof)

    def force_release(self, key: str, fence: Optional[int] = None, reason: Optional[str] = None) -> Dict[str, Any]:
        """force_release breaks every lease on key, or with fence only that holder's (admin scope)."""
        return self._force_release("lock", key, fence, reason)

    def request_release(
        self, key: str, by: Optional[str] = None, reason: Optional[str] = None, fence: Optional[int] = None,
    ) -> Dict[str, Any]:
        """request_release asks the exclusive holder of key to step aside (write scope); the holder decides.

        Its lease learns it on its next renewal (``lease.release_requested``
        is set, ``on_release_request`` called); a lease in a session, on its
        session's next renewal. Answers ``{"key", "owner", "fence",
        "requested_at"}``; NotExclusive when the key is held shared,
        NotFound when nobody holds it.
        """
        body: Dict[str, Any] = {}
        if by is not None:
            body["by"] = by
        if reason is not None:
            body["reason"] = reason
        if fence is not None:
            body["fence"] = fence
        return self._t.request("POST", _KINDS["lock"].path + "/" + _quote(key) + "/request-release", body, timeout=self.timeout)

    def state(self, key: str) -> Dict[str, Any]:
        """state is the live lock on key: mode, holders, queue (never a token); NotFound when it has none."""
        return self._get("lock", "/" + _quote(key), {})

    def list(self, prefix: Optional[str] = None, limit: Optional[int] = None, cursor: Optional[str] = None) -> Dict[str, Any]:
        """list is one page of live locks: ``{"locks": [...], "next_cursor": ...}``; pass next_cursor back for the next."""
        return self._get("lock", "", {"prefix": prefix, "limit": limit, "cursor": cursor})

    def history(self, key: str, limit: Optional[int] = None, event_type: Optional[str] = None) -> Dict[str, Any]:
        """history is the key's recent lifecycle events, newest first (``event_type`` filters)."""
        return self._get("lock", "/" + _quote(key) + "/history", {"limit": limit, "type": event_type})

    def renewals(self, key: str, limit: Optional[int] = None) -> Dict[str, Any]:
        """renewals is the key's last renewals, each with the time its lease had left."""
        return self.history(key, limit, "renewed")

    # Semaphores: the context manager here, beside lock; the rest is on
    # client.semaphores.

    def semaphore(
        self,
        name: str,
        limit: int,
        ttl: Optional[float] = None,
        wait: float = 0.0,
        owner: Optional[str] = None,
        value: Any = None,
        on_lost: Optional[OnLost] = None,
        idempotency_key: Optional[str] = None,
        session: Optional[SessionArg] = None,
    ) -> "LeaseContext":
        """semaphore takes a permit of name (at most limit held at once) on entry and releases it on exit.

            with client.semaphore("render:pool", limit=4, wait=60) as permit:
                render(fence=permit.fence)

        The permit is a Lease like a lock's. Every holder of a semaphore
        must use the same limit (else LimitMismatch); no permit free after
        ``wait`` raises NoPermits. ``session=`` puts the permit in a
        session, as for acquire.
        """
        return LeaseContext(
            lambda: self.semaphores.acquire(
                name, limit, ttl=ttl, wait=wait, owner=owner, value=value,
                idempotency_key=idempotency_key, on_lost=on_lost, session=session,
            )
        )

    # Elections: campaign, leader and observe here; the rest is on
    # client.elections too.

    def campaign(
        self,
        name: str,
        ttl: Optional[float] = None,
        wait: Optional[float] = None,
        candidate: Optional[str] = None,
        value: Any = None,
        on_lost: Optional[OnLost] = None,
        lock_delay: Optional[float] = None,
        idempotency_key: Optional[str] = None,
        session: Optional[SessionArg] = None,
    ) -> "LeaseContext":
        """campaign waits in line to lead the election name, yields the leadership as a Lease and resigns on exit.

            with client.campaign("billing:leader", ttl=10, candidate="host-a", value={"addr": addr}) as lead:
                while not lead.lost.is_set():
                    serve(term=lead.term)      # pass the term to what the leader writes to

        The leadership renews itself every ttl/3 and is lost as a lock's
        lease is (``lead.lost``, ``on_lost``, ``lead.check()``); leaving
        the block of a lost leadership raises LeaseLost. ``wait`` is in
        seconds, None (the default) as long as it takes; candidates lead in
        the order they began to campaign, across every lockd replica. After
        ``wait``, LockHeld (someone leads) or Queued (earlier candidates
        come first). ``candidate`` is shown as the leader (default: the API
        key's name or the caller's address), ``value`` any JSON that
        observers and ``leader()`` see; ``lead.proclaim(value)`` replaces it.
        ``session=`` makes the leadership live as long as a session, as for
        acquire (a leader whose session lapses stops leading with it).
        """
        return LeaseContext(
            lambda: self.elections.campaign(
                name, ttl=ttl, wait=wait, candidate=candidate, value=value, on_lost=on_lost,
                lock_delay=lock_delay, idempotency_key=idempotency_key, session=session,
            )
        )

    def leader(self, name: str) -> Dict[str, Any]:
        """leader is who leads the election name: ``{"key", "leader", "value", "term", "since", "expires_at", "remaining_ms", "candidates"}``.

        NotFound when nobody leads and nobody campaigns. Candidates waiting
        while nobody leads (a lock-delay, or the instant of a hand-over)
        give a state without "leader".
        """
        return self.elections.leader(name)

    def observe(self, name: str, timeout: Optional[float] = None) -> Observer:
        """observe follows the election name: an Observer of ``(event, change)``, the current leader (or vacant) first.

            with client.observe("billing:leader") as changes:
                for event, change in changes:   # "leader", "proclaimed", "vacant"
                    print(event, change["term"], change.get("leader"))

        ``timeout`` bounds the wait for each change (then TimeoutError);
        see Observer.
        """
        return self.elections.observe(name, timeout=timeout)

    def resign(self, name: str, token: str, proof: Optional[str] = None) -> Dict[str, Any]:
        """resign ends the leadership with token: ``{"key", "resigned"}``; the next candidate leads at once.

        A token that no longer leads raises LeaseLost (LeaseNotFound when
        nobody leads). Leaderships from campaign resign on exit: this is
        for tokens kept elsewhere (proof: its latest, as for renew).
        """
        return self.elections.resign(name, token, proof)

    def election_history(self, name: str, limit: Optional[int] = None, event_type: Optional[str] = None) -> Dict[str, Any]:
        """election_history is the election's recent events, newest first: terms begun, resigned, lapsed, broken, proclaimed."""
        return self.elections.history(name, limit, event_type)

    # Sessions: the keep-alive here; the bare operations by id on
    # client.sessions.

    def session(
        self,
        ttl: float = _DEFAULT_TTL,
        owner: Optional[str] = None,
        on_lost: Optional[OnSessionLost] = None,
        auto_renew: bool = True,
    ) -> Session:
        """session starts a session and returns it, renewing itself every ttl/3: one keep-alive for many grants.

            with client.session(ttl=10, owner="worker-7") as s:
                with client.lock("a", session=s), client.semaphore("pool", limit=4, session=s):
                    work()                     # s.lost (or s.check()) as for a lease

        Pass it as ``session=`` to acquire, lock, semaphore or campaign:
        the grant lives as long as the session. The end of the block (or
        ``s.end()``) ends the session and the server releases every grant
        in it at once; a session nobody renews lapses after ``ttl``
        seconds and takes them with it. It is lost as a lease is
        (``s.lost``, ``s.error``, ``on_lost(session, error)``,
        ``s.check()``, SessionLost on leaving the block), and every lease
        in it with it. ``owner`` labels it (default: the API key's name or
        the caller's address). Creating it retries as acquire does.
        """
        body: Dict[str, Any] = {"ttl_ms": _ms(ttl, "ttl")}
        if owner is not None:
            body["owner"] = owner
        sent = 0.0

        def attempt() -> Dict[str, Any]:
            nonlocal sent
            sent = time.monotonic()
            return self._t.request("POST", "/v1/sessions", body, timeout=self.timeout)

        answer = self._retrying("POST /v1/sessions", time.monotonic() + self.retry_for, attempt)
        arrived = time.monotonic()
        if not isinstance(answer.get("session"), str):
            raise Unavailable("POST /v1/sessions: the answer has no session id; not lockd's")
        return Session(self._ops, answer, sent, auto_renew=auto_renew, on_lost=on_lost, arrived=arrived)

    # The work, once for every kind.

    def _acquire(
        self,
        kind: str,
        key: str,
        body: Dict[str, Any],
        wait: float,
        idempotency_key: Optional[str],
        auto_renew: bool,
        on_lost: Optional[OnLost],
        session: Optional[SessionArg] = None,
    ) -> Lease:
        """_acquire sends an acquire until it is answered, each retry with what is left of the wait.

        The Idempotency-Key is the same on every attempt of this call: an
        attempt whose answer was lost after the server granted it is
        answered, on retry, with that same lease (``replayed``) rather than
        409 by a lease held by ourselves. A grant in a Session joins it;
        a lost Session is not asked for, and one the server says is gone
        is lost.

        A wait longer than the server's longest (its --max-wait, which a
        400 on wait_ms states as max_ms) goes in rounds of at most that,
        with the same Idempotency-Key: the server keeps the request's place
        in line and its waiting-since from one round to the next.
        """
        in_session = session if isinstance(session, Session) else None
        if in_session is not None:
            in_session.check()
        path = _KINDS[kind].path + "/" + _quote(key) + "/" + _KINDS[kind].acquire
        headers = {"Idempotency-Key": idempotency_key or secrets.token_urlsafe(18)}
        first = time.monotonic()  # an answer that replays an earlier attempt's grant: no earlier than this
        wait_until = first + max(0.0, wait)
        sent = 0.0
        asked = 0  # the wait_ms of the last attempt

        def attempt() -> Dict[str, Any]:
            nonlocal sent, asked
            b = dict(body)
            left = wait_until - time.monotonic()
            for cap in (_ROUND_MAX, self._max_wait, _WAIT_ROUND):
                if cap is not None:
                    left = min(left, cap)
            asked = 0
            if left > 0:
                b["wait_ms"] = asked = _ms(left, "wait")
            sent = time.monotonic()
            return self._t.request("POST", path, b, headers, timeout=self.timeout + max(left, 0.0))

        while True:
            try:
                answer = self._retrying(f"acquire {kind} {key}", wait_until + self.retry_for, attempt)
                break
            except SessionLost as err:
                if in_session is not None:
                    in_session._lose(err)
                raise
            except InvalidRequest as err:
                max_ms = err.problem.get("max_ms")
                if err.field != "wait_ms" or not isinstance(max_ms, int) or max_ms <= 0 or asked <= max_ms:
                    raise
                self._max_wait = max_ms / 1000.0  # the server's longest wait: rounds of it
            except NotGranted as err:
                if asked <= 0 or isinstance(err, TooManyHolders) or wait_until - time.monotonic() < 0.001:
                    raise
                # A round ended; the wait goes on, in the same place.
        arrived = time.monotonic()
        if answer.get("replayed"):
            sent = first  # granted to an earlier attempt whose answer was lost
        lease = Lease(
            self._ops,
            kind,
            answer,
            sent,
            auto_renew=auto_renew and session is None,
            on_lost=on_lost,
            session=in_session,
            arrived=arrived,
        )
        if in_session is not None:
            in_session._attach(lease)
        return lease

    def _renew(
        self, kind: str, key: str, token: str, ttl: Optional[float], timeout: float, value: Any = None,
        proof: Optional[str] = None,
    ) -> Dict[str, Any]:
        body: Dict[str, Any] = {"token": token}
        if ttl is not None:
            body["ttl_ms"] = _ms(ttl, "ttl")
        if value is not None:
            body["value"] = value
        if proof:
            body["proof"] = proof
        return self._lease_call(kind, key, "renew", body, timeout)

    def _release(self, kind: str, key: str, token: str, proof: Optional[str] = None) -> Dict[str, Any]:
        body: Dict[str, Any] = {"token": token}
        if proof:
            body["proof"] = proof
        return self._lease_call(kind, key, _KINDS[kind].release, body, self.timeout)

    def _lease_call(self, kind: str, key: str, op: str, body: Dict[str, Any], timeout: float) -> Dict[str, Any]:
        """_lease_call is a renew, release or proclaim: once, since a retried release could give back two levels."""
        try:
            return self._t.request("POST", _KINDS[kind].path + "/" + _quote(key) + "/" + op, body, timeout=timeout)
        except NotFound as err:
            # No live lease on the key: for the token's holder, the lease is
            # lost as surely as with 409 lease_lost.
            raise LeaseNotFound(err.detail, status=err.status, code=err.code, problem=err.problem) from None

    def _session_call(self, method: str, session_id: str, op: str, timeout: float) -> Dict[str, Any]:
        """_session_call is one request on /v1/sessions/{id}[op], named without the id in every message."""
        return self._t.request(
            method, "/v1/sessions/" + _quote(session_id) + op, None, timeout=timeout,
            label=f"{method} /v1/sessions/{{id}}{op}",
        )

    def _force_release(self, kind: str, key: str, fence: Optional[int], reason: Optional[str]) -> Dict[str, Any]:
        body: Dict[str, Any] = {}
        if fence is not None:
            body["fence"] = fence
        if reason is not None:
            body["reason"] = reason
        return self._t.request("POST", _KINDS[kind].path + "/" + _quote(key) + "/force-release", body, timeout=self.timeout)

    def _get(self, kind: str, path: str, query: Dict[str, Any]) -> Dict[str, Any]:
        """_get reads, retrying as acquire does: a read changes nothing."""
        q = urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        full = _KINDS[kind].path + path + ("?" + q if q else "")
        return self._retrying(
            f"GET {full}", time.monotonic() + self.retry_for,
            lambda: self._t.request("GET", full, timeout=self.timeout),
        )

    def _retrying(self, what: str, give_up: float, call: Callable[[], T]) -> T:
        """_retrying calls until an answer that is not Unavailable, at most retries more times and until give_up."""
        attempt = 0
        while True:
            try:
                return call()
            except Unavailable as err:
                if attempt >= self.retries:
                    raise
                d = backoff(attempt, _RETRY_BASE, _RETRY_CEILING, err.retry_after)
                if time.monotonic() + d > give_up:
                    raise
                log.warning("%s: %s; retry %d in %.2f s", what, err, attempt + 1, d)
                attempt += 1
                time.sleep(d)


class _Ops:
    """_Ops is what the client's leases and sessions ask of it (LeaseOps, SessionOps): its requests, under its timeout as it is now."""

    def __init__(self, client: Client) -> None:
        self._c = client

    @property
    def timeout(self) -> float:
        return self._c.timeout

    def renew(self, kind: str, key: str, token: str, ttl: float, timeout: float, proof: Optional[str]) -> Dict[str, Any]:
        return self._c._renew(kind, key, token, ttl, timeout, proof=proof)

    def set_call(self, op: str, body: Dict[str, Any], timeout: float) -> Dict[str, Any]:
        """set_call is a lock set's renew or release: once, as a lease's."""
        return self._c._t.request("POST", "/v1/lock-sets/" + op, body, timeout=timeout)

    def proclaim(self, key: str, token: str, value: Any, proof: Optional[str]) -> Dict[str, Any]:
        body: Dict[str, Any] = {"token": token, "value": value}
        if proof:
            body["proof"] = proof
        return self._c._lease_call("election", key, "proclaim", body, self._c.timeout)

    def handover(self, key: str, token: str, to: str) -> Dict[str, Any]:
        return self._c._lease_call("election", key, "handover", {"token": token, "to": to}, self._c.timeout)

    def release(self, kind: str, key: str, token: str, proof: Optional[str]) -> Dict[str, Any]:
        return self._c._release(kind, key, token, proof)

    def call(self, method: str, session_id: str, op: str, timeout: float) -> Dict[str, Any]:
        return self._c._session_call(method, session_id, op, timeout)

    def read(self, session_id: str) -> Dict[str, Any]:
        return self._c.sessions.get(session_id)


class Semaphores:
    """Semaphores are the semaphore operations: ``client.semaphores``.

    At most ``limit`` permits of a semaphore are held at once, each its own
    Lease (token, fence, TTL, renewals, release). A semaphore and a lock of
    the same name are unrelated.
    """

    def __init__(self, client: Client) -> None:
        self._c = client

    def acquire(
        self,
        name: str,
        limit: int,
        ttl: Optional[float] = None,
        wait: float = 0.0,
        owner: Optional[str] = None,
        value: Any = None,
        idempotency_key: Optional[str] = None,
        auto_renew: bool = True,
        on_lost: Optional[OnLost] = None,
        session: Optional[SessionArg] = None,
    ) -> Lease:
        """acquire takes a permit (limit 1 ... 10000), waiting up to wait seconds; NoPermits when none came free.

        ``ttl`` defaults to 30 s; ``session=`` puts the permit in a
        session instead (see Client.acquire).
        """
        body: Dict[str, Any] = {"limit": limit, **_lifetime(ttl, session)}
        if owner is not None:
            body["owner"] = owner
        if value is not None:
            body["value"] = value
        return self._c._acquire("semaphore", name, body, wait, idempotency_key, auto_renew, on_lost, session)

    def renew(self, name: str, token: str, ttl: Optional[float] = None, proof: Optional[str] = None) -> Dict[str, Any]:
        """renew extends the permit with token (and its latest proof, see Client.renew), once; LeaseLost when it is no longer live."""
        return self._c._renew("semaphore", name, token, ttl, self._c.timeout, proof=proof)

    def release(self, name: str, token: str, proof: Optional[str] = None) -> Dict[str, Any]:
        """release gives back one level of the permit with token (and its latest proof)."""
        return self._c._release("semaphore", name, token, proof)

    def force_release(self, name: str, fence: Optional[int] = None, reason: Optional[str] = None) -> Dict[str, Any]:
        """force_release breaks every permit, or with fence only that one (admin scope)."""
        return self._c._force_release("semaphore", name, fence, reason)

    def state(self, name: str) -> Dict[str, Any]:
        """state is the semaphore: limit, holders, queue (never a token); NotFound when no permit is held."""
        return self._c._get("semaphore", "/" + _quote(name), {})

    def list(self, prefix: Optional[str] = None, limit: Optional[int] = None, cursor: Optional[str] = None) -> Dict[str, Any]:
        """list is one page of semaphores with a permit held: ``{"semaphores": [...], "next_cursor": ...}``."""
        return self._c._get("semaphore", "", {"prefix": prefix, "limit": limit, "cursor": cursor})

    def history(self, name: str, limit: Optional[int] = None, event_type: Optional[str] = None) -> Dict[str, Any]:
        """history is every permit's recent lifecycle events, newest first."""
        return self._c._get("semaphore", "/" + _quote(name) + "/history", {"limit": limit, "type": event_type})

    def renewals(self, name: str, limit: Optional[int] = None) -> Dict[str, Any]:
        """renewals is the permits' last renewals."""
        return self.history(name, limit, "renewed")


class Elections:
    """Elections are the election operations: ``client.elections``.

    An election has one leader at a time, candidates served in the order
    they began to campaign (across every lockd replica), and every
    leadership numbered by a term that strictly increases: the
    leadership's fence. The leadership is a Lease (``term``, ``leader``,
    ``proclaim``; release resigns). An election and a lock of the same
    name are unrelated.
    """

    def __init__(self, client: Client) -> None:
        self._c = client

    def campaign(
        self,
        name: str,
        ttl: Optional[float] = None,
        wait: Optional[float] = None,
        candidate: Optional[str] = None,
        value: Any = None,
        lock_delay: Optional[float] = None,
        idempotency_key: Optional[str] = None,
        auto_renew: bool = True,
        on_lost: Optional[OnLost] = None,
        session: Optional[SessionArg] = None,
    ) -> Lease:
        """campaign waits in line up to wait seconds (None: as long as it takes) to lead name; the leadership, renewing itself.

        After the wait, LockHeld (someone leads) or Queued (earlier
        candidates come first). Without a wait, it waits as long as it
        takes, in rounds of the longest wait the server takes, keeping its
        place in line. ``ttl`` defaults to 30 s; ``session=`` makes the
        leadership live as long as a session instead (see Client.acquire).
        """
        body = _lifetime(ttl, session)
        if candidate is not None:
            body["candidate"] = candidate
        if value is not None:
            body["value"] = value
        if lock_delay is not None:
            body["lock_delay_ms"] = _ms(lock_delay, "lock_delay")
        if wait is None:
            wait = _FOREVER
        return self._c._acquire("election", name, body, wait, idempotency_key, auto_renew, on_lost, session)

    def renew(
        self, name: str, token: str, ttl: Optional[float] = None, value: Any = None, proof: Optional[str] = None
    ) -> Dict[str, Any]:
        """renew extends the leadership with token (and its latest proof, see Client.renew), once (a value proclaims it too); LeaseLost when it no longer leads."""
        return self._c._renew("election", name, token, ttl, self._c.timeout, value, proof)

    def proclaim(self, name: str, token: str, value: Any, proof: Optional[str] = None) -> Dict[str, Any]:
        """proclaim sets the value of the leadership with token, keeping it: the Leadership; LeaseLost when it no longer leads."""
        return self._c._ops.proclaim(name, token, value, proof)

    def resign(self, name: str, token: str, proof: Optional[str] = None) -> Dict[str, Any]:
        """resign ends the leadership with token: ``{"key", "resigned"}``; LeaseLost when it no longer leads."""
        return self._c._release("election", name, token, proof)

    def force_release(self, name: str, fence: Optional[int] = None, reason: Optional[str] = None) -> Dict[str, Any]:
        """force_release breaks the leadership (with fence: only that term's) so the next candidate leads (admin scope)."""
        return self._c._force_release("election", name, fence, reason)

    def leader(self, name: str) -> Dict[str, Any]:
        """leader is the election's state: leader, value, term, since, expires_at, candidates (never a token); NotFound when nobody leads or campaigns."""
        return self._c._get("election", "/" + _quote(name), {})

    state = leader

    def list(self, prefix: Optional[str] = None, limit: Optional[int] = None, cursor: Optional[str] = None) -> Dict[str, Any]:
        """list is one page of elections with a leader: ``{"elections": [...], "next_cursor": ...}``."""
        return self._c._get("election", "", {"prefix": prefix, "limit": limit, "cursor": cursor})

    def history(self, name: str, limit: Optional[int] = None, event_type: Optional[str] = None) -> Dict[str, Any]:
        """history is the election's recent events, newest first: acquired, released (resigned), expired, force_released, proclaimed."""
        return self._c._get("election", "/" + _quote(name) + "/history", {"limit": limit, "type": event_type})

    def observe(self, name: str, timeout: Optional[float] = None) -> Observer:
        """observe opens the election's event stream: an Observer of ``(event, change)`` pairs (see Client.observe).

        Opening it retries as reads do; the stream itself is not retried:
        observe again, and the first change says where things stand.
        """
        if timeout is not None and timeout <= 0:
            raise ValueError(f"lockd: timeout must be positive, got {timeout}")
        path = _KINDS["election"].path + "/" + _quote(name) + "/observe"
        conn, resp = self._c._retrying(
            f"GET {path}", time.monotonic() + self._c.retry_for,
            lambda: self._c._t.stream(path, timeout=self._c.timeout),
        )
        return Observer(name, conn, resp, timeout)


class Sessions:
    """Sessions are the session operations by id: ``client.sessions``.

    ``client.session()`` is the usual way: a Session that renews itself
    and whose loss is its leases'. These are for a session that something
    else keeps alive (another process, a script's ``lockd session
    renew``): pass its id as ``session=`` to acquire. Every answer is the
    API's session (``owner``, ``ttl_ms``, ``created_at``, ``expires_at``,
    ``holds``); a session that is gone raises SessionLost. The id is a
    secret like a token: it is in create's answer (``"session"``) and in
    no message.
    """

    def __init__(self, client: Client) -> None:
        self._c = client

    def create(self, ttl: Optional[float] = None, owner: Optional[str] = None) -> Dict[str, Any]:
        """create starts a session without a keep-alive: its id is the answer's ``"session"``; ``ttl`` defaults to the server's (30 s)."""
        body: Dict[str, Any] = {}
        if ttl is not None:
            body["ttl_ms"] = _ms(ttl, "ttl")
        if owner is not None:
            body["owner"] = owner
        return self._c._retrying(
            "POST /v1/sessions", time.monotonic() + self._c.retry_for,
            lambda: self._c._t.request("POST", "/v1/sessions", body, timeout=self._c.timeout),
        )

    def get(self, session_id: str) -> Dict[str, Any]:
        """get reads the session: its expiry and what it holds (``holds``: ``{"kind", "key"}`` each)."""
        return self._c._retrying(
            "GET /v1/sessions/{id}", time.monotonic() + self._c.retry_for,
            lambda: self._c._session_call("GET", session_id, "", self._c.timeout),
        )

    def renew(self, session_id: str) -> Dict[str, Any]:
        """renew keeps the session and every grant in it alive for its TTL from now, once."""
        return self._c._session_call("POST", session_id, "/renew", self._c.timeout)

    def end(self, session_id: str) -> Dict[str, Any]:
        """end ends the session, once: every grant in it is released at once; the answer lists what it held."""
        return self._c._session_call("DELETE", session_id, "", self._c.timeout)


class LeaseContext:
    """LeaseContext acquires on entry, yields the Lease and releases it on exit (Client.lock, semaphore, campaign)."""

    def __init__(self, acquire: Callable[[], Lease]) -> None:
        self._acquire = acquire
        self._lease: Optional[Lease] = None

    def __enter__(self) -> Lease:
        if self._lease is not None:
            raise RuntimeError("lockd: this context is already in use; call client.lock() (or semaphore, campaign) again")
        self._lease = self._acquire()
        return self._lease

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        assert self._lease is not None
        self._lease.__exit__(exc_type, exc, tb)


def _quote(key: str) -> str:
    """_quote escapes a key for the path: lockd decodes it once."""
    return urllib.parse.quote(key, safe="")


def _lifetime(ttl: Optional[float], session: Optional[SessionArg]) -> Dict[str, Any]:
    """_lifetime is what keeps a grant: its TTL (default 30 s), or the session it is in."""
    if session is None:
        return {"ttl_ms": _ms(_DEFAULT_TTL if ttl is None else ttl, "ttl")}
    if ttl is not None:
        raise ValueError("lockd: ttl and session exclude each other: a grant in a session lives as long as the session")
    if isinstance(session, Session):
        return {"session": session.id}
    if not isinstance(session, str):
        raise TypeError(f"lockd: session must be a lockd.Session or a session's id, not {type(session).__name__}")
    return {"session": session}


def _ms(seconds: float, name: str) -> int:
    """_ms is seconds as whole milliseconds, as the API counts them."""
    if seconds < 0:
        raise ValueError(f"lockd: {name} must not be negative, got {seconds}")
    return int(round(seconds * 1000))
