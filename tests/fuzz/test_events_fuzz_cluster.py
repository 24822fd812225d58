"""The function endpoints under a fuzzer: random CloudEvents and the captured samples mutated
(attributes dropped or garbled, unknown types, wrong content types, data replaced, truncated or
with flipped bytes). Every answer is 2xx/4xx, or the documented 503/429 with ``Retry-After``
for transient trouble, never a handler failure; the server keeps serving.

In process, the functions' API client talks to the test cluster, so events that route do real
reads. Served, gunicorn runs the functions as in production and also gets raw bytes that are
not HTTP at all.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from devstack.cluster.ports import free_port
from devstack.cluster.runner import LocalCluster
from functions.runtime.app import create_app
from tests.fuzz.strategies import HttpEvent, events, load_samples
from tests.support import REPO, http_status, wait_for

pytestmark = pytest.mark.cluster

SAMPLES = load_samples()
# A body the Broker would otherwise retry ten times: 50,000 "[" with Ce-* headers.
DEEPLY_NESTED = HttpEvent({"Ce-Specversion": "1.0", "Ce-Type": "dev.knative.apiserver.ref.add",
                           "Ce-Source": "s", "Ce-Id": "1", "Content-Type": "application/json"},
                          b"[" * 50_000)
RETRY = (429, 503)
BUG_MARKS = ("handler failed", "internal error")


def acceptable(status: int, headers: Any, body: bytes) -> str | None:
    """Why an answer breaks the contract, or ``None``."""
    if status < 300:
        return None if not body else f"{status} with a body"
    if 400 <= status < 500 and status not in RETRY:
        return None
    if status in RETRY:
        if not headers.get("Retry-After"):
            return f"{status} without Retry-After"
        text = body.decode("utf-8", "replace")
        if any(mark in text for mark in BUG_MARKS):
            return f"a handler failed: {text}"
        return None
    return f"{status}: {body[:300]!r}"


@pytest.fixture(scope="module")
def client(cluster: LocalCluster, crds: None) -> FlaskClient:
    app = create_app("all", kube_factory=lambda hook: cluster.client(on_request=hook),
                     warm_up="now")
    return app.test_client()


def test_samples_themselves_are_accepted(client: FlaskClient) -> None:
    assert len(SAMPLES) >= 6
    for sample in SAMPLES:
        event = HttpEvent(sample.headers, json.dumps(sample.body).encode())
        response = client.post("/", headers=event.headers, data=event.body)
        assert response.status_code == 202, (sample.name, response.get_data(as_text=True))


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(event=events(SAMPLES))
@example(event=DEEPLY_NESTED)
def test_fuzzed_events_in_process(client: FlaskClient, event: HttpEvent) -> None:
    response = client.post("/", headers=event.headers, data=event.body)
    problem = acceptable(response.status_code, response.headers, response.get_data())
    assert problem is None, problem
    assert client.get("/health/liveness").status_code == 200


# -- served by gunicorn -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    port = free_port()
    directory = tmp_path_factory.mktemp("served")
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig),
           "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    log = (directory / "gunicorn.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "functions", "serve", "all", "--host", "127.0.0.1",
         "--port", str(port), "--workers", "2", "--threads", "4"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: http_status(port, "/health/readiness", 5) == 200, 60, 0.1, "readiness")
        yield port
    finally:
        process.terminate()
        process.wait(30)
        log.close()
        _assert_no_tracebacks(directory / "gunicorn.log")


def _assert_no_tracebacks(log: Path) -> None:
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[-3000:]


def _post(port: int, event: HttpEvent) -> tuple[int, Any, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {k: v.encode("latin-1", "replace").decode("latin-1")
                   for k, v in event.headers.items() if k.lower() != "content-length"}
        connection.request("POST", "/", body=event.body, headers=headers)
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(event=events(SAMPLES))
@example(event=DEEPLY_NESTED)
def test_fuzzed_events_served(served: int, event: HttpEvent) -> None:
    status, headers, body = _post(served, event)
    problem = acceptable(status, headers, body)
    assert problem is None, problem


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.binary(min_size=1, max_size=2048) | st.sampled_from((
    b"POST / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n{",
    b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET /../../etc/passwd HTTP/1.0\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")))
def test_bytes_that_are_not_http_do_not_stop_serving(served: int, junk: bytes) -> None:
    with socket.create_connection(("127.0.0.1", served), timeout=5) as sock:
        sock.sendall(junk)
        sock.shutdown(socket.SHUT_WR)
        try:
            answer = sock.recv(64)
        except TimeoutError:
            answer = b""
    if answer.startswith(b"HTTP/1."):
        # RFC 9112 6.1: an unknown transfer coding is answered 501 (by gunicorn's parser).
        assert not answer[9:12].startswith(b"5") or (answer.startswith(
            b"HTTP/1.1 501") and b"transfer-encoding" in junk.lower()), answer
    assert http_status(served, "/health/liveness", 5) == 200


def test_a_body_with_broken_chunked_framing_is_400(served: int) -> None:
    with socket.create_connection(("127.0.0.1", served), timeout=10) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nCe-Specversion: 1.0\r\n"
                     b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"zz\r\n{}\r\n0\r\n\r\n")
        answer = sock.recv(256)
    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert b"could not be read" in answer or b"problem+json" in answer
