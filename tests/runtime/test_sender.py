"""The event sender (``functions.runtime.sender``) against scripted local servers: keep-alive
connections per origin checked before reuse, hop-by-hop headers dropped, Retry-After, and
every hostile answer of ``tests/kube/hostile.py`` a :class:`SendResult` error within the
deadline, nothing left for the next event."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from functions.runtime.sender import ConnectionPool, SendResult, post_event
from tests.kube.hostile import (
    CASES,
    LIMIT,
    SLACK,
    Hostile,
    Script,
    elapsed_since,
    hostile,
    sends,
)

DEADLINE = 0.5
EVENT = b'{"specversion":"1.0"}'
HEADERS = {"Content-Type": "application/cloudevents+json", "Ce-Id": "1"}
ACCEPTED = b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n"


@contextmanager
def pooled(script: Script) -> Iterator[tuple[Hostile, ConnectionPool]]:
    with hostile(script) as server:
        pool = ConnectionPool(max_answer=LIMIT)
        try:
            yield server, pool
        finally:
            pool.close()


def test_events_share_a_keep_alive_connection_per_origin() -> None:
    with pooled(sends(ACCEPTED, keep=True)) as (server, pool), \
            pooled(sends(ACCEPTED, keep=True)) as (other, _):
        for _ in range(3):
            assert pool.post(server.url + "/a", HEADERS, EVENT, 5).status == 202
            assert pool.post(other.url + "/b", HEADERS, EVENT, 5).status == 202
        assert (server.connections, other.connections) == (1, 1)
        assert server.heads[0].startswith(b"POST /a HTTP/1.1")


def test_hop_by_hop_headers_are_dropped_and_the_body_stated() -> None:
    headers = {**HEADERS, "Connection": "close", "Host": "elsewhere", "Content-Length": "99",
               "Transfer-Encoding": "chunked", "Keep-Alive": "timeout=5", "TE": "trailers",
               "Upgrade": "h2c"}
    with pooled(sends(ACCEPTED, keep=True)) as (server, pool):
        assert pool.post(server.url + "/", headers, EVENT, 5).status == 202
    head = server.heads[0].decode().lower()
    assert f"content-length: {len(EVENT)}\r\n" in head
    assert f"host: 127.0.0.1:{server.port}\r\n" in head
    for dropped in ("connection:", "elsewhere", "transfer-encoding", "keep-alive", "te:",
                    "upgrade"):
        assert dropped not in head
    assert "ce-id: 1" in head


@pytest.mark.parametrize(("retry_after", "seconds"), [
    pytest.param(b"3", 3.0, id="seconds"),
    pytest.param(b"soon", None, id="unreadable"),
])
def test_an_answer_carries_its_status_retry_after_and_body(retry_after: bytes,
                                                           seconds: float | None) -> None:
    busy = (b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: " + retry_after
            + b"\r\nContent-Length: 4\r\n\r\nbusy")
    with pooled(sends(busy, keep=True)) as (server, pool):
        result = pool.post(server.url, HEADERS, EVENT, 5)
    assert result == SendResult(503, seconds, body=b"busy")


def test_a_connection_the_subscriber_closed_while_idle_is_not_used_again() -> None:
    with pooled(sends(ACCEPTED)) as (server, pool):
        for _ in range(3):
            assert pool.post(server.url, HEADERS, EVENT, 5).status == 202
            time.sleep(0.01)
        assert server.connections == 3


def test_an_event_whose_pooled_connection_closes_unanswered_is_sent_again() -> None:
    """The second event's connection ends without an answer, as one the subscriber closed
    just as it was taken: the event goes again on a new connection."""
    def answer(conn: socket.socket, server: Hostile) -> bool:
        if len(server.heads) == 2:
            return False
        conn.sendall(ACCEPTED)
        return True

    with pooled(answer) as (server, pool):
        for _ in range(2):
            assert pool.post(server.url, HEADERS, EVENT, 5).status == 202
        assert (len(server.heads), server.connections) == (3, 2)


@pytest.mark.parametrize("script", CASES)
def test_a_hostile_answer_is_an_error_within_the_deadline(script: Script) -> None:
    with pooled(script) as (server, pool):
        started = time.monotonic()
        result = pool.post(server.url, HEADERS, EVENT, DEADLINE)
        assert elapsed_since(started) < DEADLINE + SLACK
        assert result.status is None
        assert result.error
        server.hostile = False
        assert pool.post(server.url, HEADERS, EVENT, 5) == SendResult(200, body=b"fine")


def test_a_second_answer_to_one_event_never_answers_the_next() -> None:
    def twice(conn: socket.socket, server: Hostile) -> bool:
        conn.sendall(ACCEPTED)
        if len(server.heads) == 1:
            conn.sendall(b"HTTP/1.1 500 Stale\r\nContent-Length: 0\r\n\r\n")
        return True

    with pooled(twice) as (server, pool):
        assert pool.post(server.url, HEADERS, EVENT, 5).status == 202
        time.sleep(0.1)  # the stale answer has arrived
        for _ in range(3):
            assert pool.post(server.url, HEADERS, EVENT, 5).status == 202


@pytest.mark.parametrize("url", [
    pytest.param("ftp://127.0.0.1/", id="not-http"),
    pytest.param("http://127.0.0.1:notaport/", id="bad-port"),
    pytest.param("http://[::1/", id="unparsable"),
])
def test_an_address_that_cannot_be_posted_to_is_an_error(url: str) -> None:
    result = post_event(url, HEADERS, EVENT, 1)
    assert (result.status, bool(result.error)) == (None, True)


def test_post_event_uses_a_connection_of_its_own_and_closes_it() -> None:
    with hostile(sends(ACCEPTED, keep=True)) as server:
        for _ in range(2):
            assert post_event(server.url, HEADERS, EVENT, 5).status == 202
        assert server.connections == 2
