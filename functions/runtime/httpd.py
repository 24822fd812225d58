"""A lean HTTP/1.1 server for event deliveries: a thread per connection, blocking reads, the
framing rules of :mod:`functions.core.http1`, at most ``concurrency`` requests handled at once.

Every event reaches a function as one POST on a keep-alive connection from the Broker. Under
gunicorn's threaded worker each request costs about 0.3 ms of CPU before the app sees it (a
poller, a future per request, a parser that reads through several buffers): as much as the
work of an event whose pass has nothing to do. Here a connection's thread reads the head and
body from one buffered reader and writes the answer in one call: 0.08-0.17 ms (a trivial app,
keep-alive POSTs of 3 KB over 1-8 connections).

The same server carries the functions under gunicorn (:mod:`functions.runtime.worker`) and the
local tools that only take POSTs (:mod:`functions.runtime.post_server`).
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus

from functions.core.http1 import BadMessage, Head, keeps_alive, request_framing
from functions.kube.wire import BodyTooLarge, HeadTooLarge, IncompleteMessage, MessageReader
from functions.runtime.endpoint import problem_answer

log = logging.getLogger(__name__)


class BodyStream:
    """A request's body as a readable stream (a WSGI ``wsgi.input``): read as the handler asks,
    so it can refuse a body by its stated length without reading it."""

    def __init__(self, pieces: Iterator[bytes], length: int | None = None) -> None:
        self._pieces = pieces
        self._buffer = b""
        # A body of a stated length has ended once that much has arrived, without another
        # read (which would wait for the next request).
        self._left = length
        self._ended = length == 0
        self.failed = False

    @classmethod
    def whole(cls, body: bytes) -> BodyStream:
        """A body already read off the connection."""
        stream = cls(iter(()), 0)
        stream._buffer = body
        return stream

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            data = self._buffer + b"".join(self._take_all())
            self._buffer = b""
            return data
        while len(self._buffer) < size and self._more():
            pass
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def readline(self, size: int | None = -1) -> bytes:
        limit = size if size is not None and size >= 0 else None
        while (b"\n" not in self._buffer and (limit is None or len(self._buffer) < limit)
               and self._more()):
            pass
        end = self._buffer.find(b"\n") + 1 or len(self._buffer)
        if limit is not None:
            end = min(end, limit)
        data, self._buffer = self._buffer[:end], self._buffer[end:]
        return data

    def readlines(self, hint: int = -1) -> list[bytes]:
        return list(iter(self.readline, b""))

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.readline, b"")

    def finished(self) -> bool:
        """Whether the body was read to its end, so the connection can carry the next
        request (a handler that left some unread has its connection closed after the answer:
        what is left may be large, or never come)."""
        return self._ended and not self.failed

    def _more(self) -> bool:
        if self._ended:
            return False
        try:
            piece = next(self._pieces, None)
        except BaseException:
            self.failed = self._ended = True
            raise
        if piece is None:
            self._ended = True
            return False
        self._buffer += piece
        if self._left is not None:
            self._left -= len(piece)
            self._ended = self._left <= 0
        return True

    def _take_all(self) -> Iterator[bytes]:
        while self._more():
            yield self._buffer
            self._buffer = b""


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    target: str
    version: str
    head: Head
    stream: BodyStream
    peer: tuple[str, int]


# (status, headers, body); the server adds Content-Length, Date and Connection.
Reply = tuple[int, list[tuple[str, str]], bytes]
Handler = Callable[[Request], Reply]
# No body on these answers (RFC 9110 6.4.1).
BODILESS = frozenset({204, 304})
# A streamed body is read in pieces of at most this size.
READ_PIECE = 65536


@dataclass(frozen=True)
class Limits:
    """``max_body``: a body is read whole before the handler runs, and refused (413, unread)
    over this size; ``None``: the handler reads it from the request's stream as it needs.
    ``idle_seconds``: how long a keep-alive connection waits for its next request (``0``:
    every connection closes after its first answer);
    ``read_seconds``: for each read once a request has begun."""

    max_body: int | None = 4 * 1024 * 1024
    idle_seconds: float = 75.0
    read_seconds: float = 30.0
    max_connections: int = 1000


def reply_bytes(status: int, headers: Sequence[tuple[str, str]], body: bytes, *,
                close: bool, head_only: bool = False) -> bytes:
    """One whole answer: the status line, ``headers`` (with framing headers replaced), a
    ``Date``, and ``body``."""
    lines = [f"HTTP/1.1 {status} {_phrase(status)}"]
    lines += [f"{name}: {value}" for name, value in headers
              if name.lower() not in ("content-length", "transfer-encoding", "connection",
                                      "date")]
    if status not in BODILESS and not 100 <= status < 200:
        lines.append(f"Content-Length: {len(body)}")
    else:
        body = b""
    lines.append(f"Date: {_date()}")
    if close:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only or not body else head + body


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


_dates: tuple[int, str] = (0, "")


def _date() -> str:
    """The ``Date`` header's value, formatted once a second."""
    global _dates
    now = int(time.time())
    if _dates[0] != now:
        _dates = (now, formatdate(now, usegmt=True))
    return _dates[1]


