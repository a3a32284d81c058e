"""The wire: one HTTP request, its JSON answer or its error; an event stream's opening; and backoff.

http.client rather than urllib.request, on purpose: urllib follows
redirects and sends requests through the proxies named in the environment
(http_proxy, ...), neither of which a lock client should do behind its
user's back. One new connection per request keeps the client free of shared
state, so that one Client serves many threads; an event stream (observe)
keeps its own connection until it is closed.
"""

from __future__ import annotations

import http.client
import json
import random
import ssl
import urllib.parse
from typing import Any, Dict, Mapping, Optional, Tuple

from .errors import LockdError, Unreachable, error_for, parse_retry_after

# Answers larger than this are not lockd's: refuse them rather than read
# them into memory.
_MAX_ANSWER = 8 << 20

USER_AGENT = "lockd-python/0.1"


class Transport:
    """Transport sends requests to one lockd server."""

    def __init__(
        self,
        url: str,
        api_key: Optional[str],
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"lockd: server URL must be http:// or https:// with a host, not {url!r}")
        if parts.username or parts.password:
            # Credentials in a URL end up in logs and reprs; the API key
            # has its own argument.
            raise ValueError("lockd: pass the API key as api_key, not in the URL")
        self.url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._base = parts.path.rstrip("/")
        self._ssl = ssl_context
        # The API key is kept here only, to build the header of each
        # request: never in a repr, a message or a log line.
        self.__api_key = api_key or None

    @property
    def has_api_key(self) -> bool:
        return self.__api_key is not None

    def request(
        self,
        method: str,
        path: str,
        body: Optional[Mapping[str, Any]] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: float = 10.0,
        label: Optional[str] = None,
    ) -> Dict[str, Any]:
        """request sends one request and returns its decoded 2xx answer.

        It raises Unreachable when no answer came, and the problem code's
        LockdError subclass for any other status. ``label`` names the
        request in messages instead of its method and path, for a path
        that holds a secret (a session's id).
        """
        what = label or f"{method} {path}"
        h = self._headers("application/json", headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            h["Content-Type"] = "application/json"
        conn = self._connect(timeout)
        try:
            conn.request(method, self._base + path, body=data, headers=h)
            resp = conn.getresponse()
            raw = resp.read(_MAX_ANSWER + 1)
            status = resp.status
            content_type = resp.getheader("Content-Type", "")
            retry_after = parse_retry_after(resp.getheader("Retry-After"))
        except (OSError, http.client.HTTPException) as err:
            # OSError covers refused and reset connections and timeouts.
            # The request may or may not have reached the server.
            raise Unreachable(f"{what}: no answer from lockd: {_describe(err)}") from None
        finally:
            conn.close()
        if len(raw) > _MAX_ANSWER:
            raise Unreachable(f"{what}: the answer is larger than {_MAX_ANSWER} bytes; not lockd's")
        if 200 <= status < 300:
            try:
                answer = json.loads(raw) if raw else {}
            except ValueError:
                raise Unreachable(f"{what}: the answer ({status}) is not JSON; not lockd's") from None
            if not isinstance(answer, dict):
                raise Unreachable(f"{what}: the answer ({status}) is not a JSON object; not lockd's")
            return answer
        raise _problem(status, content_type, raw, retry_after)

    def stream(self, path: str, timeout: float = 10.0) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """stream sends GET path and returns the open connection and its 200 text/event-stream answer.

        ``timeout`` bounds the connection and the wait for the answer's
        head; the caller sets the socket's timeout for the reads that
        follow, and closes the connection. Errors are request's.
        """
        h = self._headers("text/event-stream", {"Cache-Control": "no-cache"})
        conn = self._connect(timeout)
        try:
            conn.request("GET", self._base + path, headers=h)
            resp = conn.getresponse()
            if resp.status == 200:
                content_type = resp.getheader("Content-Type", "")
                if content_type.split(";")[0].strip() == "text/event-stream":
                    return conn, resp
                raise Unreachable(f"GET {path}: the answer is {content_type or 'untyped'}, not an event stream; not lockd's")
            raw = resp.read(_MAX_ANSWER + 1)
            err = _problem(
                resp.status, resp.getheader("Content-Type", ""), raw, parse_retry_after(resp.getheader("Retry-After"))
            )
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise Unreachable(f"GET {path}: no answer from lockd: {_describe(e)}") from None
        except BaseException:
            conn.close()
            raise
        conn.close()
        raise err

    def _headers(self, accept: str, extra: Optional[Mapping[str, str]]) -> Dict[str, str]:
        h = {"Accept": accept, "User-Agent": USER_AGENT}
        if self.__api_key is not None:
            h["Authorization"] = "Bearer " + self.__api_key
        if extra:
            h.update(extra)
        return h

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        if self._https:
            ctx = self._ssl or ssl.create_default_context()
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=ctx)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)


def _problem(status: int, content_type: str, raw: bytes, retry_after: Optional[float]) -> LockdError:
    """_problem is the error of a non-2xx answer, from its problem body when it has one."""
    problem: Dict[str, Any] = {}
    if len(raw) <= _MAX_ANSWER and content_type.split(";")[0].strip() in ("application/problem+json", "application/json"):
        try:
            decoded = json.loads(raw)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict):
            problem = decoded
    return error_for(status, problem, retry_after)


def _describe(err: BaseException) -> str:
    """_describe names a connection failure without echoing anything sent."""
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def backoff(attempt: int, base: float, ceiling: float, retry_after: Optional[float]) -> float:
    """backoff is the delay in seconds before retry number attempt (0-based).

    Exponential from base up to ceiling, with jitter (half fixed, half
    random) so that many clients that failed together do not retry
    together, and never shorter than the server's Retry-After.
    """
    d = min(base * (2 ** min(attempt, 20)), ceiling)
    d = d / 2 + random.uniform(0, d / 2)
    return max(d, retry_after or 0.0)
