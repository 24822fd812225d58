"""The functions' gunicorn worker: its request slots and deadline socket in process, and the
worker itself under a real gunicorn master (deadlines, the probe reserve, keep-alive,
connection limits, heartbeats, a graceful stop)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.cluster.ports import free_port
from functions.runtime.serve import (
    LIMIT_REQUEST_FIELD_SIZE,
    LIMIT_REQUEST_FIELDS,
    LIMIT_REQUEST_LINE,
    WORKER_CLASS,
    gunicorn_options,
)
from functions.runtime.worker import Deadlines, DeadlineSocket, RequestSlots, RequestTimeout
from tests.runtime.rawhttp import RawConnection
from tests.support import http_status, wait_for

REPO = Path(__file__).resolve().parents[2]


# -- the request slots (WSGI middleware) ----------------------------------------------------------

class Closer:
    def __init__(self) -> None:
        self.closed = 0

    def close_after_answer(self) -> None:
        self.closed += 1


class Body:
    failed = False


def environ(method: str = "POST", path: str = "/", **extra: Any) -> dict[str, Any]:
    return {"REQUEST_METHOD": method, "PATH_INFO": path, "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_HOST": "h", "gunicorn.socket": Closer(), "wsgi.input": Body(), **extra}


def call(app: Any, env: dict[str, Any]) -> tuple[str, dict[str, str], bytes]:
    """Run a WSGI app as a server does, closing its answer once sent."""
    started: list[tuple[str, list[tuple[str, str]]]] = []
    result = app(env, lambda status, headers, exc_info=None: started.append((status, headers)))
    try:
        body = b"".join(result)
    finally:
        getattr(result, "close", lambda: None)()
    [(status, headers)] = started
    return status, dict(headers), body


class Held:
    """An app that holds its request slot until released."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        self.release.wait(10)
        start_response("202 Accepted", [])
        return [b""]


