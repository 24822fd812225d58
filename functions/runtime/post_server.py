"""A small threaded HTTP server that hands every POST to one callable.

The local Broker's ingress (:mod:`functions.runtime.router`) and the record sink
(:mod:`functions.runtime.recording`) both only take POSTed events and answer with a status, so
they share this server rather than each carrying its own request handler and lifecycle. Both
are local tools; the deployed dead-letter sink is :mod:`functions.runtime.dead_letters`, served
like the functions. Still, a body is read only when its ``Content-Length`` is a number within
:data:`MAX_BODY_BYTES` (else 400 or 413, and the connection is closed unread). It runs on
:class:`functions.runtime.httpd.HttpServer`, as the functions do.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from functions.runtime.endpoint import problem_answer
from functions.runtime.httpd import HttpServer, Limits, Reply, Request

# (headers, body, path) -> (HTTP status, problem detail; "" for an empty answer)
PostHandler = Callable[[Mapping[str, str], bytes, str], tuple[int, str]]
# Above the functions' own limit (3 MiB), so the router refuses nothing a function would take.
MAX_BODY_BYTES = 4 * 1024 * 1024
# Each connection has its thread; how many handle a request at once is not bounded further.
CONCURRENCY = 1000


@dataclass
class PostServer:
    """Serves ``handle`` on ``host:port`` (``0``: any free port) from a daemon thread."""

    handle: PostHandler
    name: str
    host: str = "127.0.0.1"
    port: int = 0
    _server: HttpServer | None = field(default=None, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _address: tuple[str, int] = field(default=("", 0), init=False)

    def start(self) -> threading.Thread:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        listener = socket.create_server((self.host, self.port), family=family, backlog=128)
        self._address = listener.getsockname()[:2]
        server = HttpServer([listener], self._answer, concurrency=CONCURRENCY,
                            limits=Limits(max_body=MAX_BODY_BYTES), name=self.name)
        self._server = server
        thread = threading.Thread(target=server.serve, kwargs={"tick_seconds": 0.2},
                                  name=self.name, daemon=True)
        thread.start()
        self._thread = thread
        return thread

    def _answer(self, request: Request) -> Reply:
        if request.method != "POST":
            status, headers, body = problem_answer(405, f"{request.method} is not served here")
            return status, [*headers, ("Allow", "POST")], body
        path = request.target.partition("?")[0]
        status, detail = self.handle(dict(request.head.headers), request.stream.read(), path)
        if not detail:
            return status, [], b""
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
        server.stop()
        if thread is not None:
            thread.join(5)
        server.drain(5)
        self._server = self._thread = None