@dataclass
class HttpServer:
    """Serves ``handler`` on listening sockets until :meth:`stop`."""

    listeners: Sequence[socket.socket]
    handler: Handler
    concurrency: int = 2
    limits: Limits = field(default_factory=Limits)
    name: str = "httpd"
    requests: int = field(default=0, init=False)
    _gate: threading.Semaphore = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    # Open connections; True while one is inside a request.
    _connections: dict[socket.socket, bool] = field(default_factory=dict, init=False)
    _stopping: threading.Event = field(default_factory=threading.Event, init=False)

    def __post_init__(self) -> None:
        self._gate = threading.Semaphore(max(1, self.concurrency))

    def serve(self, tick: Callable[[], bool] | None = None, tick_seconds: float = 1.0) -> None:
        """Accept connections until :meth:`stop`, or until ``tick`` (called about every
        ``tick_seconds``) returns ``False``."""
        with selectors.DefaultSelector() as selector:
            for listener in self.listeners:
                listener.setblocking(False)
                selector.register(listener, selectors.EVENT_READ)
            while not self._stopping.is_set():
                for key, _ in selector.select(tick_seconds):
                    self._accept(key.fileobj)  # type: ignore[arg-type]
                if tick is not None and not tick():
                    break
        self._stopping.set()

    def stop(self) -> None:
        self._stopping.set()

    def drain(self, timeout: float, heartbeat: Callable[[], None] | None = None) -> bool:
        """After :meth:`serve` returned: close the listeners and the idle connections, let
        those inside a request answer it (then close), for up to ``timeout`` seconds, calling
        ``heartbeat`` as it waits. Whether all closed."""
        self._stopping.set()
        for listener in self.listeners:
            listener.close()
        deadline = time.monotonic() + timeout
        while True:
            if heartbeat is not None:
                heartbeat()
            with self._lock:
                for connection, busy in list(self._connections.items()):
                    if not busy:
                        _shut(connection)
                if not self._connections:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def open_connections(self) -> int:
        with self._lock:
            return len(self._connections)

    # -- connections ----------------------------------------------------------------------------

    def _accept(self, listener: socket.socket) -> None:
        try:
            connection, peer = listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return
        except OSError as exc:  # out of file descriptors, say: the next tick tries again
            log.warning("%s: cannot accept a connection: %s", self.name, exc)
            time.sleep(0.1)
            return
        connection.setblocking(True)
        with contextlib.suppress(OSError):  # not TCP (a Unix socket)
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            full = len(self._connections) >= self.limits.max_connections
            if not full:
                self._connections[connection] = False
        if full:
            _refuse(connection)
            return
        address = peer if isinstance(peer, tuple) else ("", 0)
        threading.Thread(target=self._serve_connection, args=(connection, address[:2]),
                         name=f"{self.name}-connection", daemon=True).start()

    def _serve_connection(self, connection: socket.socket, peer: tuple[str, int]) -> None:
        reader = connection.makefile("rb")
        messages = MessageReader(reader)
        # The first request may take as long as any read; a later one, the keep-alive time.
        wait = self.limits.read_seconds
        try:
            while not self._stopping.is_set():
                connection.settimeout(wait)
                try:
                    head = messages.head()
                except TimeoutError:
                    return
                if head is None:
                    return
                with self._lock:
                    self._connections[connection] = True
                connection.settimeout(self.limits.read_seconds)
                if not self._exchange(connection, messages, head, peer):
                    return
                with self._lock:
                    self._connections[connection] = False
                wait = self.limits.idle_seconds
        except BadMessage as exc:
            _send_quietly(connection, problem_answer(
                431 if isinstance(exc, HeadTooLarge) else 400, str(exc)))
        except (OSError, IncompleteMessage):
            pass  # the client went away or stopped sending: nobody to answer
        finally:
            with self._lock:
                self._connections.pop(connection, None)
            reader.close()
            connection.close()

    def _exchange(self, connection: socket.socket, messages: MessageReader, head: Head,
                  peer: tuple[str, int]) -> bool:
        """Read one request's body, answer it; whether the connection stays open."""
        if not head.third.startswith("HTTP/1."):
            raise BadMessage(f"unsupported protocol {head.third[:20]!r}")
        framing = request_framing(head)
        limit = self.limits.max_body
        if limit is not None and framing.kind == "length" and framing.size > limit:
            _send_quietly(connection, problem_answer(
                413, f"body exceeds the limit of {limit} bytes"))
            return False
        if (framing.kind != "none" and head.third == "HTTP/1.1"
                and (head.get("Expect") or "").lower() == "100-continue"):
            connection.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        if limit is None:
            stream = BodyStream(messages.body(framing, READ_PIECE),
                                framing.size if framing.kind in ("length", "none") else None)
        else:
            try:
                stream = BodyStream.whole(b"".join(messages.body(framing, limit=limit)))
            except BodyTooLarge as exc:
                _send_quietly(connection, problem_answer(413, str(exc)))
                return False
        request = Request(head.first, head.second, head.third, head, stream, peer)
        with self._gate:
            return self._serve_request(connection, request)

    def _serve_request(self, connection: socket.socket, request: Request) -> bool:
        """Handle one request and answer it, in one of the ``concurrency`` turns (a request
        waiting for a turn is not being served yet); whether the connection stays open."""
        status, headers, payload = self._handle(request)
        with self._lock:
            self.requests += 1
        close = (not keeps_alive(request.head, request.version) or self._stopping.is_set()
                 or self.limits.idle_seconds <= 0
                 or not request.stream.finished()
                 or any(name.lower() == "connection" and value.lower() == "close"
                        for name, value in headers))
        connection.sendall(reply_bytes(status, headers, payload, close=close,
                                       head_only=request.method == "HEAD"))
        return not close

    def _handle(self, request: Request) -> Reply:
        try:
            return self.handler(request)
        except Exception:
            # Never a 500: the Broker retries a 503 after Retry-After.
            log.exception("unexpected error while serving %s %s", request.method,
                          request.target)
            return problem_answer(503, "internal error", retry_after=30)


def _refuse(connection: socket.socket) -> None:
    _send_quietly(connection, problem_answer(503, "too many connections", retry_after=1))
    connection.close()


def _send_quietly(connection: socket.socket, reply: Reply) -> None:
    """A closing answer the server gives itself; the client may be gone already."""
    status, headers, body = reply
    with contextlib.suppress(OSError):
        connection.sendall(reply_bytes(status, headers, body, close=True))


def _shut(connection: socket.socket) -> None:
    """Wake the connection's thread from its read: it sees the end and closes."""
    with contextlib.suppress(OSError):
        connection.shutdown(socket.SHUT_RDWR)
