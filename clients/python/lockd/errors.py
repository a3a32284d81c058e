"""Errors: one class per problem code of lockd's API.

Every error answer of lockd is an RFC 9457 problem (application/problem+json)
with a machine-readable ``code``; ``error_for`` turns it into the class of
that code, so that callers catch what they mean (``LockHeld``,
``LeaseLost``, ...) and read the fields they need. A code this client does
not know (a newer server) becomes a plain ``LockdError`` (``Unavailable``
for a 5xx), never a crash.

No message built here holds a token or an API key: the server never puts
one in a problem, and the client's own messages name only keys and owners.
"""

from __future__ import annotations

import email.utils
import http
import time
from typing import Any, ClassVar, Dict, Mapping, Optional, Type

__all__ = [
    "LockdError",
    "InvalidRequest",
    "Unsupported",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "MethodNotAllowed",
    "NotGranted",
    "LockHeld",
    "LockDelay",
    "MinHold",
    "Queued",
    "NoPermits",
    "TooManyHolders",
    "LimitMismatch",
    "ModeMismatch",
    "NotExclusive",
    "NotCandidate",
    "InLockSet",
    "LeaseLost",
    "LeaseNotFound",
    "SessionLost",
    "IdempotencyMismatch",
    "PayloadTooLarge",
    "UnsupportedMediaType",
    "TooManyRequests",
    "Unavailable",
    "Unreachable",
    "BackendUnavailable",
    "BackendRecovering",
    "InternalError",
    "error_for",
    "parse_retry_after",
    "PROBLEM_CLASSES",
]


class LockdError(Exception):
    """LockdError is any error of lockd or of talking to it.

    ``status`` is the HTTP status (None when no answer came), ``code`` the
    problem's code (None when the answer had none), ``detail`` the
    problem's human-readable detail, ``problem`` the whole problem body as a
    dict, and ``retry_after`` the server's Retry-After in seconds (or None).
    """

    # CODE is the problem code this class stands for; None for the bases.
    CODE: ClassVar[Optional[str]] = None

    def __init__(
        self,
        detail: str,
        *,
        status: Optional[int] = None,
        code: Optional[str] = None,
        problem: Optional[Mapping[str, Any]] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status
        self.code = code if code is not None else self.CODE
        self.problem: Dict[str, Any] = dict(problem or {})
        self.retry_after = retry_after

    def __str__(self) -> str:
        tag = " ".join(str(p) for p in (self.status, self.code) if p is not None)
        return f"{self.detail} ({tag})" if tag else self.detail

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.detail!r}, status={self.status!r}, code={self.code!r})"


class InvalidRequest(LockdError):
    """InvalidRequest: the request breaks the contract (400); ``field`` names the field at fault."""

    CODE = "invalid_request"

    @property
    def field(self) -> Optional[str]:
        return self.problem.get("field")


class Unsupported(LockdError):
    """Unsupported: this server cannot do it (400), e.g. semaphores or shared holds under Redlock."""

    CODE = "unsupported"


class Unauthorized(LockdError):
    """Unauthorized: the API key is missing or unknown (401)."""

    CODE = "unauthorized"


class Forbidden(LockdError):
    """Forbidden: the API key lacks the scope or the key's prefix (403)."""

    CODE = "forbidden"


class NotFound(LockdError):
    """NotFound: no live lease on the key, or no live permit of the semaphore (404)."""

    CODE = "not_found"


class MethodNotAllowed(LockdError):
    """MethodNotAllowed: the path has no such method (405)."""

    CODE = "method_not_allowed"


class NotGranted(LockdError):
    """NotGranted is the base of the 409s that mean "not now": try again later.

    ``retry_after`` says when it is worth asking again.
    """


class LockHeld(NotGranted):
    """LockHeld: another lease holds the key (409).

    ``holder`` is its owner, ``remaining`` the seconds its lease has left.
    """

    CODE = "lock_held"

    @property
    def holder(self) -> Optional[str]:
        return self.problem.get("holder")

    @property
    def remaining(self) -> Optional[float]:
        ms = self.problem.get("remaining_ms")
        return None if ms is None else ms / 1000.0


class Queued(NotGranted):
    """Queued: nobody holds the key, but earlier waiters come first (409).

    ``waiters`` is how many are queued, ``next`` the first of them
    (``{"owner", "waiting_since"}``). A waiter holds nothing, so there is
    no holder.
    """

    CODE = "queued"

    @property
    def waiters(self) -> Optional[int]:
        return self.problem.get("waiters")

    @property
    def next(self) -> Optional[Dict[str, Any]]:
        return self.problem.get("next")


class NoPermits(NotGranted):
    """NoPermits: every permit of the semaphore is held (409).

    ``holder`` and ``remaining`` describe the permit that ends first.
    """

    CODE = "no_permits"

    @property
    def holder(self) -> Optional[str]:
        return self.problem.get("holder")

    @property
    def remaining(self) -> Optional[float]:
        ms = self.problem.get("remaining_ms")
        return None if ms is None else ms / 1000.0


class LockDelay(NotGranted):
    """LockDelay: the key's last lease ended by expiry or force-release and its lock-delay has not passed (409).

    ``remaining`` is the seconds it still lasts.
    """

    CODE = "lock_delay"

    @property
    def remaining(self) -> Optional[float]:
        ms = self.problem.get("remaining_ms")
        return None if ms is None else ms / 1000.0


class MinHold(NotGranted):
    """MinHold: the key's holder released it inside its hold window, which keeps it taken, by nobody, until it ends (409).

    ``remaining`` is the seconds the window still lasts.
    """

    CODE = "min_hold"

    @property
    def remaining(self) -> Optional[float]:
        ms = self.problem.get("remaining_ms")
        return None if ms is None else ms / 1000.0


