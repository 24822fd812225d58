"""The functions' HTTP server on a loopback socket: framing, keep-alive, refusals, the bound on
requests handled at once, and a graceful stop."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from functions.runtime.httpd import BodyStream, HttpServer, Limits, Reply, Request
from tests.support import wait_for

Seen = list[tuple[str, str, bytes]]


def echo(seen: Seen) -> Callable[[Request], Reply]:
    def handle(request: Request) -> Reply:
        body = request.stream.read()
        seen.append((request.method, request.target, body))
        return 200, [("Content-Type", "text/plain")], b"got " + body
    return handle


@contextmanager
def serving(handler: Callable[[Request], Reply], *, concurrency: int = 2,
            limits: Limits | None = None) -> Iterator[tuple[int, HttpServer]]:
    listener = socket.create_server(("127.0.0.1", 0))
    server = HttpServer([listener], handler, concurrency=concurrency,
                        limits=limits or Limits(), name="test-httpd")
    thread = threading.Thread(target=server.serve, kwargs={"tick_seconds": 0.05}, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], server
    finally:
        server.stop()
        thread.join(5)
        assert server.drain(5)


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def read_answer(sock: socket.socket) -> tuple[str, dict[str, str], bytes]:
    """One answer: its status line, headers (lower-cased names) and body (by length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = sock.recv(65536)
        if not piece:
            raise ConnectionError(f"closed after {data!r}")
        data += piece
    head, _, rest = data.partition(b"\r\n\r\n")
    first, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    size = int(headers.get("content-length", "0"))
    while len(rest) < size:
        rest += sock.recv(65536)
    return first, headers, rest


def closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize(("request_bytes", "seen", "answer"), [
    pytest.param(b"POST /in?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
                 ("POST", "/in?x=1", b"hello"), b"got hello", id="by-length"),
    pytest.param(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: t\r\n\r\n",
                 ("POST", "/", b"abcde"), b"got abcde", id="chunked-with-extension-and-trailer"),
    pytest.param(b"GET /health HTTP/1.1\r\nHost: h\r\n\r\n", ("GET", "/health", b""), b"got ",
                 id="no-body"),
    pytest.param(b"\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", ("GET", "/", b""), b"got ",
                 id="a-stray-empty-line-first"),
])
def test_a_request_reaches_the_handler_and_its_answer_the_client(
        request_bytes: bytes, seen: tuple[str, str, bytes], answer: bytes) -> None:
    found: Seen = []
    with serving(echo(found)) as (port, _), connect(port) as sock:
        sock.sendall(request_bytes)
        first, headers, body = read_answer(sock)
    assert (first, body) == ("HTTP/1.1 200 OK", answer)
    assert headers["content-length"] == str(len(answer))
    assert "date" in headers
    assert found == [seen]


def test_a_head_request_gets_the_length_but_no_body() -> None:
    with serving(echo([])) as (port, _), connect(port) as sock:
        sock.sendall(b"HEAD / HTTP/1.1\r\nHost: h\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data:  # the HEAD answer, a byte at a time
            data += sock.recv(1)
        assert data.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"Content-Length: 4\r\n" in data
        assert read_answer(sock)[2] == b"got "  # the GET's answer follows: no body between


def test_expect_100_continue_is_answered_before_the_body_is_sent() -> None:
    found: Seen = []
    with serving(echo(found)) as (port, _), connect(port) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n"
                     b"Content-Length: 2\r\n\r\n")
        assert sock.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b"{}")
        assert read_answer(sock)[2] == b"got {}"


@pytest.mark.parametrize(("extra", "version", "kept"), [
    pytest.param("", "HTTP/1.1", True, id="http-1.1-keeps-alive"),
    pytest.param("Connection: close\r\n", "HTTP/1.1", False, id="connection-close"),
    pytest.param("", "HTTP/1.0", False, id="http-1.0-closes"),
    pytest.param("Connection: keep-alive\r\n", "HTTP/1.0", True, id="http-1.0-keep-alive"),
])
def test_keep_alive_follows_the_request(extra: str, version: str, kept: bool) -> None:
    found: Seen = []
    with serving(echo(found)) as (port, _), connect(port) as sock:
        for n in range(3 if kept else 1):
            sock.sendall(f"POST / {version}\r\nHost: h\r\n{extra}Content-Length: 1\r\n\r\n{n}"
                         .encode())
            _, headers, body = read_answer(sock)
            assert body == f"got {n}".encode()
            assert ("connection" in headers) is not kept
        if not kept:
            assert closed(sock)
    assert len(found) == (3 if kept else 1)


