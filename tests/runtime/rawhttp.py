"""Raw-socket HTTP/1.1 exchanges for the servers' hostile-input tests: the request bytes are
the test's own, the answers are read by the standard library's parser (``http.client``), and
whether the server closed the connection after its answer is observed, not assumed."""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from devstack.cluster.ports import free_port
from tests.support import http_status

REPO = Path(__file__).resolve().parents[2]
# What a server may still be reading once it has decided to close (its socket buffers); a
# test sending more than a limit checks the server stopped well before the whole stream.
CLOSED_WAIT = 5.0


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]
    body: bytes


class _Unclosable:
    """The connection's one reader, lent to each ``HTTPResponse`` (which closes its reader
    once it has read an answer's body)."""

    def __init__(self, reader: IO[bytes]) -> None:
        self._reader = reader

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)


class _Lender:
    def __init__(self, reader: IO[bytes]) -> None:
        self._reader = reader

    def makefile(self, mode: str, *args: Any, **kwargs: Any) -> Any:
        return _Unclosable(self._reader)


class RawConnection:
    """One client connection to ``127.0.0.1:port``."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.reader = self.sock.makefile("rb")

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.reader.close()
        self.sock.close()

    def send(self, data: bytes) -> bool:
        """Whether all of ``data`` was sent (the server may close while it arrives)."""
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True

    def answer(self, method: str = "POST") -> Answer | None:
        """The next answer (interim 1xx skipped), or ``None`` when the connection ended
        without one."""
        response = http.client.HTTPResponse(_Lender(self.reader),  # type: ignore[arg-type]
                                            method=method)
        try:
            response.begin()
            body = response.read()
        except (http.client.RemoteDisconnected, ConnectionResetError):
            return None
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()},
                      body)

    def closed(self, wait: float = CLOSED_WAIT) -> bool:
        """Whether the server ended the connection (within ``wait`` seconds)."""
        self.sock.settimeout(wait)
        try:
            return self.reader.read(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


def post(headers: bytes, body: bytes = b"", line: bytes = b"POST / HTTP/1.1") -> bytes:
    """A request with ``Host`` and ``headers`` (each line ending in CRLF), then ``body``."""
    return line + b"\r\nHost: t\r\n" + headers + b"\r\n" + body


def chunked(body: bytes) -> bytes:
    return post(b"Transfer-Encoding: chunked\r\n", body)


def length(value: bytes, body: bytes = b"{}") -> bytes:
    return post(b"Content-Length: " + value + b"\r\n", body)


LIVENESS = (b"GET /health/liveness HTTP/1.1\r\nHost: t\r\n\r\n", "GET", 200)


def exchange(port: int, request: bytes, method: str = "POST",
             probe: tuple[bytes, str, int] = LIVENESS) -> tuple[Answer | None, bool]:
    """Send ``request``; its answer, and whether the server then closed the connection (else
    it answers ``probe`` on the same connection with its status: the request was framed as
    the server read it, nothing of it taken for a second request)."""
    with RawConnection(port) as connection:
        connection.send(request)
        answer = connection.answer(method)
        if answer is None or answer.headers.get("connection") == "close":
            return answer, connection.closed()
        probe_request, probe_method, probe_status = probe
        connection.send(probe_request)
        second = connection.answer(probe_method)
        assert second is not None and second.status == probe_status, (answer, second)
        return answer, False


def stream_until_closed(port: int, head: bytes, piece: bytes,
                        most: int) -> tuple[int, Answer | None]:
    """Send ``head`` then ``piece`` after ``piece`` (up to ``most`` bytes) from a thread until
    the server stops reading; how many body bytes were sent, and the server's answer."""
    sent = 0
    with RawConnection(port, timeout=30) as connection:
        connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
        connection.send(head)

        def send() -> None:
            nonlocal sent
            while sent < most:
                try:
                    connection.sock.sendall(piece)
                except OSError:
                    return
                sent += len(piece)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        answer = connection.answer()
        if answer is not None:
            assert connection.closed(), "the connection stayed open after the answer"
        sender.join(CLOSED_WAIT)
        with suppress(OSError):  # ends a sender still blocked in a write
            connection.sock.shutdown(socket.SHUT_RDWR)
        sender.join(CLOSED_WAIT)
        return sent, answer


def _ready(port: int, process: subprocess.Popen[bytes], timeout: float = 60) -> bool:
    """Whether the server on ``port`` became ready (``False``: it exited first)."""
    deadline = time.monotonic() + timeout
    while process.poll() is None:
        if http_status(port, "/health/readiness") == 200:
            return True
        if time.monotonic() > deadline:
            raise AssertionError(f"the server on {port} never became ready")
        time.sleep(0.05)
    return False


@contextmanager
def served(function: str, env: Mapping[str, str], threads: int = 2,
           log: Path | None = None) -> Iterator[int]:
    """``python -m functions serve <function>`` on a free port, until the block ends (started
    again on another port if a parallel test took the first one meanwhile)."""
    for _ in range(3):
        port = free_port()
        with open(log or os.devnull, "wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "functions", "serve", function, "--host", "127.0.0.1",
                 "--port", str(port), "--threads", str(threads)],
                cwd=REPO, env=dict(env), stdout=output, stderr=subprocess.STDOUT)
            try:
                if _ready(port, process):
                    yield port
                    return
            finally:
                if process.poll() is None:
                    process.terminate()
                process.wait(30)
    raise AssertionError(f"{function} did not start")
