"""A small threaded HTTP server that hands every POST to one callable.

The local Broker's ingress (:mod:`functions.runtime.router`) and the record sink
(:mod:`functions.runtime.recording`) both only take POSTed events and answer with a status, so
they share this server rather than each carrying its own request handler and lifecycle. Both
are local tools; the deployed dead-letter sink is :mod:`functions.runtime.dead_letters`, served
like the functions. Still, a body is read only when its ``Content-Length`` is a number within
:data:`MAX_BODY_BYTES` (else 400 or 413, and the connection is closed unread).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

# (headers, body, path) -> (HTTP status, problem detail; "" for an empty answer)
PostHandler = Callable[[Mapping[str, str], bytes, str], tuple[int, str]]
# Above the functions' own limit (3 MiB), so the router refuses nothing a function would take.
MAX_BODY_BYTES = 4 * 1024 * 1024


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:
        raw = (self.headers.get("Content-Length") or "0").strip()
        length = int(raw) if raw.isascii() and raw.isdigit() else -1
        if length < 0:
            self._answer(400, f"Content-Length {raw[:40]!r} is not a length", close=True)
        elif length > MAX_BODY_BYTES:
            self._answer(413, f"body exceeds the limit of {MAX_BODY_BYTES} bytes", close=True)
        else:
            body = self.rfile.read(length) if length else b""
            self._answer(*self.server.handle(dict(self.headers.items()), body, self.path))

    def _answer(self, status: int, detail: str, close: bool = False) -> None:
        if close:
            self.close_connection = True
        payload = json.dumps({"status": status, "detail": detail}).encode() if detail else b""
        self.send_response(status)
        if close:
            self.send_header("Connection", "close")
        self.send_header("Content-Length", str(len(payload)))
        if payload:
            self.send_header("Content-Type", "application/problem+json")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug(f"{self.server.name}: " + format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    handle: PostHandler
    name: str


@dataclass
class PostServer:
    """Serves ``handle`` on ``host:port`` (``0``: any free port) from a daemon thread."""

    handle: PostHandler
    name: str
    host: str = "127.0.0.1"
    port: int = 0
    _server: _Server | None = field(default=None, init=False)

    def start(self) -> threading.Thread:
        server = _Server((self.host, self.port), _Handler)
        server.handle = self.handle
        server.name = self.name
        self._server = server
        thread = threading.Thread(target=server.serve_forever, name=self.name, daemon=True)
        thread.start()
        return thread

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
