"""``python -m functions serve``: the container's command, as a real gunicorn process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devstack.cluster.ports import free_port
from functions.runtime.sender import post_event
from tests.core.test_events import BINARY, load_sample
from tests.runtime.rawhttp import exchange, stream_until_closed
from tests.runtime.rawhttp import served as serving

REPO = Path(__file__).resolve().parents[2]



def write_kubeconfig(path: Path) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout: float = 60) -> bool:
    """Whether the server at ``url`` became ready (``False``: it exited first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):  # slow: not ready yet
            pass
        time.sleep(0.02)
    raise AssertionError(f"{url} never became ready")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    env = {**os.environ, "KUBECONFIG": str(write_kubeconfig(tmp_path / "kubeconfig")),
           "FUNCTIONS_CONTROLLER_MODULES": "tests.runtime.controllers",
           "FUNCTIONS_DELIVERY_AUTH": "none"}
    log = tmp_path / "serve.log"
    # A free port can be taken by a parallel test before the server binds it: then the server
    # exits saying so, and it is started again on another port.
    for _ in range(3):
        port = free_port()
        with log.open("wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "functions", "serve", "reconcile", "--host",
                 "127.0.0.1", "--port", str(port), "--workers", "2", "--threads", "4"],
                cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            if wait_ready(f"{base}/health/readiness", process):
                yield base
                return
        finally:
            process.terminate()
            process.wait(timeout=30)
        if "in use" not in log.read_text(errors="replace"):
            break
    raise AssertionError(f"the server exited:\n{log.read_text(errors='replace')[-3000:]}")


def test_served_function_answers_like_a_broker_expects(served: str) -> None:
    accepted = post_event(f"{served}/",
                          *load_sample("02-captured-resource-update-pytorchjob-status.http.json"))
    assert (accepted.status, accepted.body) == (202, b"")
    rejected = post_event(f"{served}/", BINARY, b'{"apiVersion": "v1", "kind"')
    assert rejected.status == 400
    assert b"truncated" in rejected.body
    with urllib.request.urlopen(f"{served}/metrics", timeout=5) as response:
        assert b"odh_training_events_total" in response.read()


def test_a_worker_freezes_what_its_warm_up_loaded_and_starts_its_collector(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The collector does not walk the modules and caches a worker keeps for its lifetime,
    and the worker's full collections wait for its functions to be quiet."""
    import gc

    import functions.runtime.app
    import functions.runtime.collector
    from functions.runtime.serve import FunctionServer

    built: list[str] = []
    started: list[Callable[[], bool]] = []

    class Runtime:
        def quiet(self) -> bool:
            return True

    runtime = Runtime()

    class Collector:
        def __init__(self, quiet: Callable[[], bool]) -> None:
            self.quiet = quiet

        def start(self) -> None:
            started.append(self.quiet)

    def create_app(function: str, **_: object) -> str:
        built.append(function)
        return "app"

    monkeypatch.setattr(functions.runtime.app, "create_app", create_app)
    monkeypatch.setattr(functions.runtime.app, "runtime_of", lambda app: runtime)
    monkeypatch.setattr(functions.runtime.collector, "Collector", Collector)
    gc.unfreeze()
    try:
        assert FunctionServer("status", {}).load() == "app"
        assert built == ["status"]
        assert gc.get_freeze_count() > 0
        assert started == [runtime.quiet]
    finally:
        gc.unfreeze()


# -- the event endpoint behind the worker: routing by path, the body limit ---------------------

EVENT_LIMIT = 65536


@pytest.fixture(scope="module")
def function_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    directory = tmp_path_factory.mktemp("function")
    env = {**os.environ, "KUBECONFIG": str(write_kubeconfig(directory / "kubeconfig")),
           "FUNCTIONS_CONTROLLER_MODULES": "tests.runtime.controllers",
           "FUNCTIONS_DELIVERY_AUTH": "none", "FUNCTIONS_MAX_EVENT_BYTES": str(EVENT_LIMIT)}
    with serving("reconcile", env, log=directory / "serve.log") as port:
        yield port


def event_request(target: bytes) -> bytes:
    headers, body = load_sample("02-captured-resource-update-pytorchjob-status.http.json")
    lines = b"".join(f"{name}: {value}\r\n".encode() for name, value in headers.items()
                     if name.lower() not in ("host", "content-length"))
    return (b"POST " + target + b" HTTP/1.1\r\nHost: t\r\n" + lines
            + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


@pytest.mark.parametrize(("request_bytes", "status", "kind"), [
    pytest.param(event_request(b"/"), 202, None, id="event"),
    pytest.param(event_request(b"/?next=http://t/metrics"), 202, None,
                 id="event-with-scheme-in-query"),
    pytest.param(event_request(b"http://t/"), 202, None, id="event-absolute-form"),
    pytest.param(event_request(b"/metrics?next=http://t/"), 405, None,
                 id="post-to-metrics-with-scheme-in-query"),
    pytest.param(b"GET /health/liveness?u=http://t/metrics HTTP/1.1\r\nHost: t\r\n\r\n",
                 200, "text/plain", id="liveness-with-metrics-url-in-query"),
    pytest.param(b"GET /metrics?u=http://t/health/liveness HTTP/1.1\r\nHost: t\r\n\r\n",
                 200, "text/plain; version=", id="metrics-with-probe-url-in-query"),
])
def test_requests_are_routed_by_their_path_alone(
        function_port: int, request_bytes: bytes, status: int, kind: str | None) -> None:
    answer, _ = exchange(function_port, request_bytes,
                         request_bytes.split(b" ", 1)[0].decode())
    assert answer is not None and answer.status == status, answer
    if kind == "text/plain":
        assert answer.body == b"ok\n"
    elif kind is not None:
        assert answer.headers["content-type"].startswith(kind)
        assert b"odh_training_events_total" in answer.body


@pytest.mark.parametrize(("head", "body"), [
    pytest.param(b"Content-Length: %d\r\n" % (EVENT_LIMIT + 1), b"{", id="stated-length"),
    pytest.param(b"Transfer-Encoding: chunked\r\n", b"FFFFFFFF\r\n", id="chunked"),
])
def test_an_event_over_the_limit_is_413_and_its_connection_closed_unread(
        function_port: int, head: bytes, body: bytes) -> None:
    sent, answer = stream_until_closed(
        function_port, b"POST / HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        + head + b"\r\n" + body, b"a" * 16384, 64 * 1024 * 1024)
    assert answer is not None and answer.status == 413, answer
    assert answer.headers["connection"] == "close"
    assert b"exceeds the limit" in answer.body
    assert sent < EVENT_LIMIT + 4 * 1024 * 1024, sent
