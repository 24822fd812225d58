"""The dead-letter sink: one bounded line per event (attributes, the Broker's error, size and
digest, an excerpt of the data; no other headers, never the whole body), a body limit and
problem documents, in process and served by gunicorn as in the container."""

from __future__ import annotations

import hashlib
import http.client
import io
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.cluster.ports import free_port
from functions.runtime.dead_letters import VALUE_CHARS, create_dead_letter_app
from tests.core.test_events import BINARY, load_sample
from tests.support import REPO, http_status, wait_for

MARKER = "END-OF-A-LARGE-BODY"
BROKER_ERROR = {"Ce-Knativeerrorcode": "503", "Ce-Knativeerrordest": "http://fn/",
                "Ce-Knativeerrordata": "eyJzdGF0dXMiOiA1MDN9"}


def post(headers: dict[str, str], body: bytes, *, limit: int | None = None
         ) -> tuple[int, Any, list[dict[str, Any]]]:
    out = io.StringIO()
    client = create_dead_letter_app(max_body_bytes=limit, excerpt_bytes=256,
                                    out=out).test_client()
    answer = client.post("/", headers=headers, data=body)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    return answer.status_code, answer, lines


def large_pod() -> bytes:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"},
           "spec": {"filler": "x" * 100_000, "last": MARKER}}
    return json.dumps(pod).encode()


def test_a_binary_event_is_one_line_of_attributes_error_and_excerpt() -> None:
    headers, body = load_sample("02-captured-resource-update-pytorchjob-status.http.json")
    headers = {**headers, **BROKER_ERROR, "Authorization": "Bearer secret-token"}
    status, answer, [line] = post(headers, body)
    assert (status, answer.data) == (202, b"")
    assert line["attributes"]["id"] == headers["Ce-Id"]
    assert line["attributes"]["type"] == "dev.knative.apiserver.resource.update"
    assert line["error"] == {"code": "503", "dest": "http://fn/",
                             "data": BROKER_ERROR["Ce-Knativeerrordata"]}
    assert (line["bytes"], line["sha256"]) == (len(body), hashlib.sha256(body).hexdigest())
    assert line["excerpt"] == body[:256].decode()
    assert line["truncated"] is (len(body) > 256)
    assert "secret-token" not in json.dumps(line)


@pytest.mark.parametrize(("headers", "body"), [
    pytest.param(BINARY, large_pod(), id="binary"),
    pytest.param({"Content-Type": "application/cloudevents+json"},
                 json.dumps({"specversion": "1.0", "id": "big", "source": "s",
                             "type": "dev.knative.apiserver.resource.add",
                             "data": json.loads(large_pod())}).encode(), id="structured"),
])
def test_a_large_event_is_logged_bounded(headers: dict[str, str], body: bytes) -> None:
    status, _, [line] = post(headers, body)
    assert status == 202
    assert line["truncated"] is True
    assert len(line["excerpt"].encode()) <= 256
    assert line["bytes"] == len(body)
    assert MARKER not in json.dumps(line)
    assert len(json.dumps(line)) < 4096


def test_structured_attributes_are_read_from_the_envelope_and_cut() -> None:
    envelope = {"specversion": "1.0", "id": "s-1", "source": "s", "type": "t",
                "subject": "y" * 10_000, "knativeerrorcode": "422", "data": {"a": 1}}
    status, _, [line] = post({"Content-Type": "application/cloudevents+json"},
                             json.dumps(envelope).encode())
    assert status == 202
    assert line["attributes"]["id"] == "s-1"
    assert len(line["attributes"]["subject"]) == VALUE_CHARS + 1  # cut, with an ellipsis
    assert line["error"] == {"code": "422"}
    assert json.loads(line["excerpt"]) == {"a": 1}


@pytest.mark.parametrize(("headers", "body"), [
    pytest.param({"Content-Type": "application/octet-stream"}, b"\xff\x00" * 300,
                 id="binary-garbage"),
    pytest.param(BINARY, b"[" * 50_000, id="nested-50000-deep"),
    pytest.param({"Content-Type": "application/cloudevents+json"}, b"[" * 50_000,
                 id="structured-nested-50000-deep"),
    pytest.param({"Content-Type": "application/cloudevents+json"}, b'{"id": ',
                 id="structured-truncated"),
    pytest.param({}, b"", id="empty"),
])
def test_anything_within_the_limit_is_kept(headers: dict[str, str], body: bytes) -> None:
    status, _, [line] = post(headers, body)
    assert status == 202
    assert line["bytes"] == len(body)
    assert len(line["excerpt"].encode()) <= 256 * 3  # replacement characters included


def test_a_body_over_the_limit_is_413_and_its_attributes_are_kept() -> None:
    status, answer, [line] = post(BINARY, b"{" + b" " * 5000 + b"}", limit=1000)
    assert status == 413
    assert answer.mimetype == "application/problem+json"
    assert answer.get_json()["status"] == 413
    assert line["attributes"]["id"] == BINARY["Ce-Id"]
    assert line["refused"] == "body over 1000 bytes"
    assert "excerpt" not in line


# -- served as in the container ------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    port = free_port()
    out = tmp_path_factory.mktemp("dead-letters") / "stdout"
    env = {**os.environ, "DEAD_LETTER_MAX_BYTES": "65536", "DEAD_LETTER_EXCERPT_BYTES": "128"}
    with out.open("wb") as stdout:
        process = subprocess.Popen(
            [sys.executable, "-m", "functions", "serve", "dead-letters", "--host", "127.0.0.1",
             "--port", str(port), "--threads", "2"], cwd=REPO, env=env, stdout=stdout,
            stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: http_status(port, "/health/readiness") == 200, 30, 0.05,
                     "readiness")
            yield port, out
        finally:
            process.terminate()
            process.wait(30)


def raw_request(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        return sock.recv(4096)


def test_served_sink_logs_events_and_refuses_what_it_must(served: tuple[int, Path]) -> None:
    port, out = served
    headers, body = load_sample("03-captured-resource-delete-pytorchjob.http.json")
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("POST", "/", body=body, headers=headers)
    assert connection.getresponse().status == 202
    connection.close()
    big = raw_request(port, b"POST / HTTP/1.1\r\nHost: x\r\nCe-Id: big\r\n"
                            b"Content-Length: 99999999\r\n\r\n{")
    assert big.startswith(b"HTTP/1.1 413") and b"problem+json" in big, big
    bad = raw_request(port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n{}")
    assert bad.startswith(b"HTTP/1.1 400"), bad
    assert http_status(port, "/health/liveness") == 200

    def lines() -> list[dict[str, Any]]:
        return [json.loads(line) for line in out.read_text().splitlines()
                if line.startswith("{")]

    logged = wait_for(lambda: lines() if len(lines()) >= 2 else None, 10, 0.05, "two lines")
    by_id = {line["attributes"].get("id"): line for line in logged}
    assert by_id[headers["Ce-Id"]]["truncated"] is True
    assert len(by_id[headers["Ce-Id"]]["excerpt"]) <= 128
    assert by_id["big"]["refused"] == "body over 65536 bytes"
