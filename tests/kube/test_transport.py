"""The API server transport against scripted local servers: keep-alive reuse, idle
connections the server closed, framing, streamed bodies, and the hostile answers of
``tests/kube/hostile.py`` (each an error within the deadline, nothing left for the next
request). TLS with the cluster's CA and client certificates is exercised by every cluster
test (all of them talk to the API server through this transport)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import pytest

from functions.kube.config import ClusterConfig
from functions.kube.transport import HttpTransport, Request, TransportError
from tests.kube.hostile import (
    CASES,
    CHUNKED,
    LIMIT,
    SLACK,
    Hostile,
    Script,
    elapsed_since,
    forever,
    hostile,
    sends,
)

DEADLINE = 0.5


def ok(body: bytes = b'{"kind":"Status"}', *, extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body)


@contextmanager
def serving(script: Script, **options: int) -> Iterator[tuple[Hostile, HttpTransport]]:
    with hostile(script) as server:
        transport = HttpTransport(ClusterConfig(server=server.url + "/prefix", token="sekret"),
                                  **options)
        try:
            yield server, transport
        finally:
            transport.close()


def test_requests_share_one_keep_alive_connection_and_carry_the_token_and_prefix() -> None:
    with serving(sends(ok(), keep=True)) as (server, transport):
        for _ in range(3):
            response = transport.send(Request("GET", "/api/v1/pods", {"limit": "1"}), 5)
            assert response.status == 200
            assert response.body == b'{"kind":"Status"}'
        assert server.connections == 1
        assert server.heads[0].startswith(b"GET /prefix/api/v1/pods?limit=1 HTTP/1.1")
        assert b"Authorization: Bearer sekret" in server.heads[0]


def test_a_write_states_its_body_and_its_type() -> None:
    with serving(sends(ok(), keep=True)) as (server, transport):
        transport.send(Request("PATCH", "/x", body=b"{}",
                               content_type="application/merge-patch+json"), 5)
        transport.send(Request("POST", "/x"), 5)
    assert b"Content-Type: application/merge-patch+json" in server.heads[0]
    assert b"Content-Length: 2" in server.heads[0]
    assert b"Content-Length: 0" in server.heads[1]


@pytest.mark.parametrize("answer", [
    pytest.param(sends(ok()), id="closed-after-each-answer"),
    pytest.param(sends(ok(extra=b"Connection: close\r\n"), keep=True), id="connection-close"),
    pytest.param(sends(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", keep=True),
                 id="http-1.0"),
])
def test_a_connection_the_server_ends_is_not_used_again(answer: Script) -> None:
    with serving(answer) as (server, transport):
        for _ in range(3):
            assert transport.send(Request("GET", "/x"), 5).status == 200
            time.sleep(0.01)  # the server's close reaches the client before the next request
        assert server.connections == 3


def test_a_chunked_answer_is_decoded_with_its_status_and_headers() -> None:
    chunked = (b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
    with serving(sends(chunked, keep=True)) as (_, transport):
        response = transport.send(Request("POST", "/x", body=b"{}",
                                          content_type="application/json"), 5)
    assert (response.status, response.body) == (429, b"hello world")
    assert response.headers["retry-after"] == "3"


def test_a_redirect_is_an_answer_not_followed() -> None:
    moved = b"HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n"
    with serving(sends(moved, keep=True)) as (server, transport):
        assert transport.send(Request("GET", "/x"), 5).status == 302
    assert len(server.heads) == 1


def test_a_503_with_retry_after_is_an_answer_not_retried() -> None:
    busy = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n"
    with serving(sends(busy, keep=True)) as (server, transport):
        started = time.monotonic()
        assert transport.send(Request("GET", "/x"), 5).status == 503
        assert elapsed_since(started) < 1
    assert len(server.heads) == 1


@pytest.mark.parametrize("script", CASES)
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_hostile_answer_is_a_transport_error_within_the_deadline(script: Script,
                                                                   method: str) -> None:
    """Then the next request gets its own answer: nothing of the hostile one is left on a
    pooled connection."""
    with serving(script, max_body=LIMIT) as (server, transport):
        started = time.monotonic()
        with pytest.raises(TransportError):
            transport.send(Request(method, "/x"), DEADLINE)
        assert elapsed_since(started) < DEADLINE + SLACK
        server.hostile = False
        response = transport.send(Request("GET", "/x"), 5)
        assert (response.status, response.body) == (200, b"fine")


def test_a_request_past_its_deadline_says_so() -> None:
    with serving(forever(b"", b"HTTP/1.1 100 Continue\r\n\r\n")) as (_, transport), \
            pytest.raises(TransportError, match=r"no whole answer within 0.5 s"):
        transport.send(Request("GET", "/x"), DEADLINE)


@pytest.mark.parametrize("pause", [
    pytest.param(0, id="in-the-same-write"),
    pytest.param(0.05, id="after-the-answer"),
])
def test_a_second_answer_to_one_request_never_answers_the_next(pause: float) -> None:
    """A server that answers its first request twice: the second answer waits on the kept
    connection (or in what the client read ahead with the first), and no later request may
    take it for its own. (One that arrives after the client has sent its next request cannot
    be told from the answer to it: no HTTP/1.1 client can see that.)"""
    def twice(conn: socket.socket, server: Hostile) -> bool:
        number = len(server.heads)
        conn.sendall(ok(b"answer %d" % number))
        if number == 1:
            time.sleep(pause)
            conn.sendall(ok(b"stale"))
        return True

    with serving(twice) as (server, transport):
        assert transport.send(Request("GET", "/x"), 5).body == b"answer 1"
        time.sleep(0.1)  # the stale answer has arrived
        for number, method in enumerate(("GET", "POST", "GET"), start=2):
            assert transport.send(Request(method, "/x"), 5).body == b"answer %d" % number
        assert len(server.heads) == 4


def test_a_server_that_does_not_answer_in_time_is_a_transport_error() -> None:
    release = threading.Event()

    def slow(conn: socket.socket, _: Hostile) -> bool:
        release.wait(5)
        conn.sendall(ok())
        return True

    with serving(slow) as (_, transport):
        with pytest.raises(TransportError):
            transport.send(Request("GET", "/x"), 0.2)
        release.set()


def test_nothing_listening_is_a_transport_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    transport = HttpTransport(ClusterConfig(server=f"http://127.0.0.1:{port}"))
    with pytest.raises(TransportError):
        transport.send(Request("GET", "/x"), 2)


def test_an_address_that_is_not_http_is_refused() -> None:
    with pytest.raises(ValueError, match="unsupported"):
        HttpTransport(ClusterConfig(server="unix:///run/api.sock"))


def test_a_tls_handshake_sent_a_byte_at_a_time_ends_at_the_deadline() -> None:
    """A TLS record announced whole and sent a byte at a time, each within the read
    timeout: only a deadline on the whole request ends the handshake."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def drip() -> None:
        conn, _ = listener.accept()
        with conn, suppress(OSError):
            conn.recv(65536)  # the client's hello
            conn.sendall(b"\x16\x03\x03\x40\x00")  # a handshake record of 16 KiB
            while not stop.wait(0.01):
                conn.sendall(b"\x00")

    threading.Thread(target=drip, daemon=True).start()
    transport = HttpTransport(ClusterConfig(
        server=f"https://127.0.0.1:{listener.getsockname()[1]}", insecure=True))
    try:
        started = time.monotonic()
        with pytest.raises(TransportError):
            transport.send(Request("GET", "/x"), DEADLINE)
        assert elapsed_since(started) < DEADLINE + SLACK
    finally:
        stop.set()
        listener.close()


