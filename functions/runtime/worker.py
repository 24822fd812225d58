"""The gunicorn worker class of the event functions: :mod:`functions.runtime.httpd` serving
the WSGI app, in place of gunicorn's threaded worker (``gthread``).

Gunicorn stays the process manager (the master, its workers' heartbeats, signals, graceful
shutdown, hooks); only the request cycle is this server's. ``threads`` bounds the requests
handled at once, as in ``gthread``; ``keepalive`` is how long an idle connection stays open;
``worker_connections`` how many connections a worker holds; ``max_requests`` restarts a worker
like gunicorn's own. The REST API keeps ``gthread`` (:mod:`functions.runtime.serve`).
"""

from __future__ import annotations

import os
import sys
from typing import Any
from urllib.parse import unquote_to_bytes

from gunicorn.workers.base import Worker

from functions.runtime.httpd import HttpServer, Limits, Reply, Request

# The two headers whose environ keys have no ``HTTP_`` prefix (PEP 3333).
UNPREFIXED = frozenset({"CONTENT_TYPE", "CONTENT_LENGTH"})


def wsgi_environ(request: Request, server: tuple[str, str], *,
                 multiprocess: bool) -> dict[str, Any]:
    """The WSGI environ (PEP 3333) of a request; its body is read from ``wsgi.input`` as
    the app asks (the app refuses, with its own reason, a body over its limit: an event
    function's is 3 MiB, ``FUNCTIONS_MAX_EVENT_BYTES``)."""
    target = request.target
    if "://" in target:  # absolute form: the path is what follows the authority
        target = "/" + target.split("://", 1)[1].partition("/")[2]
    path, _, query = target.partition("?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": request.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": unquote_to_bytes(path).decode("latin-1"),
        "QUERY_STRING": query,
        "SERVER_NAME": server[0],
        "SERVER_PORT": server[1],
        "SERVER_PROTOCOL": request.version,
        "REMOTE_ADDR": request.peer[0],
        "REMOTE_PORT": str(request.peer[1]),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": request.stream,
        "wsgi.input_terminated": True,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": multiprocess,
        "wsgi.run_once": False,
    }
    for name, value in request.head.headers:
        if "_" in name:
            # Dropped, as gunicorn does: ``X_Forwarded`` and ``X-Forwarded`` would both
            # become ``HTTP_X_FORWARDED``.
            continue
        key = name.upper().replace("-", "_")
        if key not in UNPREFIXED:
            key = "HTTP_" + key
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ


def call_wsgi(app: Any, environ: dict[str, Any]) -> Reply:
    """Run a WSGI app to its whole answer."""
    started: list[tuple[str, list[tuple[str, str]]]] = []
    written: list[bytes] = []

    def start_response(status: str, headers: list[tuple[str, str]],
                       exc_info: Any = None) -> Any:
        if started and exc_info is None:
            raise AssertionError("start_response called twice without exc_info")
        started[:] = [(status, headers)]
        return written.append

    result = app(environ, start_response)
    try:
        for piece in result:
            if piece:
                written.append(piece)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    if not started:
        raise AssertionError("the app returned without calling start_response")
    status, headers = started[0]
    return int(status.split(" ", 1)[0]), list(headers), b"".join(written)


class EventWorker(Worker):  # type: ignore[misc]
    """A gunicorn worker serving its app through :class:`~functions.runtime.httpd.HttpServer`."""

    def run(self) -> None:
        address = self.sockets[0].getsockname() if self.sockets else ""
        server_name = ((str(address[0]), str(address[1])) if isinstance(address, tuple)
                       else ("localhost", "80"))
        multiprocess = self.cfg.workers > 1
        app = self.wsgi

        def handle(request: Request) -> Reply:
            return call_wsgi(app, wsgi_environ(request, server_name,
                                               multiprocess=multiprocess))

        limits = Limits(max_body=None, idle_seconds=float(self.cfg.keepalive),
                        max_connections=self.cfg.worker_connections)
        server = HttpServer([listener.sock for listener in self.sockets], handle,
                            concurrency=self.cfg.threads, limits=limits,
                            name=f"worker-{os.getpid()}")

        def tick() -> bool:
            self.notify()
            if self.max_requests and server.requests >= self.max_requests:
                self.log.info("Autorestarting worker after current request.")
                self.alive = False
            if self.ppid != os.getppid():
                self.log.info("Parent changed, shutting down: %s", self)
                self.alive = False
            return bool(self.alive)

        server.serve(tick)
        server.drain(self.cfg.graceful_timeout, heartbeat=self.notify)
