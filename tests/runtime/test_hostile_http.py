"""Hostile HTTP/1.1 framings against the real served process (``python -m functions serve
dead-letters``, gunicorn with the functions' worker), over raw sockets.

The dead-letter sink accepts any body within its limit (202) and says 400 for a body it
could not read and 413 for one over its limit, so each answer tells how the server framed the
request. An answer that keeps the connection open is followed by a probe on the same
connection, which must be answered: the server read the request exactly where it ended (no
smuggled second request). Each expectation is RFC 9112's (section numbers in the ids' notes).
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Iterator

import pytest

from tests.runtime.rawhttp import (
    RawConnection,
    chunked,
    exchange,
    length,
    post,
    served,
    stream_until_closed,
)
from tests.support import http_status

LIMIT = 65536
HEAD_SECONDS = 1.5
BODY_SECONDS = 1.5
SLOT_SECONDS = 1.0
THREADS = 2
ENV = {**os.environ, "DEAD_LETTER_MAX_BYTES": str(LIMIT), "FUNCTIONS_DELIVERY_AUTH": "none",
       "FUNCTIONS_REQUEST_HEAD_SECONDS": str(HEAD_SECONDS),
       "FUNCTIONS_REQUEST_BODY_SECONDS": str(BODY_SECONDS),
       "FUNCTIONS_REQUEST_SLOT_SECONDS": str(SLOT_SECONDS)}


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with served("dead-letters", ENV, threads=THREADS) as port:
        yield port


OK = (202, False)
BAD = (400, True)

# (request, (status, closed)). ``closed``: the server must end the connection after its
# answer (400s for framing it cannot trust: RFC 9112 6.3, 7.1 and 11.2).
CASES = [
    # -- chunked (RFC 9112 7.1) ----------------------------------------------------------------
    pytest.param(chunked(b"3\r\nabc\r\n0\r\n\r\n"), OK, id="chunked-valid"),
    pytest.param(chunked(b"-1\r\nabc\r\n0\r\n\r\n"), BAD, id="chunk-size-negative"),
    pytest.param(chunked(b"-0\r\n\r\n"), BAD, id="chunk-size-minus-zero"),
    pytest.param(chunked(b"0x3\r\nabc\r\n0\r\n\r\n"), BAD, id="chunk-size-0x-prefix"),
    pytest.param(chunked(b"+3\r\nabc\r\n0\r\n\r\n"), BAD, id="chunk-size-plus"),
    pytest.param(chunked(b"1_1\r\n" + b"a" * 17 + b"\r\n0\r\n\r\n"), BAD,
                 id="chunk-size-underscore"),
    pytest.param(chunked(b" 3 \r\nabc\r\n0\r\n\r\n"), BAD, id="chunk-size-spaces"),
    pytest.param(chunked(b"g\r\nabc\r\n0\r\n\r\n"), BAD, id="chunk-size-not-hex"),
    pytest.param(chunked(b"\r\nabc\r\n0\r\n\r\n"), BAD, id="chunk-size-empty"),
    pytest.param(chunked(b"3\r\nabcXX0\r\n\r\n"), BAD, id="chunk-data-not-followed-by-crlf"),
    pytest.param(chunked(b"3\r\nabc\n0\r\n\r\n"), BAD, id="chunk-data-followed-by-bare-lf"),
    pytest.param(chunked(b"3\nabc\r\n0\r\n\r\n"), BAD, id="chunk-size-line-bare-lf"),
    pytest.param(chunked(b"3;name=value\r\nabc\r\n0;x\r\n\r\n"), OK, id="chunk-extensions"),
    pytest.param(chunked(b'3 ;q="a b"\r\nabc\r\n0\r\n\r\n'), OK,
                 id="chunk-extension-quoted-after-space"),
    pytest.param(chunked(b"3;=v\r\nabc\r\n0\r\n\r\n"), BAD, id="chunk-extension-no-name"),
    pytest.param(chunked(b"3;a\rb\r\nabc\r\n0\r\n\r\n"), BAD, id="chunk-extension-bare-cr"),
    pytest.param(chunked(b"1;a=" + b"b" * 100_000 + b"\r\na\r\n0\r\n\r\n"), BAD,
                 id="chunk-line-over-limit"),
    pytest.param(chunked(b"3\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n"), OK, id="trailer-valid"),
    pytest.param(chunked(b"3\r\nabc\r\n0\r\nX-Trailer: t\n\n"), BAD,
                 id="trailer-ending-in-bare-lf"),
    pytest.param(chunked(b"3\r\nabc\r\n0\r\n" + b"X-T: v\r\n" * 20000 + b"\r\n"), BAD,
                 id="trailer-section-unbounded"),
    pytest.param(chunked(b"3\r\nabc\r\n0\r\nContent-Length: 5\r\n\r\n"), BAD,
                 id="trailer-forbidden-field"),
    pytest.param(chunked(b"3\r\nabc\r\n0\r\nX-T: a\x00b\r\n\r\n"), BAD, id="trailer-nul"),
    # -- message body length (RFC 9112 6.1, 6.3) -------------------------------------------------
    pytest.param(length(b"2"), OK, id="content-length-valid"),
    pytest.param(post(b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n",
                      b"0\r\n\r\n"), BAD, id="te-and-cl"),
    pytest.param(post(b"Content-Length: 2\r\nContent-Length: 3\r\n", b"{}}"), BAD,
                 id="cl-twice-conflicting"),
    pytest.param(post(b"Content-Length: 2\r\nContent-Length: 2\r\n", b"{}"), BAD,
                 id="cl-twice-equal"),
    pytest.param(length(b"2, 2"), BAD, id="cl-list"),
    pytest.param(length(b"abc"), BAD, id="cl-not-a-number"),
    pytest.param(length(b"-1"), BAD, id="cl-negative"),
    pytest.param(length(b"+2"), BAD, id="cl-plus"),
    pytest.param(length(b"0x2"), BAD, id="cl-hex"),
    pytest.param(length(b"1_1"), BAD, id="cl-underscore"),
    pytest.param(length(b"\xb2"), BAD, id="cl-superscript-digit"),
    pytest.param(length(b"2 2"), BAD, id="cl-inner-space"),
    pytest.param(length(b"9" * 5000), BAD, id="cl-5000-digits"),
    pytest.param(length(b"9" * 4000), (413, True), id="cl-4000-digits-over-the-limit"),
    pytest.param(length(str(LIMIT + 1).encode(), b"{"), (413, True), id="cl-over-the-limit"),
    pytest.param(post(b"Transfer-Encoding: gzip\r\n", b"{}"), BAD, id="te-gzip-alone"),
    pytest.param(post(b"Transfer-Encoding: chunked, identity\r\n", b"0\r\n\r\n"), BAD,
                 id="te-chunked-then-identity"),
    pytest.param(post(b"Transfer-Encoding: chunked, chunked\r\n", b"0\r\n\r\n"), BAD,
                 id="te-chunked-twice"),
    pytest.param(post(b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                      b"0\r\n\r\n"), BAD, id="te-split-chunked-twice"),
    pytest.param(post(b"Transfer-Encoding: gzip, chunked\r\n", b"0\r\n\r\n"), (501, True),
                 id="te-gzip-then-chunked"),
    pytest.param(post(b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
                      b"0\r\n\r\n"), (501, True), id="te-split-gzip-then-chunked"),
    pytest.param(post(b"Transfer-Encoding: xchunked\r\n", b"0\r\n\r\n"), (501, True),
                 id="te-unknown"),
    pytest.param(post(b"Transfer-Encoding: chunked\r\n", b"0\r\n\r\n",
                      line=b"POST / HTTP/1.0"), BAD, id="te-on-http-1.0"),
    pytest.param(post(b"Transfer-Encoding: Chunked\r\n", b"0\r\n\r\n"), OK,
                 id="te-case-insensitive"),
    # -- the head (RFC 9112 2-5, RFC 9110 5) -----------------------------------------------------
    pytest.param(post(b"X-A: 1\r\n 2\r\nContent-Length: 2\r\n", b"{}"), BAD,
                 id="obsolete-line-folding"),
    pytest.param(b"POST / HTTP/1.x\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}", BAD,
                 id="version-1.x"),
    pytest.param(b"POST / HTTP/2.0\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}", BAD,
                 id="version-2.0"),
    pytest.param(b"POST / HTTP/1.10\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}", BAD,
                 id="version-1.10"),
    pytest.param(b"POST / http/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}", BAD,
                 id="version-lowercase"),
    pytest.param(b"POST /\r\nHost: t\r\n\r\n", BAD, id="version-missing"),
    pytest.param(b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", BAD, id="host-missing"),
    pytest.param(b"POST / HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}", (202, True),
                 id="host-missing-on-http-1.0"),
    pytest.param(post(b"Host: u\r\nContent-Length: 2\r\n", b"{}"), BAD, id="host-twice"),
    pytest.param(post(b"X-A: a\x00b\r\nContent-Length: 2\r\n", b"{}"), BAD,
                 id="header-value-nul"),
    pytest.param(post(b"X-A: a\rb\r\nContent-Length: 2\r\n", b"{}"), BAD,
                 id="header-value-bare-cr"),
    pytest.param(post(b"X-A: a\nX-B: b\r\nContent-Length: 2\r\n", b"{}"), BAD,
                 id="header-line-bare-lf"),
    pytest.param(post(b"X-A: a\x01b\r\nContent-Length: 2\r\n", b"{}"), BAD,
                 id="header-value-control-byte"),
    pytest.param(post(b"X A: 1\r\nContent-Length: 2\r\n", b"{}"), BAD,
                 id="header-name-space"),
    pytest.param(post(b"X-A : 1\r\nContent-Length: 2\r\n", b"{}"), BAD,
                 id="header-name-space-before-colon"),
    pytest.param(post(b"X@A: 1\r\nContent-Length: 2\r\n", b"{}"), BAD,
                 id="header-name-not-a-token"),
    pytest.param(post(b": 1\r\nContent-Length: 2\r\n", b"{}"), BAD, id="header-name-empty"),
    pytest.param(post(b"X-A\r\nContent-Length: 2\r\n", b"{}"), BAD, id="header-no-colon"),
    pytest.param(b"GET /health/liveness HTTP/1.1\nHost: t\n\n", BAD, id="bare-lf-head"),
    pytest.param(b"get /health/liveness HTTP/1.1\r\nHost: t\r\n\r\n", BAD,
                 id="method-lowercase"),
    pytest.param(b"GET /a\x00b HTTP/1.1\r\nHost: t\r\n\r\n", BAD, id="target-nul"),
    pytest.param(b"GET * HTTP/1.1\r\nHost: t\r\n\r\n", BAD, id="target-asterisk-not-options"),
    pytest.param(b"GET t:80 HTTP/1.1\r\nHost: t\r\n\r\n", BAD,
                 id="target-authority-form-not-connect"),
    pytest.param(b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: t\r\n\r\n", (414, True),
                 id="request-line-over-limit"),
    pytest.param(post(b"X-A: " + b"a" * 9000 + b"\r\nContent-Length: 2\r\n", b"{}"),
                 (431, True), id="header-line-over-limit"),
    pytest.param(post(b"".join(b"X-%d: 1\r\n" % i for i in range(70))
                      + b"Content-Length: 2\r\n", b"{}"), (431, True), id="too-many-headers"),
    pytest.param(post(b"Expect: 100-continue\r\nContent-Length: 2\r\n", b"{}"), OK,
                 id="expect-100-continue"),
    pytest.param(post(b"Expect: teapot\r\nContent-Length: 2\r\n", b"{}"), (417, True),
                 id="expect-unknown"),
    # No line end: the head never completes, and its deadline ends it.
    pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", (408, True), id="tls-hello"),
]


@pytest.mark.parametrize(("request_bytes", "expected"), CASES)
def test_hostile_framing(port: int, request_bytes: bytes, expected: tuple[int, bool]) -> None:
    answer, closed = exchange(port, request_bytes)
    assert answer is not None, "closed without an answer"
    assert (answer.status, closed) == expected, answer
    if closed:
        assert answer.headers.get("connection") == "close", answer.headers


@pytest.mark.parametrize(("target", "body"), [
    pytest.param(b"/health/liveness?u=http://x/metrics", b"ok\n", id="scheme-in-query"),
    pytest.param(b"/health/liveness?u=http://x/other#f", b"ok\n", id="scheme-in-query-fragment"),
    pytest.param(b"http://x/health/liveness", b"ok\n", id="absolute-form"),
    pytest.param(b"/health/x?u=http://x/health/liveness", None, id="query-names-a-probe"),
])
def test_routing_is_by_path_alone(port: int, target: bytes, body: bytes | None) -> None:
    answer, _ = exchange(port, b"GET " + target + b" HTTP/1.1\r\nHost: t\r\n\r\n", "GET")
    assert answer is not None
    assert (answer.status, answer.body if body else None) == ((200, body) if body
                                                              else (404, None))


def test_a_post_with_a_scheme_in_its_query_reaches_the_sink_by_its_path(port: int) -> None:
    answer, _ = exchange(port, post(b"Content-Length: 2\r\n", b"{}",
                                    line=b"POST /x?next=http://t/ HTTP/1.1"))
    assert answer is not None and answer.status == 404, answer


@pytest.mark.parametrize(("head", "piece"), [
    pytest.param(b"Transfer-Encoding: chunked\r\n", b"4000\r\n" + b"a" * 0x4000 + b"\r\n",
                 id="chunked"),
    pytest.param(b"Transfer-Encoding: chunked\r\n", b"FFFFFFFF\r\n", id="one-huge-chunk"),
])
def test_a_streamed_body_over_the_limit_is_refused_as_it_arrives(
        port: int, head: bytes, piece: bytes) -> None:
    """413 and closed once the body passes the limit: the sink reads at most limit + 1 bytes,
    and gunicorn's reader takes at most one read of up to 1 MiB past them (for a chunk
    declared larger); the rest of what was sent is socket buffers, far from the 64 MiB
    offered."""
    most = 64 * 1024 * 1024
    if piece == b"FFFFFFFF\r\n":
        sent, answer = stream_until_closed(port, post(head, piece), b"a" * 16384, most)
    else:
        sent, answer = stream_until_closed(port, post(head), piece, most)
    assert answer is not None and answer.status == 413, answer
    assert sent < LIMIT + 4 * 1024 * 1024, sent


def test_a_slow_head_is_cut_at_its_deadline(port: int) -> None:
    with RawConnection(port) as connection:
        started = time.monotonic()
        for byte in b"GET /health/liveness HTTP/1.1\r\nHost: t\r\n":
            if not connection.send(bytes([byte])) or time.monotonic() - started > 10:
                break
            time.sleep(0.1)
        answer = connection.answer("GET")
        elapsed = time.monotonic() - started
        assert connection.closed()
    assert answer is not None and answer.status == 408, answer
    assert HEAD_SECONDS <= elapsed < HEAD_SECONDS + 3, elapsed


def test_a_slow_body_is_cut_at_its_deadline(port: int) -> None:
    with RawConnection(port) as connection:
        connection.send(post(b"Content-Length: 100\r\n", b"{"))
        started = time.monotonic()
        while (time.monotonic() - started < BODY_SECONDS + 3 and connection.send(b" ")
               and not select.select([connection.sock], [], [], 0.2)[0]):
            pass  # a byte every 0.2 s, until the server answers
        answer = connection.answer()
        elapsed = time.monotonic() - started
        assert connection.closed()
    # The sink's own answer for a body it could not read.
    assert answer is not None and answer.status == 400, answer
    assert b"RequestTimeout" in answer.body
    assert BODY_SECONDS <= elapsed < BODY_SECONDS + 3, elapsed


def test_probes_are_answered_while_slow_bodies_hold_every_slot(port: int) -> None:
    """``THREADS`` slow bodies hold the request slots, one more waits for a slot and is
    refused 503; the probes are answered all along."""
    holders = [RawConnection(port) for _ in range(THREADS + 1)]
    try:
        for holder in holders:
            holder.send(post(b"Content-Length: 100\r\n", b"{"))
        time.sleep(0.3)
        probes = []
        for _ in range(5):
            started = time.monotonic()
            probes.append((http_status(port, "/health/liveness", timeout=1),
                           http_status(port, "/health/readiness", timeout=1),
                           time.monotonic() - started))
            time.sleep(0.1)
        answers = []
        threads = [threading.Thread(target=lambda h=holder: answers.append(h.answer()))
                   for holder in holders]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(BODY_SECONDS + SLOT_SECONDS + 5)
    finally:
        for holder in holders:
            holder.close()
    assert all(live == ready == 200 and took < 0.5 for live, ready, took in probes), probes
    statuses = sorted(answer.status for answer in answers if answer is not None)
    assert statuses == [400] * THREADS + [503], statuses
    assert http_status(port, "/health/liveness") == 200
