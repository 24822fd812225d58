"""POSTing one event to a subscriber, as a Broker's dispatcher does: keep-alive connections
per origin (a connection per event would cost the receiving function an accept and a new
request cycle each time, which a Broker or Knative's queue-proxy never imposes), an answer that
is never an exception.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

from functions.core.delivery import parse_retry_after
from functions.kube.transport import CLOSED_BEFORE_ANSWER, EXCHANGE_ERRORS
from functions.kube.wire import Connection

# Headers of one hop, never forwarded: connection-level ones (RFC 9110 section 7.6.1) and
# what the sender sets itself.
HOP_HEADERS = frozenset({"host", "content-length", "connection", "accept-encoding",
                         "transfer-encoding", "keep-alive", "te", "upgrade"})
# What a keep-alive connection raises when the server closed it while idle: the event never
# reached the server, so sending it again on a new connection is safe (deliveries are
# at-least-once anyway).
STALE = CLOSED_BEFORE_ANSWER
Origin = tuple[str, str, int]


@dataclass(frozen=True)
class SendResult:
    status: int | None  # None: no HTTP answer
    retry_after: float | None = None
    error: str = ""
    body: bytes = b""


class ConnectionPool:
    """Idle keep-alive connections by origin; each is used by one thread at a time."""

    def __init__(self, max_idle: int = 64) -> None:
        self.max_idle = max_idle
        self._idle: dict[Origin, list[Connection]] = {}
        self._lock = threading.Lock()
        self._tls: ssl.SSLContext | None = None

    def post(self, url: str, headers: Mapping[str, str], body: bytes,
             timeout: float | None = 30.0) -> SendResult:
        """POST ``body`` with ``headers`` (transport headers replaced); never raises."""
        parts = urlsplit(url)
        origin = (parts.scheme or "http", parts.hostname or "localhost",
                  parts.port or (443 if parts.scheme == "https" else 80))
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        outgoing = {k: v for k, v in headers.items() if k.lower() not in HOP_HEADERS}
        for fresh in (False, True):
            connection: Connection | None = None
            reused = False
            try:
                connection, reused = self._take(origin, timeout, fresh)
                answer = connection.request("POST", path, outgoing, body)
            except EXCHANGE_ERRORS as exc:
                if connection is not None:
                    connection.close()
                if reused and isinstance(exc, STALE):
                    continue
                return SendResult(None, error=f"{type(exc).__name__}: {exc}")
            if answer.keep_alive:
                self._give(origin, connection)
            else:
                connection.close()
            return SendResult(answer.status,
                              parse_retry_after(answer.head.get("Retry-After"),
                                                datetime.now(UTC)), body=answer.body)
        raise AssertionError("unreachable: the second attempt uses a new connection")

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()

    def _take(self, origin: Origin, timeout: float | None,
              fresh: bool) -> tuple[Connection, bool]:
        if not fresh:
            with self._lock:
                connections = self._idle.get(origin)
                connection = connections.pop() if connections else None
            if connection is not None:
                connection.settimeout(timeout)
                return connection, True
        if origin[0] == "https" and self._tls is None:
            self._tls = ssl.create_default_context()
        return Connection(origin[1], origin[2], timeout=timeout, connect_timeout=timeout,
                          context=self._tls if origin[0] == "https" else None), False

    def _give(self, origin: Origin, connection: Connection) -> None:
        with self._lock:
            connections = self._idle.setdefault(origin, [])
            if len(connections) < self.max_idle:
                connections.append(connection)
                return
        connection.close()


def post_event(url: str, headers: Mapping[str, str], body: bytes,
               timeout: float | None = 30.0) -> SendResult:
    """POST one event on a connection of its own (closed afterwards); never raises."""
    pool = ConnectionPool(max_idle=0)
    return pool.post(url, headers, body, timeout)
