"""POSTing one event to a subscriber, as a Broker's dispatcher does: keep-alive connections
per origin (a connection per event would cost the receiving function an accept and a new
request cycle each time, which a Broker or Knative's queue-proxy never imposes), an answer that
is never an exception.

The HTTP is urllib3's, through the pools of :mod:`functions.kube.pools`: a deadline on each
POST whatever the subscriber sends, a size limit on its answer, and a pooled connection
checked before it carries another event (one the subscriber closed while it was idle, or with
bytes on it nobody asked for, is closed instead).
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit
from urllib.request import getproxies_environment, proxy_bypass

import urllib3
from urllib3.util import Retry
from urllib3.util.ssl_ import create_urllib3_context

from functions.core.delivery import parse_retry_after
from functions.kube.pools import (
    ERRORS,
    WATCHDOG,
    check,
    describe,
    final,
    new_pool,
    read_body,
    socket_timeout,
)

# Headers of one hop, never forwarded: connection-level ones (RFC 9110 section 7.6.1) and
# what the sender sets itself.
HOP_HEADERS = frozenset({"host", "content-length", "connection", "accept-encoding",
                         "transfer-encoding", "keep-alive", "te", "upgrade"})
# A POST whose connection ends before any answer's head (a pooled connection the subscriber
# closed while it was idle, just as it was taken; a reset; an answer that is not HTTP) is a
# "read" error to urllib3, and is sent once more on a new connection: the event most likely
# never reached the subscriber, and deliveries are at-least-once anyway. Nothing else is
# retried here (a refused connection, a status): the delivery's own retries do that.
RESEND = Retry(total=1, connect=0, read=1, redirect=0, status=0, other=0,
               allowed_methods=None, raise_on_redirect=False, raise_on_status=False,
               respect_retry_after_header=False)
# The largest answer read: a reply event, or a problem document.
MAX_ANSWER = 16 << 20
Origin = tuple[str, str, int]


@dataclass(frozen=True)
class SendResult:
    status: int | None  # None: no HTTP answer
    retry_after: float | None = None
    error: str = ""
    body: bytes = b""


def env_proxy(scheme: str, host: str) -> str | None:
    """The proxy ``HTTP_PROXY``/``HTTPS_PROXY`` name for ``host``, unless ``NO_PROXY`` exempts
    it (as an OpenShift cluster-wide proxy sets them in every pod)."""
    proxies = getproxies_environment()
    proxy = proxies.get(scheme)
    if not proxy or proxy_bypass(host):
        return None
    return proxy


class ConnectionPool:
    """Keep-alive connections by origin, at most ``max_idle`` idle ones each; thread-safe.
    ``env_proxies``: reach origins through the proxy the environment names for them
    (:func:`env_proxy`); the Broker's own deliveries to the functions never need one."""

    def __init__(self, max_idle: int = 64, max_answer: int = MAX_ANSWER, *,
                 env_proxies: bool = False) -> None:
        self.max_idle = max_idle
        self.max_answer = max_answer
        self.env_proxies = env_proxies
        self._pools: dict[Origin, urllib3.HTTPConnectionPool] = {}
        self._proxied: dict[str, urllib3.ProxyManager] = {}
        self._lock = threading.Lock()
        self._tls: ssl.SSLContext | None = None

    def post(self, url: str, headers: Mapping[str, str], body: bytes,
             timeout: float = 30.0) -> SendResult:
        """POST ``body`` with ``headers`` (transport headers replaced) within ``timeout``
        seconds; never raises."""
        outgoing = {k: v for k, v in headers.items() if k.lower() not in HOP_HEADERS}
        response: urllib3.BaseHTTPResponse | None = None
        deadline = WATCHDOG.start(timeout)
        try:
            try:
                parts = urlsplit(url)  # a bad address is a ValueError, as the answer's are
                path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                scheme, host = parts.scheme or "http", parts.hostname or "localhost"
                proxy = env_proxy(scheme, host) if self.env_proxies else None
                pool: urllib3.HTTPConnectionPool | urllib3.ProxyManager = (
                    self._pool(scheme, host, parts.port or (443 if scheme == "https" else 80))
                    if proxy is None else self._proxy(proxy))
                response = final(pool.urlopen(
                    "POST", path if proxy is None else url, body=body, headers=outgoing,
                    redirect=False, assert_same_host=False, timeout=socket_timeout(timeout),
                    retries=RESEND, preload_content=False, decode_content=False))
                answer = read_body(response, self.max_answer)
            finally:
                WATCHDOG.finish(deadline)
            check(deadline)
        except ERRORS as exc:
            if response is not None:
                response.close()
                response.release_conn()
            return SendResult(None, error=describe(exc, deadline))
        response.release_conn()
        return SendResult(response.status,
                          parse_retry_after(response.headers.get("Retry-After"),
                                            datetime.now(UTC)), body=answer)

    def _pool(self, scheme: str, host: str, port: int) -> urllib3.HTTPConnectionPool:
        origin = (scheme, host, port)
        pool = self._pools.get(origin)
        if pool is None:
            with self._lock:
                pool = self._pools.get(origin)
                if pool is None:
                    if scheme == "https" and self._tls is None:
                        self._tls = create_urllib3_context()
                        self._tls.load_default_certs()
                    pool = self._pools[origin] = new_pool(
                        scheme, host, port, maxsize=self.max_idle, retries=RESEND,
                        ssl_context=self._tls if scheme == "https" else None)
        return pool

    def _proxy(self, proxy: str) -> urllib3.ProxyManager:
        with self._lock:
            manager = self._proxied.get(proxy)
            if manager is None:
                manager = self._proxied[proxy] = urllib3.ProxyManager(
                    proxy, num_pools=16, maxsize=self.max_idle, block=False, retries=RESEND)
        return manager

    def close(self) -> None:
        with self._lock:
            pools, self._pools = self._pools, {}
            managers, self._proxied = self._proxied, {}
        for pool in pools.values():
            pool.close()
        for manager in managers.values():
            manager.clear()


def post_event(url: str, headers: Mapping[str, str], body: bytes,
               timeout: float = 30.0) -> SendResult:
    """POST one event on a connection of its own (closed afterwards); never raises."""
    pool = ConnectionPool(max_idle=1)
    try:
        return pool.post(url, headers, body, timeout)
    finally:
        pool.close()
