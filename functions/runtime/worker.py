"""The gunicorn worker class of the functions: gunicorn's threaded worker (``gthread``) with
what it lacks in front of untrusted clients. Gunicorn parses every request (its own HTTP/1.1
parser: framing, limits, header rules); this module adds no parsing, only deadlines, request
slots and when to close.

What ``gthread`` lacks, and what this subclass adds:

* **Deadlines per request, not per read.** ``gthread`` reads a request's head and body with a
  blocking socket and no timeout: a client sending a byte a minute holds a thread for as long
  as it likes. Here each connection's socket is a :class:`DeadlineSocket`: a request's head
  must arrive whole within ``FUNCTIONS_REQUEST_HEAD_SECONDS`` (10) of its first bytes being
  there to read, its body within ``FUNCTIONS_REQUEST_BODY_SECONDS`` (30) of the app's first
  read of it (the app's own time, before and after, does not count), and every write of the
  answer within ``FUNCTIONS_ANSWER_WRITE_SECONDS`` (30). Past a deadline the connection is
  closed, logged at info: a late head after a ``408``, a late body after the app's own answer
  for a body it could not read (or a ``408`` if it gave none).
* **Probes answered while slow clients hold every request slot.** Knative probes the serving
  port itself (readiness through the queue-proxy, which probes this port too), so the probes
  cannot have a listener of their own. The thread pool has ``threads`` + :data:`PROBE_RESERVE`
  threads; every request but ``GET``/``HEAD`` of ``/health/liveness`` and
  ``/health/readiness`` must take one of ``threads`` request slots (:class:`RequestSlots`)
  before the app reads its body, or is answered ``503`` with ``Retry-After`` when none frees
  within ``FUNCTIONS_REQUEST_SLOT_SECONDS`` (3). Slow bodies thus hold at most the request
  slots, and the reserve answers the probes. What the reserve does not cover: a slow *head*
  holds a thread before its path is known, bounded by the head deadline only, and a request
  beyond the slots holds a thread while it waits for one, bounded by the slot wait; enough of
  either at once can delay a probe by up to that deadline or that wait.
* **Closing instead of draining.** Gunicorn drops an app's ``Connection: close`` as a
  hop-by-hop header and drains up to 64 KiB of an unread body to keep the connection. An
  answer whose app said ``Connection: close`` (every 413: the body was left unread past the
  limit), or whose body could not be read (broken chunked framing, a deadline), closes the
  connection, saying so in the answer.
* **Framing gunicorn lets through.** An HTTP/1.1 request without ``Host`` is answered 400 and
  a transfer coding other than ``chunked`` 501 (RFC 9112 3.2 and 6.1; gunicorn refuses two
  ``Host`` lines and a coding list not ending in ``chunked`` itself).
* **No 500.** An unexpected error before the app answered is a ``503`` with ``Retry-After``.

The body limit is the app's: it reads at most limit + 1 bytes (:func:`functions.runtime.
endpoint.read_body`), and gunicorn's body reader reads from the socket only what is asked
(at most one read of up to 1 MiB past it, for a chunk declared larger).
"""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from gunicorn import util
from gunicorn.http.errors import (
    ConfigurationProblem,
    InvalidResponseHeader,
    InvalidResponseHeaderName,
    ParseException,
)
from gunicorn.http.wsgi import Response
from gunicorn.workers import gthread

from functions.runtime.endpoint import problem_answer

# Threads beyond ``threads`` in the pool, for the probes (see the module docstring).
PROBE_RESERVE = 2
PROBE_PATHS = frozenset({"/health/liveness", "/health/readiness"})
# How long a pool thread waits for a new connection's first bytes before handing it back to
# the poller (gthread waits 5 s: a thread held by every silent connection).
FIRST_BYTES_SECONDS = 0.5
# How long a closing connection may take to read its answer and close its side before it
# is closed anyway (gunicorn lingers 2 s in the worker's main loop; here in the pool thread).
CLOSE_LINGER_SECONDS = 1.0
SAFE_METHODS = ("GET", "HEAD")
# Gunicorn's errors that are the server's or the app's fault, not the client's: gunicorn
# answers them 500.
SERVER_FAULTS = (ConfigurationProblem, InvalidResponseHeader, InvalidResponseHeaderName)


@dataclass(frozen=True)
class Deadlines:
    """Seconds a request's head, its body and each write of its answer may take, and how
    long a request waits for a slot; from the environment (tests set small ones)."""

    head: float = 10.0
    body: float = 30.0
    write: float = 30.0
    slot: float = 3.0

    @classmethod
    def from_environ(cls) -> Deadlines:
        defaults = cls()
        return cls(*(float(os.environ.get(f"FUNCTIONS_{name}_SECONDS") or default)
                     for name, default in (("REQUEST_HEAD", defaults.head),
                                           ("REQUEST_BODY", defaults.body),
                                           ("ANSWER_WRITE", defaults.write),
                                           ("REQUEST_SLOT", defaults.slot))))


