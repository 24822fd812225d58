"""One blocking HTTP/1.1 client connection (plain or TLS), for the requests that carry the
product's work: API requests (:mod:`functions.kube.transport`) and event deliveries
(:mod:`functions.runtime.sender`).

``http.client`` parses every answer's headers with the ``email`` package and wraps the socket
in a new buffered reader per answer: against a local API server that is most of the client's
CPU per request (0.2 ms for a small GET, against 0.08 ms here). This connection keeps one
reader for its lifetime, sends the head and body in one write, and reads an answer with the
pure framing rules of :mod:`functions.core.http1`. One thread uses a connection at a time.
"""

from __future__ import annotations

import select
import socket
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from io import BufferedReader

from functions.core.http1 import (
    MAX_HEAD,
    BadMessage,
    Framing,
    Head,
    chunk_size,
    keeps_alive,
    parse_head,
    response_framing,
)

# Methods whose request always states a body length, even an empty one (RFC 9110 8.6).
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class ClosedBeforeAnswer(ConnectionResetError):
    """The server closed the connection before any byte of an answer: typically an idle
    keep-alive connection it had timed out, so the request was never processed."""


class IncompleteMessage(ConnectionError):
    """The connection ended in the middle of a message."""


class HeadTooLarge(BadMessage):
    """A message head over :data:`~functions.core.http1.MAX_HEAD` bytes."""


class BodyTooLarge(BadMessage):
    """A chunked body over the reader's limit."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    head: Head
    body: bytes
    # Whether the connection may carry another request.
    keep_alive: bool


class Connection:
    """A connected HTTP/1.1 client socket. ``connect_timeout`` bounds the connection (and TLS
    handshake); ``timeout`` each later wait for the server."""

    def __init__(self, host: str, port: int, *, timeout: float | None,
                 connect_timeout: float | None = None,
                 context: ssl.SSLContext | None = None) -> None:
        self.authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        raw = socket.create_connection((host, port), connect_timeout)
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock: socket.socket = (context.wrap_socket(raw, server_hostname=host)
                                        if context is not None else raw)
        except BaseException:
            raw.close()
            raise
        self.sock.settimeout(timeout)
        self._reader = self.sock.makefile("rb")
        self._messages = MessageReader(self._reader)

    def settimeout(self, timeout: float | None) -> None:
        self.sock.settimeout(timeout)

    def request(self, method: str, target: str, headers: Mapping[str, str],
                body: bytes | None = None) -> Answer:
        """Send one request and read its whole answer."""
        self._send(method, target, headers, body)
        status, head, framing = self._answer_head(method)
        data = b"".join(self._messages.body(framing))
        return Answer(status, head, data,
                      framing.kind != "close" and keeps_alive(head, head.first))

    def open_stream(self, method: str, target: str,
                    headers: Mapping[str, str]) -> tuple[int, Head, Framing]:
        """Send a request whose answer's body keeps coming (a watch, followed logs): its
        status and head now, its body with :meth:`stream`."""
        self._send(method, target, headers, None)
        return self._answer_head(method)

    def stream(self, framing: Framing, amount: int) -> Iterator[bytes]:
        """The body as it arrives: each piece one read of at most ``amount`` bytes, or (for
        a chunked body) one chunk, which is how the API server flushes a watch's events."""
        return self._messages.body(framing, amount)

    def dropped(self) -> bool:
        """Whether an idle connection is readable: the server closed it (or sent bytes nobody
        asked for), so it must not carry another request."""
        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    def close(self) -> None:
        self._reader.close()
        self.sock.close()

    # -- the wire -------------------------------------------------------------------------------

    def _send(self, method: str, target: str, headers: Mapping[str, str],
              body: bytes | None) -> None:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.authority}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None or method in BODY_METHODS:
            lines.append(f"Content-Length: {len(body or b'')}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.sock.sendall(head + body if body else head)

    def _answer_head(self, method: str) -> tuple[int, Head, Framing]:
        while True:
            head = self._messages.head()
            if head is None:
                raise ClosedBeforeAnswer("the server closed the connection without an answer")
            status = _status(head)
            if not 100 <= status < 200:  # interim answers (100 Continue) come before the answer
                return status, head, response_framing(head, method)


class MessageReader:
    """Reads HTTP/1.1 messages (heads and bodies) from a buffered binary stream: the answers
    a client connection reads, the requests a server connection reads
    (:mod:`functions.runtime.httpd`)."""

    def __init__(self, reader: BufferedReader) -> None:
        self._reader = reader

    def head(self) -> Head | None:
        """The next message's head; ``None`` when the stream ended before any byte of it."""
        lines: list[bytes] = []
        size = 0
        while True:
            line = self._reader.readline(MAX_HEAD + 1)
            if not line:
                if not lines:
                    return None
                raise IncompleteMessage("the connection ended inside a message's head")
            size += len(line)
            if size > MAX_HEAD:
                raise HeadTooLarge(f"message head over {MAX_HEAD} bytes")
            line = line.rstrip(b"\r\n")
            if not line:
                if lines:
                    return parse_head(b"\r\n".join(lines))
                continue  # a stray empty line before the start line (RFC 9112 2.2)
            lines.append(line)

    def body(self, framing: Framing, amount: int | None = None,
             limit: int | None = None) -> Iterator[bytes]:
        """The body in pieces: with ``amount``, each piece one read of at most that many
        bytes, or one chunk of a chunked body; without it, as few pieces as the framing
        allows. Past ``limit`` bytes of a chunked body, :class:`BodyTooLarge`."""
        reader = self._reader
        if framing.kind == "length":
            remaining = framing.size
            while remaining:
                piece = (reader.read(remaining) if amount is None
                         else reader.read1(min(amount, remaining)))
                if not piece:
                    raise IncompleteMessage("the connection ended inside a message's body")
                remaining -= len(piece)
                yield piece
        elif framing.kind == "chunked":
            total = 0
            while size := chunk_size(self._line()):
                total += size
                if limit is not None and total > limit:
                    raise BodyTooLarge(f"chunked body over {limit} bytes")
                yield self._exactly(size)
                self._line()
            while self._line():  # trailers, up to the empty line
                pass
        elif framing.kind == "close":
            while piece := (reader.read() if amount is None else reader.read1(amount)):
                yield piece

    def _line(self) -> bytes:
        line = self._reader.readline(MAX_HEAD + 1)
        if not line.endswith(b"\n"):
            raise IncompleteMessage("the connection ended inside a chunked body")
        return line.rstrip(b"\r\n")

    def _exactly(self, size: int) -> bytes:
        data = self._reader.read(size)
        if len(data) != size:
            raise IncompleteMessage("the connection ended inside a chunk")
        return data


def _status(head: Head) -> int:
    if not head.first.startswith("HTTP/") or not head.second.isdigit():
        raise BadMessage(f"not an HTTP answer: {head.first} {head.second}")
    return int(head.second)
