"""A small HTTP server that hands every POST to one callable: waitress serving a tiny WSGI
app from a daemon thread.

The local Broker's ingress (:mod:`devstack.broker`) and the record sink
(:mod:`devstack.recording`) both only take POSTed events and answer with a status, so
they share this server rather than each carrying its own request handler and lifecycle. Both
are local tools; the deployed dead-letter sink is :mod:`functions.runtime.dead_letters`, served
like the functions.

Waitress parses every request and reads its whole body in its event loop before a thread
handles it: a slow client holds no thread, only a connection, which is closed after
``idle_seconds`` without a byte (``channel_timeout``); at most :data:`CONNECTIONS` are open.
A body over :data:`MAX_BODY_BYTES` is refused 413 as it arrives (chunked included) and a head
over :data:`MAX_HEAD_BYTES` 431, both closing the connection. The app adds what waitress lets
through: an HTTP/1.1 request without a ``Host`` header, or with two, is answered 400
(RFC 9112 3.2).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import waitress
from waitress import wasyncore

from functions.runtime.endpoint import event_headers, problem_answer

# (headers, body, path) -> (HTTP status, problem detail; "" for an empty answer)
PostHandler = Callable[[Mapping[str, str], bytes, str], tuple[int, str]]
# Above the functions' own limit (3 MiB), so the router refuses nothing a function would take.
MAX_BODY_BYTES = 4 * 1024 * 1024
# A request line and its headers together: a CloudEvent's head is a few KiB.
MAX_HEAD_BYTES = 64 * 1024
# Requests handled at once: the record sink may hold one while it forwards the event (up
# to 30 s); the router's ingress only queues its deliveries.
THREADS = 16
CONNECTIONS = 256
IDLE_SECONDS = 30.0


@dataclass
class PostServer:
    """Serves ``handle`` on ``host:port`` (``0``: any free port) from a daemon thread."""

    handle: PostHandler
    name: str
    host: str = "127.0.0.1"
    port: int = 0
    idle_seconds: float = IDLE_SECONDS
    _server: Any = field(default=None, init=False)
    _map: dict[int, Any] = field(default_factory=dict, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _address: tuple[str, int] = field(default=("", 0), init=False)

    def start(self) -> threading.Thread:
        server = waitress.create_server(
            self._app, map=self._map, host=self.host, port=self.port, threads=THREADS,
            ident=self.name, max_request_body_size=MAX_BODY_BYTES,
            max_request_header_size=MAX_HEAD_BYTES, channel_timeout=self.idle_seconds,
            # Idle connections are looked for this often: a tenth of the timeout.
            cleanup_interval=max(1, int(self.idle_seconds / 10)),
            connection_limit=CONNECTIONS, expose_tracebacks=False,
            # The handler sees every header as sent (the record sink keeps them).
            clear_untrusted_proxy_headers=False,
            # Waitress takes whole seconds here (0.2 became 0: a poll that never waited, a core
            # spent spinning); stop() wakes the loop through its trigger anyway.
            asyncore_loop_timeout=1)
        self._server = server
        self._address = (str(server.effective_host), int(server.effective_port))
        thread = threading.Thread(target=server.run, name=self.name, daemon=True)
        thread.start()
        self._thread = thread
        return thread

    def _app(self, environ: dict[str, Any],
             start_response: Callable[..., Any]) -> Iterable[bytes]:
        status, headers, body = self._answer(environ)
        start_response(f"{status} {HTTPStatus(status).phrase}", headers)
        return [body]

    def _answer(self, environ: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
        host = environ.get("HTTP_HOST")
        if environ.get("SERVER_PROTOCOL") == "HTTP/1.1" and (not host or "," in host):
            return problem_answer(400, "an HTTP/1.1 request needs one Host header")
        method = environ.get("REQUEST_METHOD")
        if method != "POST":
            status, headers, body = problem_answer(405, f"{method} is not served here")
            return status, [*headers, ("Allow", "POST")], body
        sent = event_headers(environ)
        if environ.get("CONTENT_LENGTH"):
            sent["Content-Length"] = str(environ["CONTENT_LENGTH"])
        # Waitress has read the whole body, within MAX_BODY_BYTES, before calling the app.
        body = environ["wsgi.input"].read()
        status, detail = self.handle(sent, body, environ.get("PATH_INFO") or "/")
        if not detail:
            return status, [("Content-Length", "0")], b""
        return problem_answer(status, detail)

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        host, port = self._address
        return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None:
            return
        # The requests being handled finish first (they wake the loop to send their answers),
        # then everything is closed in the server's own loop (a close from here would race
        # its poll), which then ends.
        server.task_dispatcher.shutdown(timeout=5)
        server.trigger.pull_trigger(lambda: wasyncore.close_all(self._map))
        if thread is not None:
            thread.join(5)
        self._server = self._thread = None