class RequestTimeout(TimeoutError):
    """A request's body or a write of its answer did not complete in time."""

    def __init__(self, part: str, seconds: float) -> None:
        super().__init__(f"the request's {part} took longer than {seconds:g} s")
        self.part = part


class DeadlineSocket:
    """A connection's socket whose reads share one deadline for a request's head and one for
    its body, and whose writes each have their own timeout.

    Gunicorn's parser reads the socket through ``recv``; the worker marks where a request
    starts (:meth:`begin`) and where its body starts (:meth:`begin_body`). A head past its
    deadline reads as the end of the connection (gunicorn then closes it quietly, and the
    worker answers 408 and logs it); a body or a write past its time raises
    :class:`RequestTimeout`. A timeout set by the caller (gunicorn's bounded drain) applies
    when it is shorter.
    """

    __slots__ = ("_deadline", "_seconds", "_timeout", "expired", "lingered", "request", "sent",
                 "sock", "write_seconds")

    def __init__(self, sock: socket.socket, write_seconds: float) -> None:
        self.sock = sock
        self.write_seconds = write_seconds
        self._timeout: float | None = None
        self._deadline: float | None = None
        self._seconds = 0.0
        self.request: Any = None
        self.sent = False
        self.expired: RequestTimeout | None = None
        self.lingered = False

    def begin(self, head_seconds: float) -> None:
        """A request starts: its head is being read."""
        self._deadline = time.monotonic() + head_seconds
        self._seconds = head_seconds
        self.request = None
        self.sent = False
        self.expired = None

    def begin_body(self, request: Any, body_seconds: float) -> None:
        """The head was read; the body's deadline starts at its first read from the socket."""
        self.request = request
        self._deadline = None
        self._seconds = body_seconds

    def close_after_answer(self) -> None:
        """Close the connection once this answer is sent, and say so in it."""
        if self.request is not None:
            self.request.force_close()

    # -- reads --------------------------------------------------------------------------------

    def recv(self, size: int, flags: int = 0) -> bytes:
        if self.lingered:
            return b""
        deadline = self._deadline
        if deadline is None:
            deadline = self._deadline = time.monotonic() + self._seconds
        remaining = deadline - time.monotonic()
        caller = self._timeout
        if caller is not None and caller < remaining:
            self.sock.settimeout(caller)
            return self.sock.recv(size, flags)
        if remaining > 0:
            self.sock.settimeout(remaining)
            try:
                return self.sock.recv(size, flags)
            except TimeoutError:
                pass
        if self.request is None:
            self.expired = RequestTimeout("head", self._seconds)
            return b""
        self.expired = RequestTimeout("body", self._seconds)
        raise self.expired

    # -- writes -------------------------------------------------------------------------------

    def sendall(self, data: bytes, flags: int = 0) -> None:
        self._write(self.sock.sendall, data, flags)

    def send(self, data: bytes, flags: int = 0) -> int:
        return self._write(self.sock.send, data, flags)  # type: ignore[no-any-return]

    def sendfile(self, file: Any, offset: int = 0, count: int | None = None) -> int:
        return self._write(self.sock.sendfile, file, offset, count)  # type: ignore[no-any-return]

    def _write(self, write: Callable[..., Any], *args: Any) -> Any:
        self.sent = True
        self.sock.settimeout(self.write_seconds)
        try:
            return write(*args)
        except TimeoutError:
            self.expired = RequestTimeout("answer", self.write_seconds)
            raise self.expired from None

    # -- the rest, as the socket's ------------------------------------------------------------

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout
        self.sock.settimeout(timeout)

    def setblocking(self, flag: bool) -> None:
        self._timeout = None if flag else 0.0
        self.sock.setblocking(flag)

    def gettimeout(self) -> float | None:
        return self._timeout

    def fileno(self) -> int:
        return self.sock.fileno()

    def shutdown(self, how: int) -> None:
        if not self.lingered:
            self.sock.shutdown(how)

    def close(self) -> None:
        self.sock.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


class _Held:
    """An app's answer that releases its request slot once sent (WSGI ``close``)."""

    __slots__ = ("_release", "result")

    def __init__(self, result: Iterable[bytes], release: Callable[[], None]) -> None:
        self.result = result
        self._release = release

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.result)

    def close(self) -> None:
        try:
            close = getattr(self.result, "close", None)
            if close is not None:
                close()
        finally:
            self._release()


def _refusal(environ: dict[str, Any]) -> tuple[int, str] | None:
    """A request whose framing gunicorn lets through but RFC 9112 does not."""
    if environ.get("SERVER_PROTOCOL") == "HTTP/1.1" and "HTTP_HOST" not in environ:
        return 400, "an HTTP/1.1 request needs a Host header"
    coding = environ.get("HTTP_TRANSFER_ENCODING")
    if coding is not None and coding.strip(" \t").lower() != "chunked":
        return 501, f"transfer coding {coding[:40]!r} is not supported"
    return None