def echo(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    start_response("200 OK", [("X-Path", environ["PATH_INFO"])])
    return [b"ok"]


@pytest.mark.parametrize(("env", "status", "closed"), [
    pytest.param(environ(), "200 OK", 0, id="served"),
    pytest.param({k: v for k, v in environ().items() if k != "HTTP_HOST"},
                 "400 Bad Request", 1, id="http-1.1-without-host"),
    pytest.param({k: v for k, v in environ(SERVER_PROTOCOL="HTTP/1.0").items()
                  if k != "HTTP_HOST"}, "200 OK", 0, id="http-1.0-without-host"),
    pytest.param(environ(HTTP_TRANSFER_ENCODING="chunked"), "200 OK", 0, id="chunked"),
    pytest.param(environ(HTTP_TRANSFER_ENCODING=" Chunked"), "200 OK", 0, id="chunked-case"),
    pytest.param(environ(HTTP_TRANSFER_ENCODING="gzip,chunked"), "501 Not Implemented", 1,
                 id="gzip-then-chunked"),
])
def test_framing_gunicorn_lets_through(env: dict[str, Any], status: str, closed: int) -> None:
    answer, headers, _ = call(RequestSlots(echo, 1, 0.1), env)
    assert (answer, env["gunicorn.socket"].closed) == (status, closed)
    if closed:
        assert headers["Content-Type"] == "application/problem+json"
        assert headers["Connection"] == "close"


def test_probes_pass_busy_slots_and_other_requests_get_503_with_retry_after() -> None:
    held = Held()
    slots = RequestSlots(held, 1, 0.2)
    holder = threading.Thread(target=call, args=(slots, environ()))
    holder.start()
    try:
        time.sleep(0.1)
        slots.app = echo  # the next requests' app answers at once
        for method, path in (("GET", "/health/liveness"), ("GET", "/health/readiness"),
                             ("HEAD", "/health/readiness")):
            assert call(slots, environ(method, path))[0] == "200 OK"
        started = time.monotonic()
        status, headers, _ = call(slots, environ("GET", "/metrics"))
        assert (status, headers["Retry-After"]) == ("503 Service Unavailable", "1")
        assert time.monotonic() - started >= 0.2
        assert call(slots, environ("POST", "/health/liveness"))[0].startswith("503")
    finally:
        held.release.set()
        holder.join(5)
    assert call(slots, environ("GET", "/metrics"))[0] == "200 OK"  # the slot came back


def test_a_slot_is_released_when_the_answer_is_closed_or_the_app_raises() -> None:
    def fails(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        raise RuntimeError("boom")

    slots = RequestSlots(echo, 1, 0.05)
    for _ in range(3):
        assert call(slots, environ())[0] == "200 OK"
    slots.app = fails
    for _ in range(3):
        with pytest.raises(RuntimeError):
            call(slots, environ())
    slots.app = echo
    assert call(slots, environ())[0] == "200 OK"


@pytest.mark.parametrize(("headers", "failed", "closed"), [
    pytest.param([], False, 0, id="kept"),
    pytest.param([("Connection", "close")], False, 1, id="app-says-close"),
    pytest.param([("connection", "Close")], False, 1, id="app-says-close-any-case"),
    pytest.param([], True, 1, id="body-unreadable"),
])
def test_the_connection_closes_when_the_app_or_the_body_says_so(
        headers: list[tuple[str, str]], failed: bool, closed: int) -> None:
    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        start_response("413 Content Too Large", headers)
        return [b""]

    env = environ()
    env["wsgi.input"].failed = failed
    call(RequestSlots(app, 1, 0.1), env)
    assert env["gunicorn.socket"].closed == closed


# -- the deadline socket ---------------------------------------------------------------------------

@pytest.fixture
def pair() -> Iterator[tuple[DeadlineSocket, socket.socket]]:
    server, client = socket.socketpair()
    yield DeadlineSocket(server, write_seconds=0.3), client
    server.close()
    client.close()


class Request:
    closed = False

    def force_close(self) -> None:
        self.closed = True


def test_a_head_past_its_deadline_reads_as_the_end(
        pair: tuple[DeadlineSocket, socket.socket]) -> None:
    sock, client = pair
    sock.begin(0.3)
    client.sendall(b"GET")
    assert sock.recv(10) == b"GET"
    started = time.monotonic()
    assert sock.recv(10) == b""
    assert 0.2 < time.monotonic() - started < 1
    assert sock.expired is not None and sock.expired.part == "head"


def test_a_body_deadline_starts_at_its_first_read_and_spans_every_read(
        pair: tuple[DeadlineSocket, socket.socket]) -> None:
    sock, client = pair
    sock.begin(0.2)
    sock.begin_body(Request(), 0.4)
    time.sleep(0.5)  # the app's own time before it reads does not count
    client.sendall(b"a")
    assert sock.recv(1) == b"a"
    time.sleep(0.2)
    client.sendall(b"b")
    assert sock.recv(1) == b"b"
    started = time.monotonic()
    with pytest.raises(RequestTimeout, match=r"body took longer than 0\.4 s"):
        sock.recv(1)  # the rest of the 0.4 s, not 0.4 s more
    assert time.monotonic() - started < 0.35


def test_a_shorter_timeout_of_the_caller_is_its_own(
        pair: tuple[DeadlineSocket, socket.socket]) -> None:
    sock, _ = pair
    sock.begin_body(Request(), 5)
    sock.settimeout(0.1)
    with pytest.raises(TimeoutError) as raised:
        sock.recv(1)
    assert not isinstance(raised.value, RequestTimeout)
    assert sock.expired is None and sock.gettimeout() == 0.1


def fill(sock: DeadlineSocket) -> None:
    while True:
        sock.sendall(b"x" * 65536)


def test_writes_have_their_own_timeout_not_the_expired_read_deadline(
        pair: tuple[DeadlineSocket, socket.socket]) -> None:
    sock, client = pair
    sock.begin(0.01)
    time.sleep(0.05)
    sock.sendall(b"answer")
    assert client.recv(10) == b"answer"
    assert sock.sent
    with pytest.raises(RequestTimeout, match="answer"):  # a client that never reads
        fill(sock)


def test_closing_after_the_answer_marks_the_request() -> None:
    server, client = socket.socketpair()
    with server, client:
        sock = DeadlineSocket(server, 1)
        request = Request()
        sock.begin_body(request, 1)
        sock.close_after_answer()
        assert request.closed


def test_deadlines_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUNCTIONS_REQUEST_HEAD_SECONDS", "1.5")
    monkeypatch.setenv("FUNCTIONS_REQUEST_SLOT_SECONDS", "0.5")
    assert Deadlines.from_environ() == Deadlines(head=1.5, body=30, write=30, slot=0.5)


# -- the options ---------------------------------------------------------------------------------

def test_every_app_runs_this_worker_with_explicit_limits() -> None:
    options = gunicorn_options(8080, 1, 2)
    assert options["worker_class"] == WORKER_CLASS == "functions.runtime.worker.EventWorker"
    assert {key: options[key] for key in (
        "limit_request_line", "limit_request_fields", "limit_request_field_size",
        "keepalive", "worker_connections", "http_parser")} == {
        "limit_request_line": LIMIT_REQUEST_LINE, "limit_request_fields": LIMIT_REQUEST_FIELDS,
        "limit_request_field_size": LIMIT_REQUEST_FIELD_SIZE, "keepalive": 75,
        "worker_connections": 1000, "http_parser": "python"}


# -- under a real gunicorn master -----------------------------------------------------------------

APP = '''
import os, time
def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/slow":
        time.sleep(1.5)
    if path == "/fail":
        raise RuntimeError("a handler bug")
    if path == "/think-first":
        time.sleep(1.5)
    body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    if path == "/think-after":
        time.sleep(1.5)
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"pid %d got " % os.getpid() + body]
'''
THREADS = 2
CONNECTIONS = 6
KEEPALIVE = 1


@pytest.fixture
def gunicorn(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes], Path]]:
    (tmp_path / "test_app.py").write_text(APP)
    log = tmp_path / "gunicorn.log"
    port = free_port()
    env = {**os.environ, "FUNCTIONS_REQUEST_BODY_SECONDS": "1",
           "FUNCTIONS_REQUEST_HEAD_SECONDS": "1"}
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "--worker-class", WORKER_CLASS,
             "--threads", str(THREADS), "--timeout", "2", "--graceful-timeout", "10",
             "--keep-alive", str(KEEPALIVE), "--worker-connections", str(CONNECTIONS),
             "--bind", f"127.0.0.1:{port}", "--pythonpath", str(REPO), "--chdir",
             str(tmp_path), "--no-control-socket", "test_app:app"],
            cwd=tmp_path, env=env, stdout=output, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: http_status(port, "/") == 200, 30, 0.05, f"gunicorn on {port}")
        yield port, process, log
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