class TooManyHolders(NotGranted):
    """TooManyHolders: the key has as many shared holders or permits as one key may (409)."""

    CODE = "too_many_holders"


class LimitMismatch(LockdError):
    """LimitMismatch: the semaphore is held with another limit (409); every holder must use the same one."""

    CODE = "limit_mismatch"


class ModeMismatch(LockdError):
    """ModeMismatch: a re-entry asked for another mode than the lease's (409)."""

    CODE = "mode_mismatch"


class NotExclusive(LockdError):
    """NotExclusive: request_release found the key held shared (409); its holders hold together, and nobody was asked."""

    CODE = "not_exclusive"


class NotCandidate(LockdError):
    """NotCandidate: a handover named a candidate that is not campaigning (409); the leader still leads."""

    CODE = "not_candidate"


class InLockSet(LockdError):
    """InLockSet: a renew, release or re-entry of one key with a lock set's token (409); a set is held whole, nothing was changed.

    Renew or release the set (LockSet.renew, LockSet.release) instead.
    """

    CODE = "in_lock_set"


class LeaseLost(LockdError):
    """LeaseLost: the lease is no longer yours. Stop the protected work.

    The server says so with 409 ``lease_lost`` (the token is not the live
    one); the client also raises it when renewals failed until the lease
    expired by its own clock (then ``status`` is None).
    """

    CODE = "lease_lost"


class LeaseNotFound(LeaseLost, NotFound):
    """LeaseNotFound: a renew or release found no live lease on the key (404).

    For the holder of a token that is the same news as LeaseLost, so it is
    one; it is also a NotFound, which is the problem's code.
    """

    CODE = "not_found"


class SessionLost(LeaseLost, NotFound):
    """SessionLost: the session is gone, and every grant in it. Stop the protected work.

    The server says so with 404 ``session_not_found`` (the session ended,
    lapsed or never existed: a renew, an end, a read, or an acquire in
    it); the client also raises it when the session's renewals failed
    until it expired by the client's own clock (then ``status`` is None).
    A lease in a lost session is lost with this error too. It is a
    LeaseLost, since every grant in the session is lost with it, and a
    NotFound, which is the problem's status.
    """

    CODE = "session_not_found"


class IdempotencyMismatch(LockdError):
    """IdempotencyMismatch: the Idempotency-Key belongs to a live lease acquired with other fields (409)."""

    CODE = "idempotency_mismatch"


class PayloadTooLarge(LockdError):
    """PayloadTooLarge: the body is over the server's limit (413)."""

    CODE = "payload_too_large"


class UnsupportedMediaType(LockdError):
    """UnsupportedMediaType: the body is not JSON (415)."""

    CODE = "unsupported_media_type"


class TooManyRequests(LockdError):
    """TooManyRequests: a cap or an API key's quota is reached (429); see ``retry_after``."""

    CODE = "too_many_requests"


class Unavailable(LockdError):
    """Unavailable: the server could not be reached or answered 5xx.

    These are the errors worth retrying; the client retries them on
    acquire and on reads, with backoff.
    """


class Unreachable(Unavailable):
    """Unreachable: no answer came (connection refused or reset, timeout)."""


class BackendUnavailable(Unavailable):
    """BackendUnavailable: lockd cannot reach Redis, or it is shutting down (503)."""

    CODE = "backend_unavailable"


class BackendRecovering(Unavailable):
    """BackendRecovering: Redis lost its data and lockd grants nothing until forgotten leases expired (503)."""

    CODE = "backend_recovering"


class InternalError(Unavailable):
    """InternalError: a fault of lockd's (500); the server logged it."""

    CODE = "internal"


# PROBLEM_CLASSES maps every problem code of the API to its class.
PROBLEM_CLASSES: Dict[str, Type[LockdError]] = {
    cls.CODE: cls
    for cls in (
        InvalidRequest,
        Unsupported,
        Unauthorized,
        Forbidden,
        NotFound,
        MethodNotAllowed,
        LockHeld,
        LockDelay,
        MinHold,
        Queued,
        NoPermits,
        TooManyHolders,
        LimitMismatch,
        ModeMismatch,
        NotExclusive,
        NotCandidate,
        InLockSet,
        LeaseLost,
        SessionLost,
        IdempotencyMismatch,
        PayloadTooLarge,
        UnsupportedMediaType,
        TooManyRequests,
        BackendUnavailable,
        BackendRecovering,
        InternalError,
    )
    if cls.CODE is not None
}

# By status, for answers without a code we know (a proxy's 502, a newer
# server's code).
_BY_STATUS: Dict[int, Type[LockdError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    429: TooManyRequests,
}


def error_for(status: int, problem: Mapping[str, Any], retry_after: Optional[float]) -> LockdError:
    """error_for is the error for a non-2xx answer: its status, its problem body (may be empty) and Retry-After."""
    code = problem.get("code")
    cls = PROBLEM_CLASSES.get(code) if isinstance(code, str) else None
    if cls is None:
        cls = Unavailable if status >= 500 else _BY_STATUS.get(status, LockdError)
    detail = problem.get("detail") or problem.get("title")
    if not isinstance(detail, str) or not detail:
        try:
            detail = http.HTTPStatus(status).phrase
        except ValueError:
            detail = f"HTTP {status}"
    return cls(
        detail,
        status=status,
        code=code if isinstance(code, str) else None,
        problem=problem,
        retry_after=retry_after,
    )


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """parse_retry_after reads a Retry-After header: delay-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())