@pytest.mark.parametrize(("request_bytes", "status", "limits"), [
    pytest.param(b"GARBAGE\r\n\r\n", 400, Limits(), id="not-a-request-line"),
    pytest.param(b"GET / HTTP/2.0\r\n\r\n", 400, Limits(), id="unsupported-protocol"),
    pytest.param(b"GET / HTTP/1.1\r\nno colon\r\n\r\n", 400, Limits(), id="bad-header-line"),
    pytest.param(b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n", 400, Limits(),
                 id="content-length-not-a-number"),
    pytest.param(b"POST / HTTP/1.1\r\nContent-Length: \xc2\xb2\r\n\r\n", 400, Limits(),
                 id="content-length-a-unicode-digit"),
    pytest.param(b"GET / HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n", 431, Limits(),
                 id="head-too-large"),
    pytest.param(b"POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n", 413, Limits(max_body=10),
                 id="length-over-the-limit-unread"),
    pytest.param(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nb\r\nhello world\r\n",
                 413, Limits(max_body=10), id="chunked-over-the-limit"),
    pytest.param(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, Limits(),
                 id="bad-chunk-size"),
])
def test_what_the_server_refuses_gets_a_problem_and_the_connection_closes(
        request_bytes: bytes, status: int, limits: Limits) -> None:
    found: Seen = []
    with serving(echo(found), limits=limits) as (port, _), connect(port) as sock:
        sock.sendall(request_bytes)
        first, headers, body = read_answer(sock)
        assert first.startswith(f"HTTP/1.1 {status} ")
        assert headers["content-type"] == "application/problem+json"
        assert headers["connection"] == "close"
        assert json.loads(body)["status"] == status
        assert closed(sock)
    assert found == []


@pytest.mark.parametrize(("sent", "read", "kept"), [
    pytest.param(b"0123456789", 10, True, id="read-whole"),
    pytest.param(b"0123", 4, False, id="the-rest-not-sent"),
    pytest.param(b"0123456789", 0, False, id="not-read"),
])
def test_a_streamed_body_left_unread_closes_the_connection_after_the_answer(
        sent: bytes, read: int, kept: bool) -> None:
    """A handler may refuse a body by its stated length without reading it (the functions'
    413): the rest may be large or never come, so the connection is not used again."""
    def handle(request: Request) -> Reply:
        return 202, [], request.stream.read(read)

    with serving(handle, limits=Limits(max_body=None)) as (port, _), connect(port) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n" + sent)
        _, headers, body = read_answer(sock)
        assert body == sent[:read]
        assert ("connection" in headers) is not kept
        if not kept:
            assert closed(sock)


