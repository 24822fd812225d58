"""The blocking HTTP/1.1 connection against scripted answers: framing, interim answers, what
keeps a connection, and answers cut short or not HTTP (the transport's own behaviour, reuse
and retries, is in ``test_transport.py``)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import pytest

from functions.core.http1 import BadMessage
from functions.kube.wire import ClosedBeforeAnswer, Connection, IncompleteMessage


@contextmanager
def answering(*answers: bytes) -> Iterator[tuple[Connection, list[bytes]]]:
    """A connection to a server that reads each request (head and body) and sends the next
    scripted answer, then closes; yields the connection and the requests the server read."""
    listener = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            for answer in answers:
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, data = data.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(data) < length:
                    data += conn.recv(65536)
                received.append(head + b"\r\n\r\n" + data[:length])
                data = data[length:]
                conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    connection = Connection("127.0.0.1", listener.getsockname()[1], timeout=5)
    try:
        yield connection, received
    finally:
        connection.close()
        with suppress(OSError):
            listener.close()
        thread.join(5)


@pytest.mark.parametrize(("method", "answer", "status", "body", "keep_alive"), [
    pytest.param("GET", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 200, b"hello",
                 True, id="length"),
    pytest.param("GET", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"3\r\nhel\r\n2;ext=1\r\nlo\r\n0\r\nX-Trailer: t\r\n\r\n", 200, b"hello", True,
                 id="chunked-with-extension-and-trailer"),
    pytest.param("GET", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\n"
                 b"Content-Length: 2\r\n\r\nok", 201, b"ok", True, id="interim-answer-skipped"),
    pytest.param("HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", 200, b"", True,
                 id="head-has-no-body"),
    pytest.param("DELETE", b"HTTP/1.1 204 No Content\r\n\r\n", 204, b"", True, id="no-content"),
    pytest.param("GET", b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
                 200, b"ok", False, id="connection-close"),
    pytest.param("GET", b"HTTP/1.0 200 OK\r\n\r\nuntil the end", 200, b"until the end", False,
                 id="body-until-close"),
])
def test_an_answer_is_read_to_its_end(method: str, answer: bytes, status: int, body: bytes,
                                      keep_alive: bool) -> None:
    with answering(answer) as (connection, _):
        got = connection.request(method, "/x", {})
    assert (got.status, got.body, got.keep_alive) == (status, body, keep_alive)


def test_the_request_names_its_host_and_states_its_body_length() -> None:
    with answering(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
                   b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") as (connection, received):
        connection.request("PATCH", "/a?b=c", {"Content-Type": "application/json"}, b"{}")
        connection.request("POST", "/empty", {})
        port = connection.sock.getpeername()[1]
    assert received[0] == (f"PATCH /a?b=c HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                           "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}").encode()
    assert b"Content-Length: 0\r\n" in received[1]


def test_one_connection_carries_requests_in_turn() -> None:
    with answering(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na",
                   b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nb\r\n0\r\n\r\n",
                   b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nc") as (connection, _):
        bodies = [connection.request("GET", f"/{n}", {}).body for n in range(3)]
    assert bodies == [b"a", b"b", b"c"]


@pytest.mark.parametrize(("answer", "error"), [
    pytest.param(b"", ClosedBeforeAnswer, id="closed-before-answering"),
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Le", IncompleteMessage, id="head-cut-short"),
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", IncompleteMessage,
                 id="body-cut-short"),
    pytest.param(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nabc",
                 IncompleteMessage, id="chunk-cut-short"),
    pytest.param(b"SSH-2.0-OpenSSH\r\n\r\n", BadMessage, id="not-http"),
    pytest.param(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", BadMessage,
                 id="bad-chunk-size"),
])
def test_an_answer_that_is_not_whole_or_not_http_raises(answer: bytes,
                                                         error: type[Exception]) -> None:
    with answering(answer) as (connection, _), pytest.raises(error):
        connection.request("GET", "/", {})


def test_a_closed_connection_before_answering_is_a_connection_reset() -> None:
    """The transport sends a read again on a new connection when a reused one raises a
    ``ConnectionResetError`` before any answer: this is that error."""
    assert issubclass(ClosedBeforeAnswer, ConnectionResetError)


def test_a_streamed_chunked_body_comes_one_chunk_at_a_time() -> None:
    with answering(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"7\r\n{\"a\":1}\r\n7\r\n{\"b\":2}\r\n0\r\n\r\n") as (connection, _):
        status, _, framing = connection.open_stream("GET", "/watch", {})
        pieces = list(connection.stream(framing, 65536))
    assert (status, pieces) == (200, [b'{"a":1}', b'{"b":2}'])


def test_an_idle_connection_the_server_closed_is_dropped() -> None:
    with answering(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") as (connection, _):
        connection.request("GET", "/", {})
        # the scripted server closes the connection after its last answer
        deadline = time.monotonic() + 5
        while not connection.dropped() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert connection.dropped()


def test_an_idle_connection_the_server_keeps_is_not_dropped() -> None:
    with answering(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
                   b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") as (connection, _):
        connection.request("GET", "/", {})
        assert not connection.dropped()
        connection.request("GET", "/", {})
