"""Hostile HTTP servers on loopback, for the clients' tests (``test_transport.py``,
``tests/runtime/test_sender.py``): a raw socket server whose connections read each request
(head and ``Content-Length`` body) and answer it with a script of raw bytes, and the table
of scripts every client must survive.

While :attr:`Hostile.hostile` is set, each request is answered by the script; once it is
cleared, by a plain ``200 fine``, so a test can check that nothing of the hostile answer
reaches the next request. Scripts that write without end stop when the client has gone or
the server is closed.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import pytest

# A script writes its answer to ``conn``; ``False`` ends the connection.
Script = Callable[[socket.socket, "Hostile"], bool]

FINE = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\nfine"
# The pace of a script that writes forever: well inside any read timeout, so only a deadline
# on the whole request ends it.
PACE = 0.01


class Hostile:
    """Accepts connections on 127.0.0.1; counts connections and request heads."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.hostile = True
        self.stopped = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = 0
        self.heads: list[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        with conn, suppress(OSError):
            data = b""
            while not self.stopped.is_set():
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, data = data.split(b"\r\n\r\n", 1)
                length = content_length(head)
                while len(data) < length:
                    data += conn.recv(65536)
                data = data[length:]
                self.heads.append(head)
                if not self.hostile:
                    conn.sendall(FINE)
                elif not self.script(conn, self):
                    return

    def close(self) -> None:
        self.stopped.set()
        # closing alone does not wake an accept() blocked in another thread; a shutdown does
        with suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()


@contextmanager
def hostile(script: Script) -> Iterator[Hostile]:
    server = Hostile(script)
    try:
        yield server
    finally:
        server.close()


def content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def sends(answer: bytes, *, keep: bool = False) -> Script:
    """Write ``answer``; then close the connection, unless ``keep``."""
    def script(conn: socket.socket, _: Hostile) -> bool:
        conn.sendall(answer)
        return keep
    return script


def forever(start: bytes, again: bytes, pace: float = PACE) -> Script:
    """Write ``start``, then ``again`` every ``pace`` seconds until the client goes."""
    def script(conn: socket.socket, server: Hostile) -> bool:
        conn.sendall(start)
        while not server.stopped.wait(pace):
            conn.sendall(again)
        return False
    return script


def silent(conn: socket.socket, server: Hostile) -> bool:
    """Read the request and never answer (until the server is closed)."""
    server.stopped.wait(30)
    return False


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
# A client's limit on an answer's body, in these cases.
LIMIT = 1 << 20

# Every answer a client must turn into an error of its own, within its deadline, leaving
# nothing behind for the next request. ``id`` names the case in the clients' tables.
CASES = [
    pytest.param(forever(b"", b"HTTP/1.1 100 Continue\r\n\r\n"), id="endless-100-continue"),
    pytest.param(forever(CHUNKED + b"2\r\nok\r\n0\r\n", b"X-Trailer: more\r\n"),
                 id="endless-trailers"),
    pytest.param(forever(b"HTTP/1.1 200 OK\r\nX-Slow: ", b"x"), id="head-a-byte-at-a-time"),
    pytest.param(forever(b"HTTP/1.1 200 OK\r\n", b"X-Many: header\r\n"),
                 id="endless-header-lines"),
    pytest.param(sends(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (LIMIT + 1)
                       + b"x" * (LIMIT + 1), keep=True), id="length-over-the-limit"),
    pytest.param(forever(CHUNKED, b"10000\r\n" + b"x" * (1 << 16) + b"\r\n", pace=0),
                 id="chunked-body-over-the-limit"),
    pytest.param(forever(b"HTTP/1.0 200 OK\r\n\r\n", b"x" * (1 << 16), pace=0),
                 id="body-until-close-over-the-limit"),
    pytest.param(sends(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\nabc",
                       keep=True), id="huge-content-length"),
    pytest.param(sends(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nabc", keep=True),
                 id="negative-content-length"),
    pytest.param(sends(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\nabcde",
                       keep=True), id="conflicting-content-lengths"),
    pytest.param(sends(b"HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\nabc", keep=True),
                 id="signed-content-length"),
    pytest.param(sends(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n"
                       b"\r\n3\r\nabc\r\n0\r\n\r\n", keep=True), id="content-length-and-chunked"),
    pytest.param(sends(CHUNKED + b"zz\r\nabc\r\n0\r\n\r\n", keep=True), id="chunk-size-not-hex"),
    pytest.param(sends(CHUNKED + b"-5\r\nabcde\r\n0\r\n\r\n", keep=True),
                 id="negative-chunk-size"),
    pytest.param(forever(CHUNKED + b"ffffffffffffffffffff\r\n", b"x" * (1 << 16), pace=0),
                 id="huge-chunk-size"),
    pytest.param(forever(CHUNKED, b"1" * 1024), id="endless-chunk-size-line"),
    pytest.param(sends(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"),
                 id="closed-mid-body"),
    pytest.param(sends(CHUNKED + b"a\r\nabc"), id="closed-mid-chunk"),
    pytest.param(silent, id="never-answers"),
    pytest.param(sends(b"SSH-2.0-OpenSSH_9.6\r\n\r\n"), id="not-http"),
    pytest.param(sends(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                       b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", keep=True),
                 id="interim-answer-not-100"),
    pytest.param(sends(b""), id="closed-without-answering"),
]

# Slack beyond a deadline for a loaded machine (a test thread may wait for a core).
SLACK = 2.0


def elapsed_since(started: float) -> float:
    return time.monotonic() - started