class RequestSlots:
    """WSGI middleware: at most ``slots`` requests other than the probes in the app at once;
    an answer that says ``Connection: close``, or whose body could not be read, closes its
    connection (see the module docstring)."""

    def __init__(self, app: Any, slots: int, wait_seconds: float) -> None:
        self.app = app
        self.wait_seconds = wait_seconds
        # One token per slot: a queue of tokens is C code, cheaper per request than a
        # semaphore (written in Python, on a condition variable).
        self._slots: queue.SimpleQueue[bool] = queue.SimpleQueue()
        for _ in range(max(1, slots)):
            self._slots.put(True)

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        closer = getattr(environ.get("gunicorn.socket"), "close_after_answer", None)

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            if closer is not None and (
                    getattr(environ.get("wsgi.input"), "failed", False)
                    or any(name.lower() == "connection" and value.lower() == "close"
                           for name, value in headers)):
                closer()
            return start_response(status, headers, exc_info)

        refusal = _refusal(environ)
        if refusal is not None:
            return self._refuse(start, *refusal)
        if (environ.get("PATH_INFO") in PROBE_PATHS
                and environ.get("REQUEST_METHOD") in SAFE_METHODS):
            return self.app(environ, start)  # type: ignore[no-any-return]
        try:
            token = self._slots.get(timeout=self.wait_seconds)
        except queue.Empty:
            return self._refuse(start, 503, "every request slot is busy", retry_after=1)
        try:
            result = self.app(environ, start)
        except BaseException:
            self._slots.put(token)
            raise
        return _Held(result, lambda: self._slots.put(token))

    @staticmethod
    def _refuse(start: Callable[..., Any], status: int, detail: str,
                retry_after: float | None = None) -> Iterable[bytes]:
        code, headers, body = problem_answer(status, detail, retry_after=retry_after)
        # The body is left unread: the connection cannot carry another request.
        start(f"{code} {HTTPStatus(code).phrase}", [*headers, ("Connection", "close")])
        return [body]


class EventWorker(gthread.ThreadWorker):  # type: ignore[misc]
    """``gthread`` with request deadlines, request slots and a probe reserve (see the module
    docstring). Gunicorn stays the process manager (the master, heartbeats, signals, graceful
    shutdown, hooks, ``max_requests``) and the HTTP parser."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadlines = Deadlines.from_environ()

    def get_thread_pool(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=self.cfg.threads + PROBE_RESERVE)

    def load_wsgi(self) -> None:
        super().load_wsgi()
        app: Any = self.wsgi  # type: ignore[has-type]
        self.wsgi = RequestSlots(app, self.cfg.threads, self.deadlines.slot)

    def handle(self, conn: Any) -> Any:
        sock = conn.sock
        if not isinstance(sock, DeadlineSocket):
            sock = conn.sock = DeadlineSocket(sock, self.deadlines.write)
        if (not conn.initialized and not conn.data_ready
                and not conn.wait_for_data(FIRST_BYTES_SECONDS)):
            return gthread._DEFER  # the poller waits for the first bytes, not a thread
        sock.begin(self.deadlines.head)
        keep = super().handle(conn)
        if sock.expired is not None:
            self.log.info("closing the connection of %s: %s", _peer(conn.client), sock.expired)
            if not sock.sent:
                with contextlib.suppress(Exception):
                    util.write_error(sock, 408, "Request Timeout",
                                     "the request did not arrive in time")
            keep = False
        if keep is False:
            _linger(sock)
        return keep

    def handle_request(self, req: Any, conn: Any) -> bool:
        sock = conn.sock
        sock.begin_body(req, self.deadlines.body)
        try:
            return bool(super().handle_request(req, conn))
        except RequestTimeout:
            return False  # logged and answered by handle

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        """Gunicorn's answers for what its parser refuses (400, 414, 431, 501...); anything
        else a 503 with ``Retry-After``, never gunicorn's 500."""
        if isinstance(exc, ParseException) and not isinstance(exc, SERVER_FAULTS):
            super().handle_error(req, client, addr, exc)
            return
        self.log.exception("Error handling request %s", getattr(req, "uri", "(no URI read)"))
        if req is None or getattr(client, "sent", True):
            return
        code, headers, body = problem_answer(503, "internal error", retry_after=30)
        response = Response(req, client, self.cfg)
        response.force_close()
        with contextlib.suppress(Exception):
            response.start_response(f"{code} {HTTPStatus(code).phrase}", headers)
            response.write(body)
            response.close()


def _peer(client: Any) -> str:
    return f"{client[0]}:{client[1]}" if isinstance(client, tuple) else str(client)


def _linger(sock: DeadlineSocket) -> None:
    """Half-close and read what the client still sends for a moment, so the answer reaches
    it before the close (RFC 9112 9.6), in this pool thread rather than in the worker's main
    loop, where gunicorn would otherwise do it for up to 2 s."""
    with contextlib.suppress(OSError):
        sock.sock.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + CLOSE_LINGER_SECONDS
        drained = 0
        while drained < 65536:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            sock.sock.settimeout(remaining)
            data = sock.sock.recv(4096)
            if not data:
                break
            drained += len(data)
    sock.lingered = True
