"""The renewal loop that leases and sessions share."""

import logging
import threading
import time
from typing import Callable, Optional, Tuple, Type

from ._http import backoff
from .errors import LockdError, Unreachable

log = logging.getLogger("lockd")


def grant_expiry(sent: float, arrived: float, ttl: float) -> Tuple[float, bool]:
    """grant_expiry is the expiry (monotonic) of a lease or session granted with ttl by a request sent at sent and answered at arrived, and whether to renew it at once.

    The server starts the TTL at the grant, which came after sent and
    before arrived: when the request reached it, or, for a request that
    waited in the queue, when its turn came. sent + ttl is never later than
    the server's expiry, and it is the expiry when the answer came within a
    third of the TTL (the first renewal, ttl/3 after arrived, still has a
    third before it). A later answer most likely waited, and sent + ttl may
    be past although the lease has its whole TTL: the expiry is then
    arrived + ttl, later than the server's by at most the time the answer
    took from the grant to us, and the lease is renewed at once; that
    renewal's answer sets an exact expiry (its send time plus the TTL) or
    says that the lease is gone.
    """
    if arrived - sent <= ttl / 3:
        return sent + ttl, False
    return arrived + ttl, True


def keep_alive(
    owner: object,
    stop: threading.Event,
    ttl: float,
    expiry: Callable[[], float],
    renew: Callable[[], object],
    gone: Type[LockdError],
    lose: Callable[[Optional[LockdError], Optional[float]], None],
    renew_now: bool = False,
) -> None:
    """keep_alive renews every ttl/3 (the first at once with renew_now) until stop is set or a renewal raises gone (renew has recorded the loss then).

    Other failures are retried with backoff until the expiry by our clock;
    past it, lose is given the last failure that said why. When the expiry
    passes before a renewal could even be sent (this process did not run
    in time), lose is given None and how late it was, in seconds.
    """
    interval = max(ttl / 3, 0.001)
    delay = 0.0 if renew_now else interval
    attempt = 0
    last: Optional[LockdError] = None  # the last failure that said more than "no answer"
    while not stop.wait(delay):
        expires = expiry()
        late = time.monotonic() - expires
        if late >= 0:
            # The server may have let it go already: it is not ours.
            lose(last, None if last is not None else late)
            return
        sent = time.monotonic()
        try:
            renew()
        except gone:
            return
        except LockdError as err:
            if stop.is_set():
                return
            if not isinstance(err, Unreachable) or last is None:
                last = err
            left = expires - time.monotonic()
            if left <= 0:
                lose(last, None)
                return
            # Retry sooner than ttl/3, and never sleep through the expiry:
            # at most half of what is left, so that the last tries come
            # just before it.
            delay = min(backoff(attempt, max(ttl / 30, 0.01), interval, err.retry_after), max(left / 2, 0.001))
            attempt += 1
            log.info("%r: renew failed (%s); retrying in %.3f s", owner, err, delay)
            continue
        attempt = 0
        last = None
        # Measured from when the renewal was sent, as the expiry is.
        delay = max(interval - (time.monotonic() - sent), 0.0)


def ran_out(late: float) -> str:
    """ran_out says why a lease or session whose expiry passed before a renewal could be sent is lost."""
    return (
        f"its TTL ran out, by this client's clock, {late * 1000:.0f} ms before a renewal could be sent: "
        "this process did not run in time (paused, or starved of CPU)"
    )
