"""The API server transport against a scripted local HTTP server: keep-alive reuse, idle
connections the server closed, framing, errors. TLS and client certificates are exercised by
every cluster test (all of them talk to the API server through this transport)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import pytest

from functions.kube.config import ClusterConfig
from functions.kube.transport import HttpTransport, Request, TransportError

Answer = Callable[[bytes], bytes | None]


class Server:
    """Accepts connections on 127.0.0.1 and answers each request head with ``answer(head)``
    (``None``: close the connection without answering). Counts connections and requests."""

    def __init__(self, answer: Answer, *, close_after: int | None = None) -> None:
        self.answer = answer
        self.close_after = close_after
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
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
        served = 0
        with conn:
            data = b""
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, data = data.split(b"\r\n\r\n", 1)
                length = _content_length(head)
                while len(data) < length:
                    data += conn.recv(65536)
                data = data[length:]
                self.heads.append(head)
                answer = self.answer(head)
                if answer is None:
                    return
                conn.sendall(answer)
                served += 1
                if self.close_after is not None and served >= self.close_after:
                    return

    def close(self) -> None:
        # closing alone does not wake an accept() blocked in another thread; a shutdown does
        with suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def ok(body: bytes = b'{"kind":"Status"}', *, extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body)


@contextmanager
def serving(answer: Answer, **kwargs: int) -> Iterator[tuple[Server, HttpTransport]]:
    server = Server(answer, **kwargs)
    transport = HttpTransport(ClusterConfig(server=f"http://127.0.0.1:{server.port}/prefix",
                                            token="sekret"))
    try:
        yield server, transport
    finally:
        transport.close()
        server.close()


def test_requests_share_one_keep_alive_connection_and_carry_the_token_and_prefix() -> None:
    with serving(lambda _: ok()) as (server, transport):
        for _ in range(3):
            response = transport.send(Request("GET", "/api/v1/pods", {"limit": "1"}), 5)
            assert response.status == 200
            assert response.body == b'{"kind":"Status"}'
        assert server.connections == 1
        assert server.heads[0].startswith(b"GET /prefix/api/v1/pods?limit=1 HTTP/1.1")
        assert b"Authorization: Bearer sekret" in server.heads[0]


def test_a_connection_the_server_closed_while_idle_is_not_used_again() -> None:
    with serving(lambda _: ok(), close_after=1) as (server, transport):
        for _ in range(3):
            assert transport.send(Request("GET", "/x"), 5).status == 200
        assert server.connections == 3


def test_connection_close_answers_are_not_kept() -> None:
    with serving(lambda _: ok(extra=b"Connection: close\r\n")) as (server, transport):
        for _ in range(2):
            assert transport.send(Request("GET", "/x"), 5).status == 200
        assert server.connections == 2


def test_a_chunked_answer_is_decoded_with_its_status_and_headers() -> None:
    chunked = (b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
    with serving(lambda _: chunked) as (_, transport):
        response = transport.send(Request("POST", "/x", body=b"{}",
                                          content_type="application/json"), 5)
    assert (response.status, response.body) == (429, b"hello world")
    assert response.headers["Retry-After"] == "3"


@pytest.mark.parametrize("answer", [
    pytest.param(lambda _: None, id="closed-without-answering"),
    pytest.param(lambda _: b"garbage\r\n\r\n", id="not-http"),
])
def test_a_request_without_an_answer_is_a_transport_error(answer: Answer) -> None:
    with serving(answer) as (_, transport), pytest.raises(TransportError):
        transport.send(Request("GET", "/x"), 5)


def test_a_server_that_does_not_answer_in_time_is_a_transport_error() -> None:
    release = threading.Event()

    def slow(_: bytes) -> bytes:
        release.wait(5)
        return ok()

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


def test_a_streamed_body_comes_one_chunk_at_a_time_on_a_connection_of_its_own() -> None:
    events = (b'{"type":"ADDED"}\n', b'{"type":"MODIFIED"}\n')
    body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    watch = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body
    with serving(lambda head: watch if b"watch=true" in head else ok()) as (server, transport):
        assert transport.send(Request("GET", "/x"), 5).status == 200
        status, _, raw = transport.stream(Request("GET", "/x", {"watch": "true"}), 5)
        assert status == 200
        assert list(raw.stream(65536)) == list(events)
        raw.release_conn()
        assert transport.send(Request("GET", "/x"), 5).status == 200
        assert server.connections == 2


def test_a_streamed_body_cut_short_is_a_transport_error() -> None:
    cut = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"

    with serving(lambda _: cut, close_after=1) as (_, transport):
        _, _, raw = transport.stream(Request("GET", "/x"), 5)
        pieces = raw.stream(65536)
        assert next(pieces) == b"hello"
        with pytest.raises(TransportError):
            list(pieces)
        raw.release_conn()


@pytest.mark.parametrize(("method", "sent_again"), [
    pytest.param("GET", True, id="a-read-is-sent-again"),
    pytest.param("POST", False, id="a-write-is-left-to-the-caller"),
])
def test_a_reused_connection_closed_before_answering(method: str, sent_again: bool) -> None:
    """The second request's connection closes without an answer (as an idle connection
    the server dropped just as it was taken)."""
    def answer(_: bytes) -> bytes | None:
        return None if len(server.heads) == 2 else ok()

    with serving(answer) as (server, transport):
        assert transport.send(Request(method, "/x"), 5).status == 200
        if sent_again:
            assert transport.send(Request(method, "/x"), 5).status == 200
        else:
            with pytest.raises(TransportError):
                transport.send(Request(method, "/x"), 5)
        assert len(server.heads) == (3 if sent_again else 2)