# -- streamed bodies --------------------------------------------------------------------------

def watch_answer(*events: bytes) -> bytes:
    return CHUNKED + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


def test_a_streamed_body_comes_one_chunk_at_a_time_and_its_connection_is_kept() -> None:
    events = (b'{"type":"ADDED"}\n', b'{"type":"MODIFIED"}\n')

    def answer(conn: socket.socket, server: Hostile) -> bool:
        conn.sendall(watch_answer(*events) if b"watch=true" in server.heads[-1] else ok())
        return True

    with serving(answer) as (server, transport):
        status, _, raw = transport.stream(Request("GET", "/x", {"watch": "true"}), 5)
        assert status == 200
        assert list(raw.stream(65536)) == list(events)
        raw.release_conn()
        assert transport.send(Request("GET", "/x"), 5).status == 200
        assert server.connections == 1


def test_a_stream_left_unread_closes_its_connection() -> None:
    events = (b"one\n", b"two\n")
    with serving(sends(watch_answer(*events), keep=True)) as (server, transport):
        _, _, raw = transport.stream(Request("GET", "/x"), 5)
        assert next(iter(raw.stream(65536))) == b"one\n"
        raw.release_conn()
        server.hostile = False
        assert transport.send(Request("GET", "/x"), 5).body == b"fine"
        assert server.connections == 2


