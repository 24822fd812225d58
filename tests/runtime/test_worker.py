"""The event functions' gunicorn worker: the WSGI environ it builds, how it runs an app, and the
worker itself under a real gunicorn master (heartbeats, a graceful stop)."""

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

from functions.cluster.ports import free_port
from functions.core.http1 import parse_head
from functions.runtime.httpd import BodyStream, Request
from functions.runtime.serve import EVENT_WORKER, gunicorn_options
from functions.runtime.worker import call_wsgi, wsgi_environ
from tests.runtime.test_httpd import read_answer
from tests.support import wait_for

REPO = Path(__file__).resolve().parents[2]


def request(head: bytes, body: bytes = b"") -> Request:
    parsed = parse_head(head)
    return Request(parsed.first, parsed.second, parsed.third, parsed,
                   BodyStream.whole(body), ("10.0.0.9", 41000))


@pytest.mark.parametrize(("head", "expected"), [
    pytest.param(b"POST /a%20b?x=1&y=2 HTTP/1.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 2\r\nCe-Id: 7",
                 {"REQUEST_METHOD": "POST", "PATH_INFO": "/a b", "QUERY_STRING": "x=1&y=2",
                  "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": "2", "HTTP_CE_ID": "7",
                  "SERVER_PROTOCOL": "HTTP/1.1"}, id="path-query-and-headers"),
    pytest.param(b"GET http://example.test:8080/metrics HTTP/1.1",
                 {"PATH_INFO": "/metrics", "QUERY_STRING": ""}, id="absolute-form"),
    pytest.param(b"GET / HTTP/1.1\r\nX-A: 1\r\nX-A: 2", {"HTTP_X_A": "1,2"},
                 id="repeated-header-joined"),
    pytest.param(b"GET / HTTP/1.1\r\nX_Forwarded_For: 6.6.6.6\r\nX-Forwarded-For: 1.2.3.4",
                 {"HTTP_X_FORWARDED_FOR": "1.2.3.4"}, id="underscore-header-dropped"),
])
def test_wsgi_environ(head: bytes, expected: dict[str, str]) -> None:
    environ = wsgi_environ(request(head), ("svc", "8080"), multiprocess=False)
    assert {key: environ.get(key) for key in expected} == expected
    assert (environ["SERVER_NAME"], environ["SERVER_PORT"]) == ("svc", "8080")
    assert (environ["REMOTE_ADDR"], environ["REMOTE_PORT"]) == ("10.0.0.9", "41000")
    assert environ["wsgi.url_scheme"] == "http"
    assert environ["wsgi.multithread"] is True


def test_the_body_is_the_apps_to_read() -> None:
    environ = wsgi_environ(request(b"POST / HTTP/1.1\r\nContent-Length: 4", b"{}{}"),
                           ("h", "1"), multiprocess=True)
    assert environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"])) == b"{}{}"
    assert environ["wsgi.multiprocess"] is True


class Closing(list[bytes]):
    closed = False

    def close(self) -> None:
        self.closed = True


def test_call_wsgi_collects_the_answer_and_closes_the_iterable() -> None:
    result = Closing([b"b", b"", b"c"])

    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        write = start_response("201 Created", [("X-A", "1")])
        write(b"a")
        return result

    assert call_wsgi(app, {}) == (201, [("X-A", "1")], b"abc")
    assert result.closed


def test_an_app_that_never_starts_a_response_is_an_error() -> None:
    with pytest.raises(AssertionError, match="start_response"):
        call_wsgi(lambda environ, start_response: [b""], {})


@pytest.mark.parametrize(("function", "worker"), [
    pytest.param("reconcile", EVENT_WORKER, id="reconcile"),
    pytest.param("status", EVENT_WORKER, id="status"),
    pytest.param("all", EVENT_WORKER, id="all"),
    pytest.param("dead-letters", EVENT_WORKER, id="dead-letters"),
    pytest.param("api", "gthread", id="the-rest-api-keeps-gthread"),
])
def test_the_event_functions_run_this_worker(function: str, worker: str) -> None:
    assert gunicorn_options(8080, 1, 2, function=function)["worker_class"] == worker


# -- under a real gunicorn master -----------------------------------------------------------------

APP = '''
import os, time
def app(environ, start_response):
    if environ["PATH_INFO"] == "/slow":
        time.sleep(1.5)
    body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"pid %d got " % os.getpid() + body]
'''


@pytest.fixture
def gunicorn(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes], Path]]:
    (tmp_path / "slow_app.py").write_text(APP)
    log = tmp_path / "gunicorn.log"
    port = free_port()
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "--worker-class", EVENT_WORKER, "--threads", "2",
             "--timeout", "2", "--graceful-timeout", "10", "--bind", f"127.0.0.1:{port}",
             "--pythonpath", str(REPO), "--chdir", str(tmp_path), "--no-control-socket",
             "slow_app:app"], cwd=tmp_path, stdout=output, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: _answers(port), 30, 0.05, f"gunicorn on {port}")
        yield port, process, log
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
            return read_answer(sock)[0] == "HTTP/1.1 200 OK"
    except OSError:
        return False


def _pid_answering(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi")
        return read_answer(sock)[2].split(b" got ")[0]


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
    answers: list[tuple[str, dict[str, str], bytes]] = []

    def slow() -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"POST /slow HTTP/1.1\r\nContent-Length: 2\r\n\r\nok")
            answers.append(read_answer(sock))

    client = threading.Thread(target=slow)
    client.start()
    time.sleep(0.5)  # the request is inside the app
    os.kill(process.pid, signal.SIGTERM)
    client.join(15)
    assert process.wait(15) == 0
    [(status, headers, body)] = answers
    assert (status, headers["connection"]) == ("HTTP/1.1 200 OK", "close")
    assert body.endswith(b" got ok")