def _post(connection: RawConnection, path: str, body: bytes = b"hi") -> tuple[int, bytes]:
    connection.send(f"POST {path} HTTP/1.1\r\nHost: h\r\nContent-Length: {len(body)}\r\n\r\n"
                    .encode() + body)
    answer = connection.answer()
    assert answer is not None
    return answer.status, answer.body


def _pid_answering(port: int) -> bytes:
    with RawConnection(port) as connection:
        return _post(connection, "/")[1].split(b" got ")[0]


@pytest.mark.parametrize("path", ["/think-first", "/think-after"])
def test_the_apps_own_time_does_not_count_against_the_body_deadline(
        gunicorn: tuple[int, subprocess.Popen[bytes], Path], path: str) -> None:
    """The app thinks 1.5 s before or after reading a body sent at once (deadline 1 s); its
    answer is written with a timeout of its own."""
    with RawConnection(gunicorn[0]) as connection:
        assert _post(connection, path)[1].endswith(b" got hi")
        assert _post(connection, "/")[0] == 200  # and the connection is kept


def test_a_handler_error_is_a_503_with_retry_after_never_a_500(
        gunicorn: tuple[int, subprocess.Popen[bytes], Path]) -> None:
    port, _, log = gunicorn
    with RawConnection(port) as connection:
        connection.send(b"POST /fail HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n")
        answer = connection.answer()
        assert connection.closed()
    assert answer is not None
    assert (answer.status, answer.headers["retry-after"]) == (503, "30")
    assert answer.headers["content-type"] == "application/problem+json"
    assert b"a handler bug" in log.read_bytes()


