"""The POST server: what the callable answers is what the client gets, body and all."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Mapping
from urllib.parse import urlsplit

import pytest

from functions.runtime.post_server import MAX_BODY_BYTES, PostServer


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



@pytest.mark.parametrize(("length", "status"), [
    pytest.param("abc", 400, id="not-a-number"),
    pytest.param("-5", 400, id="negative"),
    pytest.param("\u00b2", 400, id="unicode-digit"),
    pytest.param(str(MAX_BODY_BYTES + 1), 413, id="over-the-limit"),
    pytest.param("99999999999999999999", 413, id="huge"),
])
def test_a_bad_or_huge_content_length_is_refused_unread(length: str, status: int) -> None:
    seen: list[bytes] = []

    def handle(headers: Mapping[str, str], body: bytes, path: str) -> tuple[int, str]:
        seen.append(body)
        return 202, ""

    server = PostServer(handle, "test-post")
    server.start()
    try:
        parts = urlsplit(server.url)
        with socket.create_connection((parts.hostname or "", parts.port or 0), 10) as sock:
            sock.sendall(f"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n"
                         .encode() + b"{}")
            answer = sock.recv(4096)
    finally:
        server.stop()
    assert answer.startswith(f"HTTP/1.1 {status}".encode()), answer
    assert b"application/problem+json" in answer
    assert seen == []
