"""The POST server (waitress): what the callable answers is what the client gets, and the
hostile framings that apply to a POST-only server, over raw sockets."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator, Mapping
from urllib.parse import urlsplit

import pytest

from devstack.post_server import MAX_BODY_BYTES, MAX_HEAD_BYTES, PostServer
from tests.runtime.rawhttp import (
    RawConnection,
    chunked,
    exchange,
    length,
    post,
    stream_until_closed,
)


def _post(url: str, body: bytes, path: str) -> tuple[int, str | None, bytes]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.request("POST", path, body=body, headers={"Ce-Id": "1"})
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type"), response.read()
    finally:
        connection.close()


@pytest.mark.parametrize(("answer", "content_type", "payload"), [
    pytest.param((202, ""), None, b"", id="accepted-empty"),
    pytest.param((400, "not a CloudEvent"), "application/problem+json",
                 json.dumps({"type": "about:blank", "title": "Bad Request", "status": 400,
                             "detail": "not a CloudEvent"}).encode(),
                 id="problem"),
])
def test_answers_with_the_handlers_status_and_detail(
        answer: tuple[int, str], content_type: str | None, payload: bytes) -> None:
    seen: list[tuple[str, bytes, str]] = []

    def handle(headers: Mapping[str, str], body: bytes, path: str) -> tuple[int, str]:
        seen.append((headers["Ce-Id"], body, path))
        return answer

    server = PostServer(handle, "test-post")
    server.start()
    try:
        assert _post(server.url, b"event", "/in") == (answer[0], content_type, payload)
    finally:
        server.stop()
    assert seen == [("1", b"event", "/in")]


# -- hostile framings -------------------------------------------------------------------------

IDLE_SECONDS = 1.0
received: list[bytes] = []


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    def handle(headers: Mapping[str, str], body: bytes, path: str) -> tuple[int, str]:
        received.append(body)
        return 202, ""

    server = PostServer(handle, "test-post", idle_seconds=IDLE_SECONDS)
    server.start()
    try:
        yield int(urlsplit(server.url).port or 0)
    finally:
        server.stop()


ACCEPTED = (post(b"Content-Length: 2\r\n", b"{}"), "POST", 202)
OK = (202, False)
BAD = (400, True)
UNANSWERED = (None, True)

CASES = [
    pytest.param(chunked(b"3\r\nabc\r\n0\r\n\r\n"), OK, id="chunked-valid"),
    pytest.param(chunked(b"-1\r\nabc\r\n0\r\n\r\n"), BAD, id="chunk-size-negative"),
    pytest.param(chunked(b"-0\r\n\r\n"), BAD, id="chunk-size-minus-zero"),
    pytest.param(chunked(b"0x3\r\nabc\r\n0\r\n\r\n"), BAD, id="chunk-size-0x-prefix"),
    pytest.param(chunked(b"+3\r\nabc\r\n0\r\n\r\n"), BAD, id="chunk-size-plus"),
    pytest.param(chunked(b"1_1\r\n" + b"a" * 17 + b"\r\n0\r\n\r\n"), BAD,
                 id="chunk-size-underscore"),
    pytest.param(chunked(b" 3 \r\nabc\r\n0\r\n\r\n"), BAD, id="chunk-size-spaces"),
    pytest.param(chunked(b"3\r\nabcXX0\r\n\r\n"), BAD, id="chunk-data-not-followed-by-crlf"),
    pytest.param(chunked(b"3;name=value\r\nabc\r\n0\r\n\r\n"), OK, id="chunk-extensions"),
    pytest.param(chunked(b"3;a\rb\r\nabc\r\n0\r\n\r\n"), BAD, id="chunk-extension-bare-cr"),
    pytest.param(chunked(b"3\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n"), OK, id="trailer-valid"),
    # Waitress waits for the CRLF that ends the trailers, until the idle time closes it.
    pytest.param(chunked(b"3\r\nabc\r\n0\r\nX-Trailer: t\n\n"), UNANSWERED,
                 id="trailer-ending-in-bare-lf"),
    pytest.param(length(b"2"), OK, id="content-length-valid"),
    pytest.param(post(b"Content-Length: 2\r\nContent-Length: 3\r\n", b"{}}"), BAD,
                 id="cl-twice-conflicting"),
    pytest.param(length(b"abc"), BAD, id="cl-not-a-number"),
    pytest.param(length(b"-1"), BAD, id="cl-negative"),
    pytest.param(length(b"+2"), BAD, id="cl-plus"),
    pytest.param(length(b"\xb2"), BAD, id="cl-superscript-digit"),
    # Waitress's int() refuses it (Python's limit of 4300 digits): it logs the error and
    # closes the connection, unanswered.
    pytest.param(length(b"9" * 5000), UNANSWERED, id="cl-5000-digits"),
    pytest.param(length(b"9" * 4000), (413, True), id="cl-4000-digits"),
    pytest.param(length(str(MAX_BODY_BYTES + 1).encode(), b"{"), (413, True),
                 id="cl-over-the-limit"),
    pytest.param(post(b"Transfer-Encoding: gzip\r\n", b"{}"), (501, True), id="te-gzip-alone"),
    pytest.param(post(b"Transfer-Encoding: chunked, identity\r\n", b"0\r\n\r\n"), (501, True),
                 id="te-chunked-then-identity"),
    pytest.param(post(b"Transfer-Encoding: gzip, chunked\r\n", b"0\r\n\r\n"), (501, True),
                 id="te-gzip-then-chunked"),
    # RFC 9112 5.2: refused, or each fold replaced with a space, as waitress does.
    pytest.param(post(b"X-A: 1\r\n 2\r\nContent-Length: 2\r\n", b"{}"), OK,
                 id="obsolete-line-folding"),
    # Refused by the app, once waitress read the whole request: the connection is kept.
    pytest.param(b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", (400, False),
                 id="host-missing"),
    pytest.param(post(b"Host: u\r\nContent-Length: 2\r\n", b"{}"), (400, False),
                 id="host-twice"),
    pytest.param(post(b"X-A: a\x00b\r\nContent-Length: 2\r\n", b"{}"), BAD,
                 id="header-value-nul"),
    pytest.param(post(b"X-A: a\rb\r\nContent-Length: 2\r\n", b"{}"), BAD,
                 id="header-value-bare-cr"),
    pytest.param(post(b"X A: 1\r\nContent-Length: 2\r\n", b"{}"), BAD, id="header-name-space"),
    pytest.param(post(b"X-A : 1\r\nContent-Length: 2\r\n", b"{}"), BAD,
                 id="header-name-space-before-colon"),
    # The head never ends (waitress ends a head at CRLF CRLF alone): closed when idle.
    pytest.param(b"POST / HTTP/1.1\nHost: t\nContent-Length: 2\n\n{}", UNANSWERED,
                 id="bare-lf-head"),
    pytest.param(b"POST / HTTP/1.x\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}", BAD,
                 id="version-1.x"),
    pytest.param(post(b"X-A: " + b"a" * MAX_HEAD_BYTES + b"\r\nContent-Length: 2\r\n", b"{}"),
                 (431, True), id="head-over-limit"),
    pytest.param(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n", (405, False), id="not-a-post"),
]


@pytest.mark.parametrize(("request_bytes", "expected"), CASES)
def test_hostile_framing(port: int, request_bytes: bytes,
                         expected: tuple[int | None, bool]) -> None:
    answer, closed = exchange(port, request_bytes, probe=ACCEPTED)
    assert (answer and answer.status, closed) == expected, answer


@pytest.mark.parametrize("head", [
    pytest.param(b"Transfer-Encoding: chunked\r\n", id="chunked"),
    pytest.param(b"Content-Length: %d\r\n" % (MAX_BODY_BYTES + 1), id="stated-length"),
])
def test_a_body_over_the_limit_is_refused_as_it_arrives(port: int, head: bytes) -> None:
    piece = b"4000\r\n" + b"a" * 0x4000 + b"\r\n" if b"chunked" in head else b"a" * 16384
    count = len(received)
    sent, answer = stream_until_closed(port, post(head), piece, 64 * 1024 * 1024)
    assert answer is not None and answer.status == 413, answer
    assert sent < MAX_BODY_BYTES + 4 * 1024 * 1024, sent
    assert len(received) == count  # the handler never saw it


def test_an_idle_or_slow_connection_is_closed_after_its_idle_time(port: int) -> None:
    with RawConnection(port) as connection:
        connection.send(b"POST / HTTP/1.1\r\nHost: t\r\n")
        started = time.monotonic()
        assert connection.closed(IDLE_SECONDS + 5)
        assert time.monotonic() - started >= IDLE_SECONDS * 0.9


def test_an_idle_server_costs_no_cpu() -> None:
    """Its loop waits for the network, never spins (a poll timeout waitress rounds to whole
    seconds made 0.2 s a busy loop)."""
    server = PostServer(lambda headers, body, path: (202, ""), "idle")
    server.start()
    try:
        time.sleep(0.3)
        before = time.process_time()
        time.sleep(1.0)
        assert time.process_time() - before < 0.2
    finally:
        server.stop()
