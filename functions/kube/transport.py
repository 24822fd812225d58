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
from typing import Protocol
from urllib.parse import urlencode, urlsplit

from functions.core.http1 import Framing
from functions.kube.config import ClusterConfig
from functions.kube.wire import Connection


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


CONNECT_TIMEOUT = 5.0
# Requests sent again when a reused connection turns out closed before any answer.
REPLAYABLE = frozenset({"GET", "HEAD", "OPTIONS"})
# What a reused keep-alive connection raises when the server had closed it while idle
# (:class:`~functions.kube.wire.ClosedBeforeAnswer` is a ``ConnectionResetError``).
CLOSED_BEFORE_ANSWER = (ConnectionResetError, BrokenPipeError)
# What a request that got no (whole) answer raises: the socket's errors, an answer that is
# not HTTP (``BadMessage`` is a ``ValueError``).
EXCHANGE_ERRORS = (OSError, ValueError)


class TransportError(Exception):
    """The request did not produce an HTTP response (connection refused, reset, timeout)."""


class Transport(Protocol):
    def send(self, request: Request, timeout: float) -> Response: ...

    def refresh_credentials(self) -> None: ...


class HttpTransport:
    r"""HTTPS (or HTTP) to one API server, thread-safe.

    Plain requests go over a pool of keep-alive :class:`~functions.kube.wire.Connection`\ s,
    one per request in flight: every reconcile sends a few requests and every create carries a
    pod, so the client's CPU per request matters (urllib3's pool manager, URL parsing and
    header containers cost 0.6 ms for a GET against a local API server, ``http.client`` 0.2
    ms, this connection 0.08 ms). A streamed body (a watch, followed logs) has a connection of
    its own.

    :param pool_size: idle connections kept; more requests than that at once open more
        connections, which are closed when they finish.
    """

    def __init__(self, config: ClusterConfig, pool_size: int = 16) -> None:
        self.config = config
        self.pool_size = pool_size
        self._token_lock = threading.Lock()
        self._token = config.bearer_token()
        url = urlsplit(config.server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"unsupported API server address {config.server!r}")
        https = url.scheme == "https"
        self._host = url.hostname
        self._port = url.port or (443 if https else 80)
        self._prefix = url.path.rstrip("/")
        self._ssl = _ssl_context(config) if https else None
        self._idle: list[Connection] = []
        self._idle_lock = threading.Lock()

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
        target = self._prefix + request.url_path()
        connection, reused = self._take(timeout)
        try:
            try:
                answer = connection.request(request.method, target, headers, request.body)
            except CLOSED_BEFORE_ANSWER:
                # An idle connection the server closed just as it was taken: a request that
                # only reads is sent again on a new one (as Go's transport does); a write is
                # left to the caller, which knows whether repeating it is safe.
                connection.close()
                if not reused or request.method not in REPLAYABLE:
                    raise
                connection = self._open(timeout)
                answer = connection.request(request.method, target, headers, request.body)
        except EXCHANGE_ERRORS as exc:
            connection.close()
            raise TransportError(f"{request.method} {request.path}: {exc}") from exc
        if answer.keep_alive:
            self._give(connection)
        else:
            connection.close()
        return Response(answer.status, dict(answer.head.headers), answer.body)

    def _take(self, timeout: float) -> tuple[Connection, bool]:
        """An idle connection the server has not closed (and ``True``), or a new one."""
        while True:
            with self._idle_lock:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return self._open(timeout), False
            if not connection.dropped():
                connection.settimeout(timeout)
                return connection, True
            connection.close()

    def _open(self, timeout: float) -> Connection:
        """A new connection (connected within 5 s at most) whose reads wait ``timeout``."""
        try:
            return Connection(self._host, self._port, timeout=timeout,
                              connect_timeout=min(timeout, CONNECT_TIMEOUT), context=self._ssl)
        except OSError as exc:
            raise TransportError(f"connecting to {self.config.server}: {exc}") from exc

    def _give(self, connection: Connection) -> None:
        with self._idle_lock:
            if len(self._idle) < self.pool_size:
                self._idle.append(connection)
                return
        connection.close()

    def close(self) -> None:
        """Close the idle connections (those in use close when their request ends)."""
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def stream(self, request: Request, timeout: float) -> tuple[int, Mapping[str, str],
                                                                 Streamed]:
        """Send ``request`` and return the response unread, for bodies that keep coming
        (watches, ``follow`` logs), on a connection of its own that no other request shares.
        ``timeout`` bounds each wait for more of the body. The caller reads it with
        :meth:`Streamed.stream` and must :meth:`~Streamed.release_conn`."""
        connection = self._open(timeout)
        try:
            status, head, framing = connection.open_stream(
                request.method, self._prefix + request.url_path(), self._headers("*/*"))
        except EXCHANGE_ERRORS as exc:
            connection.close()
            raise TransportError(f"{request.method} {request.path}: {exc}") from exc
        return status, dict(head.headers), Streamed(connection, framing)


class Streamed:
    r"""A response body read as it comes. Each piece :meth:`stream` yields is what arrived in
    one read (for a chunked body, one chunk: one watch event, as the API server flushes
    them). Read failures are :class:`TransportError`\ s."""

    def __init__(self, connection: Connection, framing: Framing) -> None:
        self._connection = connection
        self._framing = framing

    def read(self) -> bytes:
        return b"".join(self.stream(1 << 20))

    def stream(self, amount: int) -> Iterator[bytes]:
        try:
            yield from self._connection.stream(self._framing, amount)
        except EXCHANGE_ERRORS as exc:
            raise TransportError(f"reading the body: {exc}") from exc

    def release_conn(self) -> None:
        """Close the connection: a body left unread cannot be followed by another request."""
        self._connection.close()


def _ssl_context(config: ClusterConfig) -> ssl.SSLContext:
    """The TLS settings of ``config``: its CA (or the system's), its client certificate, or no
    verification at all when the kubeconfig says ``insecure-skip-tls-verify``."""
    context = ssl.create_default_context(cafile=config.ca_file)
    if config.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if config.client_cert_file:
        context.load_cert_chain(config.client_cert_file, config.client_key_file)
    return context