def test_a_streamed_piece_is_at_most_the_amount_asked() -> None:
    big = bytes(range(256)) * 1200
    with serving(sends(watch_answer(big), keep=True)) as (_, transport):
        _, _, raw = transport.stream(Request("GET", "/x"), 5)
        pieces = list(raw.stream(65536))
        raw.release_conn()
    assert max(len(p) for p in pieces) <= 65536
    assert b"".join(pieces) == big


@pytest.mark.parametrize("script", [
    pytest.param(forever(CHUNKED + b"5\r\nhello\r\n0\r\n", b"X-Trailer: more\r\n"),
                 id="endless-trailers"),
    pytest.param(forever(CHUNKED + b"5\r\nhello\r\n", b"1"), id="endless-chunk-size-line"),
    pytest.param(forever(CHUNKED + b"5\r\nhello\r\n", b"", pace=0.05), id="silent-after-one"),
])
def test_each_streamed_piece_has_the_deadline(script: Script) -> None:
    with serving(script) as (_, transport):
        _, _, raw = transport.stream(Request("GET", "/x"), DEADLINE)
        pieces = raw.stream(65536)
        assert next(pieces) == b"hello"
        started = time.monotonic()
        with pytest.raises(TransportError):
            next(pieces)
        assert elapsed_since(started) < DEADLINE + SLACK
        raw.release_conn()


def test_a_streamed_body_cut_short_is_a_transport_error() -> None:
    cut = CHUNKED + b"5\r\nhello\r\n"
    with serving(sends(cut)) as (_, transport):
        _, _, raw = transport.stream(Request("GET", "/x"), 5)
        pieces = raw.stream(65536)
        assert next(pieces) == b"hello"
        with pytest.raises(TransportError):
            list(pieces)
        raw.release_conn()


def test_a_stream_whose_head_never_ends_is_a_transport_error() -> None:
    with serving(forever(b"", b"HTTP/1.1 100 Continue\r\n\r\n")) as (_, transport):
        started = time.monotonic()
        with pytest.raises(TransportError):
            transport.stream(Request("GET", "/x"), DEADLINE)
        assert elapsed_since(started) < DEADLINE + SLACK


# -- a pooled connection closed before answering ----------------------------------------------

@pytest.mark.parametrize(("method", "sent_again"), [
    pytest.param("GET", True, id="a-read-is-sent-again"),
    pytest.param("POST", False, id="a-write-is-left-to-the-caller"),
])
def test_a_reused_connection_closed_before_answering(method: str, sent_again: bool) -> None:
    """The second request's connection closes without an answer (as an idle connection
    the server dropped just as it was taken)."""
    def answer(conn: socket.socket, server: Hostile) -> bool:
        if len(server.heads) == 2:
            return False
        conn.sendall(ok())
        return True

    with serving(answer) as (server, transport):
        assert transport.send(Request(method, "/x"), 5).status == 200
        if sent_again:
            assert transport.send(Request(method, "/x"), 5).status == 200
        else:
            with pytest.raises(TransportError):
                transport.send(Request(method, "/x"), 5)
        assert len(server.heads) == (3 if sent_again else 2)


def test_a_streamed_body_read_whole_has_the_size_limit() -> None:
    """An error's body read whole from a stream (a watch refused) stops at the limit."""
    endless = forever(CHUNKED, b"10000\r\n" + b"x" * (1 << 16) + b"\r\n", pace=0)
    with serving(endless, max_body=LIMIT) as (_, transport):
        _, _, raw = transport.stream(Request("GET", "/x"), 5)
        with pytest.raises(TransportError, match="over the limit"):
            raw.read()
        raw.release_conn()
