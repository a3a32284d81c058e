"""The renewal loop that leases and sessions share."""

import logging
import threading
import time
from typing import Callable, Optional, Type

from ._http import backoff
from .errors import LockdError, Unreachable

log = logging.getLogger("lockd")


def keep_alive(
    owner: object,
    stop: threading.Event,
    ttl: float,
    expiry: Callable[[], float],
    renew: Callable[[], object],
    gone: Type[LockdError],
    lose: Callable[[Optional[LockdError]], None],
) -> None:
    """keep_alive renews every ttl/3 until stop is set or a renewal raises gone (renew has recorded the loss then).

    Other failures are retried with backoff until the expiry by our clock;
    past it, lose is given the last failure that said why.
    """
    interval = max(ttl / 3, 0.001)
    delay = interval
    attempt = 0
    last: Optional[LockdError] = None  # the last failure that said more than "no answer"
    while not stop.wait(delay):
        expires = expiry()
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
                lose(last)
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
