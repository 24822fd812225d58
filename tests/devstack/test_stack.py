"""The dev stack's wait for a function to be ready: it returns on a 200, and a process that
exits or stays unready is named with its last answer and the end of its log."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from devstack.cluster.runner import Component
from devstack.readiness import wait_ready

SLEEPS = "import time; print('serving', flush=True); time.sleep(60)"


@pytest.fixture
def probe() -> Iterator[tuple[str, list[int]]]:
    """A readiness endpoint whose status the test sets (``status[0]``)."""
    status = [503]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"ready\n" if status[0] == 200 else b"warming up\n"
            self.send_response(status[0])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/health/readiness", status
    finally:
        server.shutdown()
        server.server_close()


def started(tmp_path: Path, code: str) -> Component:
    component = Component("function-status", [sys.executable, "-c", code],
                          tmp_path / "function-status.log")
    component.start()
    return component


@pytest.mark.parametrize(("code", "answer", "timeout", "says"), [
    pytest.param(SLEEPS, 200, 10.0, None, id="ready"),
    pytest.param(SLEEPS, 503, 0.5, ["not ready after 0.5 s", "last answer: 503 warming up",
                                    "serving"], id="unready-named-with-its-answer-and-log"),
    pytest.param("print('cannot bind', flush=True); raise SystemExit(3)", 503, 30.0,
                 ["exited (3)", "cannot bind"], id="exited-named-at-once"),
])
def test_waiting_for_a_function(tmp_path: Path, probe: tuple[str, list[int]], code: str,
                                answer: int, timeout: float, says: list[str] | None) -> None:
    url, status = probe
    status[0] = answer
    component = started(tmp_path, code)
    try:
        if says is None:
            wait_ready(component, url, timeout)
            return
        with pytest.raises(TimeoutError) as raised:
            wait_ready(component, url, timeout)
        assert component.name in str(raised.value)
        for text in says:
            assert text in str(raised.value)
    finally:
        if component.process is not None:
            component.process.kill()
            component.process.wait()
