"""lockd: a client of the lockd lock server, on Python's standard library alone.

    import lockd

    client = lockd.Client("http://127.0.0.1:8080", api_key=None)
    with client.lock("report:daily", ttl=30, wait=10) as lease:
        build_report(fence=lease.fence)   # lease.lost is set if the lease is lost

A lease renews itself every ttl/3 in a daemon thread until it is released.
A renew answered 404 or 409 loses it at once; other failures (503, no
answer) are retried until the lease's expiry by this process's clock, then
it is lost. Loss sets ``lease.lost`` (a threading.Event), calls the
optional ``on_lost`` callback, and makes ``lease.check()`` raise LeaseLost.

Acquire and the reads retry 503 answers and connection errors with jittered
backoff; every acquire carries an Idempotency-Key so that its retries never
grant twice. Errors are one class per problem code of the API (see
lockd.errors). Tokens and API keys never appear in a repr, a message or a
log line (the "lockd" logger).

Elections: ``client.campaign(name, ...)`` is a context manager that waits
in line to lead and yields the leadership, a Lease whose ``term`` (its
fence) strictly increases per election; it renews itself, resigns on exit,
and ``proclaim(value)`` sets its value. ``client.leader(name)`` reads who
leads; ``client.observe(name)`` iterates over the changes (leader,
proclaimed, vacant) as they happen.

Sessions: ``client.session(ttl=...)`` starts a Session, one keep-alive
for many grants, renewing itself every ttl/3 and lost as a lease is
(``session.lost``, ``on_lost``, ``session.check()`` raising SessionLost).
``session=`` on acquire, lock, semaphore or campaign puts the grant in it:
the grant has no renewer of its own, lives as long as the session and is
lost with it; ending the session (``end()``, or the end of its ``with``
block) releases every grant in it at once. The session's id is a secret
like a token and never appears in a repr, a message or a log line.

Caveat: a process paused longer than its TTL (GC, swap, SIGSTOP) notices
the loss only once it runs again. Pass ``lease.fence`` (a leader's
``lease.term``) to the resource you protect and have it refuse a fence
lower than one it has seen.
"""

import logging

from .client import Client, Elections, LeaseContext, Semaphores, Sessions
from .errors import (
    BackendRecovering,
    BackendUnavailable,
    Forbidden,
    IdempotencyMismatch,
    InLockSet,
    InternalError,
    InvalidRequest,
    LeaseLost,
    LeaseNotFound,
    LimitMismatch,
    LockdError,
    LockHeld,
    LockDelay,
    MethodNotAllowed,
    MinHold,
    ModeMismatch,
    NoPermits,
    NotCandidate,
    NotExclusive,
    NotFound,
    NotGranted,
    PayloadTooLarge,
    Queued,
    SessionLost,
    TooManyHolders,
    TooManyRequests,
    Unauthorized,
    Unavailable,
    Unreachable,
    Unsupported,
    UnsupportedMediaType,
)
from .lease import Lease
from .lockset import LockSet
from .observe import Observer
from .session import Session

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Elections",
    "Lease",
    "LockSet",
    "LeaseContext",
    "Observer",
    "Semaphores",
    "Session",
    "Sessions",
    "BackendRecovering",
    "BackendUnavailable",
    "Forbidden",
    "IdempotencyMismatch",
    "InternalError",
    "InvalidRequest",
    "LeaseLost",
    "LeaseNotFound",
    "LimitMismatch",
    "LockdError",
    "LockHeld",
    "LockDelay",
    "MethodNotAllowed",
    "MinHold",
    "ModeMismatch",
    "NoPermits",
    "NotCandidate",
    "InLockSet",
    "NotExclusive",
    "NotFound",
    "NotGranted",
    "PayloadTooLarge",
    "Queued",
    "SessionLost",
    "TooManyHolders",
    "TooManyRequests",
    "Unauthorized",
    "Unavailable",
    "Unreachable",
    "Unsupported",
    "UnsupportedMediaType",
]

# A library logs only where its user's logging configuration says.
logging.getLogger("lockd").addHandler(logging.NullHandler())