def test_silent_and_closing_connections_hold_no_thread_the_probes_need(
        gunicorn: tuple[int, subprocess.Popen[bytes], Path]) -> None:
    """New connections that send nothing go back to the poller within a moment (gthread
    holds a thread 5 s for each), and a connection closed after a refusal lingers in its
    thread, not in the worker's loop (gunicorn lingers there up to 2 s)."""
    port = gunicorn[0]
    silent = [RawConnection(port) for _ in range(THREADS + 1)]
    refused = [RawConnection(port) for _ in range(2)]
    try:
        for connection in refused:
            connection.send(b"GET / HTTP/1.1\r\nHost: h\r\nX A: 1\r\n\r\n")
            answer = connection.answer("GET")
            assert answer is not None and answer.status == 400
        time.sleep(0.7)
        started = time.monotonic()
        assert http_status(port, "/", timeout=2) == 200
        assert time.monotonic() - started < 0.5
    finally:
        for connection in silent + refused:
            connection.close()


def test_idle_connections_close_after_keepalive_and_at_most_worker_connections_are_held(
        gunicorn: tuple[int, subprocess.Popen[bytes], Path]) -> None:
    port = gunicorn[0]
    kept = RawConnection(port)
    idle = [RawConnection(port) for _ in range(CONNECTIONS - 1)]
    try:
        assert _post(kept, "/")[0] == 200
        time.sleep(0.2)
        started = time.monotonic()
        # Every connection slot is taken: this one waits in the backlog until the idle ones
        # are closed, after the keep-alive time.
        assert http_status(port, "/", timeout=10) == 200
        assert time.monotonic() - started > KEEPALIVE * 0.5
        assert kept.closed(KEEPALIVE + 3)
    finally:
        kept.close()
        for connection in idle:
            connection.close()


def test_a_worker_idle_longer_than_the_timeout_is_not_killed(
        gunicorn: tuple[int, subprocess.Popen[bytes], Path]) -> None:
    """Its heartbeat reaches the master while no request comes (``--timeout 2``)."""
    port, _, log = gunicorn
    first = _pid_answering(port)
    time.sleep(5)
    assert _pid_answering(port) == first
    assert b"WORKER TIMEOUT" not in log.read_bytes()


def test_sigterm_lets_the_request_in_flight_finish(
        gunicorn: tuple[int, subprocess.Popen[bytes], Path]) -> None:
    port, process, _ = gunicorn
    answers: list[tuple[int, bytes, bool]] = []

    def slow() -> None:
        with RawConnection(port) as connection:
            connection.send(b"POST /slow HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nok")
            answer = connection.answer()
            assert answer is not None
            answers.append((answer.status, answer.body, connection.closed()))

    client = threading.Thread(target=slow)
    client.start()
    time.sleep(0.5)  # the request is inside the app
    os.kill(process.pid, signal.SIGTERM)
    client.join(15)
    assert process.wait(15) == 0
    [(status, body, closed)] = answers
    assert (status, closed) == (200, True)
    assert body.endswith(b" got ok")
