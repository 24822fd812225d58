"""HTTP transports for :class:`functions.kube.client.KubeClient`.

A transport sends one request and returns one response; it knows nothing of Kubernetes
semantics. The default (:class:`HttpTransport`) speaks HTTPS to the server a
:class:`~functions.kube.config.ClusterConfig` names. Tests and benchmarks wrap it to
count or perturb traffic.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from socket import socket
from typing import Protocol
from urllib.parse import urlencode, urlsplit

import urllib3
from urllib3.util import Retry
from urllib3.util.ssl_ import create_urllib3_context

from functions.kube.config import ClusterConfig
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


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: Mapping[str, str] = field(default_factory=dict)
    body: bytes | None = None
    content_type: str | None = None

    def url_path(self) -> str:
        return f"{self.path}?{urlencode(self.query)}" if self.query else self.path


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: Mapping[str, str]
    body: bytes


# Requests sent again when their connection ends before an answer.
REPLAYABLE = frozenset({"GET", "HEAD", "OPTIONS"})
# urllib3 retries nothing but this: a request whose connection ended before any answer's head
# (a pooled connection the server closed while it was idle, just as it was taken; a reset; an
# answer that is not HTTP) is a "read" error to urllib3, and a read (REPLAYABLE) is then sent
# once more on a new connection, as Go's transport does. Connection failures (``connect=0``),
# other methods (a write is left to the caller, which knows whether repeating it is safe),
# statuses, redirects and Retry-After are never retried here: KubeClient does that. A request
# past its deadline is not sent again: the new connection is shut down as it registers.
REPLAY_READS = Retry(total=1, connect=0, read=1, redirect=0, status=0, other=0,
                     allowed_methods=REPLAYABLE, raise_on_redirect=False,
                     raise_on_status=False, respect_retry_after_header=False)
# The largest API answer read: a list of a few thousand pods is tens of MiB.
MAX_BODY = 256 << 20


class TransportError(Exception):
    """The request did not produce an HTTP response (connection refused, reset, timeout, an
    answer that is not HTTP or over the size limit)."""


class Transport(Protocol):
    def send(self, request: Request, timeout: float) -> Response: ...

    def refresh_credentials(self) -> None: ...


class HttpTransport:
    """HTTPS (or HTTP) to one API server through an urllib3 connection pool, thread-safe.

    ``timeout`` is each request's deadline, whatever the server sends (interim answers,
    trailers, a byte at a time): :mod:`functions.kube.pools`. An answer's body over
    ``max_body`` bytes is refused. A streamed body (a watch, followed logs) holds its
    connection until it is released.

    The pool is urllib3's ``HTTPSConnectionPool`` itself, not a ``PoolManager``: every
    reconcile sends a few requests and every create carries a pod, so the client's CPU per
    request matters, and the manager's URL parsing and pool lookup cost more (a small GET to
    the local API server: 0.39-0.41 ms of CPU through the pool, 0.43-0.45 ms through a
    manager, 0.42-0.45 ms through this transport with its deadline and checks; ``python -m
    bench.client``).

    :param pool_size: idle connections kept: the threads that send at once (request threads,
        resync workers, informers' lists). More requests than that at once open more
        connections, closed when they finish.
    """

    def __init__(self, config: ClusterConfig, pool_size: int = 16,
                 max_body: int = MAX_BODY) -> None:
        self.config = config
        self.pool_size = pool_size
        self.max_body = max_body
        self._token_lock = threading.Lock()
        self._token = config.bearer_token()
        url = urlsplit(config.server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"unsupported API server address {config.server!r}")
        https = url.scheme == "https"
        self._prefix = url.path.rstrip("/")
        self._pool = new_pool(url.scheme, url.hostname, url.port or (443 if https else 80),
                              maxsize=pool_size, retries=REPLAY_READS,
                              ssl_context=_ssl_context(config) if https else None,
                              insecure=config.insecure)

    def refresh_credentials(self) -> None:
        """Re-read a rotating service-account token (called after a 401)."""
        with self._token_lock:
            self._token = self.config.bearer_token()

    def _headers(self, accept: str, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": accept}
        if content_type:
            headers["Content-Type"] = content_type
        token = self._token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def send(self, request: Request, timeout: float) -> Response:
        headers = self._headers("application/json", request.content_type)
        response: urllib3.BaseHTTPResponse | None = None
        deadline = WATCHDOG.start(timeout)
        try:
            try:
                response = final(self._open(request, headers, timeout))
                body = read_body(response, self.max_body)
            finally:
                WATCHDOG.finish(deadline)
            check(deadline)
        except ERRORS as exc:
            if response is not None:  # closed, and its slot given back to the pool
                response.close()
                response.release_conn()
            raise TransportError(f"{request.method} {request.path}: "
                                 f"{describe(exc, deadline)}") from exc
        response.release_conn()
        return Response(response.status, response.headers, body)

    def _open(self, request: Request, headers: Mapping[str, str],
              seconds: float) -> urllib3.BaseHTTPResponse:
        return self._pool.urlopen(
            request.method, self._prefix + request.url_path(), body=request.body,
            headers=headers, redirect=False, assert_same_host=False,
            timeout=socket_timeout(seconds), preload_content=False, decode_content=False)

    def close(self) -> None:
        """Close the connections (the idle ones now, those in use when their request ends);
        the transport sends nothing afterwards."""
        self._pool.close()

    def stream(self, request: Request, timeout: float) -> tuple[int, Mapping[str, str],
                                                                 Streamed]:
        """Send ``request`` and return the response unread, for bodies that keep coming
        (watches, ``follow`` logs). ``timeout`` is the deadline of the answer's head and of
        each later piece of the body. The caller reads it with :meth:`Streamed.stream` and
        must :meth:`~Streamed.release_conn`."""
        response: urllib3.BaseHTTPResponse | None = None
        deadline = WATCHDOG.start(timeout)
        try:
            try:
                response = final(self._open(request, self._headers("*/*"), timeout))
                sock = deadline.sockets[-1] if deadline.sockets else None
            finally:
                WATCHDOG.finish(deadline)
            check(deadline)
        except ERRORS as exc:
            if response is not None:
                response.close()
                response.release_conn()
            raise TransportError(f"{request.method} {request.path}: "
                                 f"{describe(exc, deadline)}") from exc
        return response.status, response.headers, Streamed(response, sock, timeout,
                                                           self.max_body)


class Streamed:
    r"""A response body read as it comes. Each piece :meth:`stream` yields is what arrived in
    one read of at most ``amount`` bytes; for a chunked body, one chunk (one watch event, as
    the API server flushes them) or ``amount`` bytes of a larger one. Each piece has
    ``timeout`` seconds to come whole; the pieces are as many as the server sends, but
    :meth:`read` (a whole body: an error's) takes at most ``limit`` bytes. Read failures are
    :class:`TransportError`\ s."""

    def __init__(self, response: urllib3.BaseHTTPResponse, sock: socket | None,
                 timeout: float, limit: int = MAX_BODY) -> None:
        self._response = response
        self._sock = sock
        self._timeout = timeout
        self._limit = limit
        self._done = False

    def read(self) -> bytes:
        pieces = []
        size = 0
        for piece in self.stream(1 << 20):
            size += len(piece)
            if size > self._limit:
                raise TransportError(f"reading the body: over the limit of {self._limit} bytes")
            pieces.append(piece)
        return b"".join(pieces)

    def stream(self, amount: int) -> Iterator[bytes]:
        response = self._response
        pieces = (response.read_chunked(amount, decode_content=False) if response.chunked
                  else self._reads(amount))
        while True:
            deadline = WATCHDOG.start(self._timeout, self._sock)
            try:
                try:
                    piece = next(pieces, None)
                finally:
                    WATCHDOG.finish(deadline)
                check(deadline)
            except ERRORS as exc:
                raise TransportError(f"reading the body: {describe(exc, deadline)}") from exc
            if piece is None:
                self._done = True
                return
            yield piece

    def _reads(self, amount: int) -> Iterator[bytes]:
        while piece := self._response.read1(amount, decode_content=False):
            yield piece

    def release_conn(self) -> None:
        """Give the connection back to the pool when the body was read to its end, else
        close it: a body left unread cannot be followed by another request."""
        if not self._done:
            self._response.close()
        self._response.release_conn()


def _ssl_context(config: ClusterConfig) -> ssl.SSLContext:
    """The TLS settings of ``config``: its CA (or the system's), its client certificate, or no
    verification at all when the kubeconfig says ``insecure-skip-tls-verify``."""
    context = create_urllib3_context()
    if config.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif config.ca_file:
        context.load_verify_locations(cafile=config.ca_file)
    else:
        context.load_default_certs()
    if config.client_cert_file:
        context.load_cert_chain(config.client_cert_file, config.client_key_file)
    return context