def test_a_streamed_chunked_body_is_read_to_its_end_and_the_connection_kept() -> None:
    def handle(request: Request) -> Reply:
        return 202, [], request.stream.read(100)  # the functions' read when no length is given

    with serving(handle, limits=Limits(max_body=None)) as (port, _), connect(port) as sock:
        for _ in range(2):
            sock.sendall(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
            _, headers, body = read_answer(sock)
            assert (body, "connection" in headers) == (b"abcde", False)


def test_a_handler_error_is_a_503_with_retry_after_never_a_500() -> None:
    def handle(request: Request) -> Reply:
        raise RuntimeError("boom")

    with serving(handle) as (port, _), connect(port) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        first, headers, body = read_answer(sock)
    assert first == "HTTP/1.1 503 Service Unavailable"
    assert headers["retry-after"] == "30"
    assert json.loads(body)["detail"] == "internal error"


def test_at_most_concurrency_requests_are_handled_at_once() -> None:
    inside = 0
    most = 0
    lock = threading.Lock()

    def handle(request: Request) -> Reply:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        time.sleep(0.1)
        with lock:
            inside -= 1
        return 202, [], b""

    with serving(handle, concurrency=2) as (port, server):
        sockets = [connect(port) for _ in range(6)]
        for sock in sockets:
            sock.sendall(b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        assert all(read_answer(sock)[0] == "HTTP/1.1 202 Accepted" for sock in sockets)
        for sock in sockets:
            sock.close()
        assert server.requests == 6
    assert most == 2


def test_a_connection_over_the_limit_is_refused_with_retry_after() -> None:
    with serving(echo([]), limits=Limits(max_connections=1)) as (port, server), \
            connect(port) as first:
        wait_for(lambda: server.open_connections() == 1, 5, 0.01, "the first connection")
        with connect(port) as second:
            status, headers, _ = read_answer(second)
            assert (status, headers["retry-after"]) == ("HTTP/1.1 503 Service Unavailable", "1")
        first.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert read_answer(first)[0] == "HTTP/1.1 200 OK"


def test_no_keep_alive_time_closes_every_connection_after_its_answer() -> None:
    with serving(echo([]), limits=Limits(idle_seconds=0)) as (port, _), connect(port) as sock:
        time.sleep(0.2)  # the first request may come later than that
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert read_answer(sock)[1]["connection"] == "close"
        assert closed(sock)


def test_an_idle_connection_is_closed_after_its_keep_alive_time() -> None:
    with serving(echo([]), limits=Limits(idle_seconds=0.2)) as (port, server), \
            connect(port) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        read_answer(sock)
        started = time.monotonic()
        assert closed(sock)
        assert time.monotonic() - started < 3
        wait_for(lambda: server.open_connections() == 0, 5, 0.01, "the connection to go")


def test_a_stop_answers_the_request_in_flight_and_closes_idle_connections() -> None:
    entered, release = threading.Event(), threading.Event()

    def handle(request: Request) -> Reply:
        entered.set()
        release.wait(5)
        return 202, [], b""

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = HttpServer([listener], handle, name="test-httpd")
    thread = threading.Thread(target=server.serve, kwargs={"tick_seconds": 0.05}, daemon=True)
    thread.start()
    with connect(port) as busy, connect(port) as idle:
        wait_for(lambda: server.open_connections() == 2, 5, 0.01, "two connections")
        busy.sendall(b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        assert entered.wait(5)
        server.stop()
        thread.join(5)
        drained: list[bool] = []
        drainer = threading.Thread(target=lambda: drained.append(server.drain(5)))
        drainer.start()
        assert closed(idle)
        release.set()
        status, headers, _ = read_answer(busy)
        assert (status, headers["connection"]) == ("HTTP/1.1 202 Accepted", "close")
        drainer.join(10)
    assert drained == [True]


@pytest.mark.parametrize(("pieces", "length", "reads", "finished"), [
    pytest.param([b"abc", b"def"], 6, [2, 2, 2, 5], True, id="sized-reads"),
    pytest.param([b"abc", b"def"], 6, [-1], True, id="read-all"),
    pytest.param([b"abcdef"], 6, [3], True, id="ended-by-length-without-another-read"),
    pytest.param([b"abc", b"def"], 6, [3], False, id="not-all-arrived"),
    pytest.param([b"abc", b"def"], 6, [2], False, id="left-unread"),
    pytest.param([b"ab", b"c"], None, [3], False, id="chunked-not-yet-at-its-end"),
    pytest.param([b"ab", b"c"], None, [4], True, id="chunked-read-to-its-end"),
])
def test_body_stream(pieces: list[bytes], length: int | None, reads: list[int],
                     finished: bool) -> None:
    stream = BodyStream(iter(pieces), length)
    data = b"".join(stream.read(n) for n in reads)
    assert data == b"".join(pieces)[:sum(n for n in reads) if -1 not in reads else None]
    assert stream.finished() is finished


def test_body_stream_lines() -> None:
    stream = BodyStream(iter([b"a\nb", b"c\n", b"d"]), None)
    assert list(stream) == [b"a\n", b"bc\n", b"d"]
    assert BodyStream(iter([b"abc\n"]), 4).readline(2) == b"ab"
