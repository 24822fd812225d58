"""The POST server: what the callable answers is what the client gets, body and all."""

from __future__ import annotations

import http.client
import json
from collections.abc import Mapping
from urllib.parse import urlsplit

import pytest

from functions.runtime.post_server import PostServer


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
                 json.dumps({"detail": "not a CloudEvent"}).encode(), id="problem"),
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

