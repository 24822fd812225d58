"""The local kubelet's HTTP probe through a pod's Unix socket: what it sends (the probe's path,
headers and Host, as a kubelet sends them) and which answers pass."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from devstack.core import podspec
from devstack.sandbox import probe_once


@contextmanager
def pod_port(path: Path, answer: bytes | None) -> Iterator[list[bytes]]:
    """A server on the Unix socket ``path`` that reads one request and sends ``answer`` (or
    closes without one); yields the requests it read."""
    seen: list[bytes] = []
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            data = b""
            while b"\r\n\r\n" not in data:
                piece = connection.recv(4096)
                if not piece:
                    break
                data += piece
            seen.append(data)
            if answer is not None:
                connection.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        thread.join(5)
        listener.close()


PROBE = podspec.Probe(path="/healthz?full=1", port=8080, scheme="HTTP", timeout=2.0,
                      headers=(("X-Probe", "yes"),))


@pytest.mark.parametrize(("answer", "passes"), [
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", True, id="200"),
    pytest.param(b"HTTP/1.1 302 Found\r\nContent-Length: 0\r\n\r\n", True, id="302"),
    pytest.param(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n", False,
                 id="503"),
    pytest.param(b"SSH-2.0-not-http\r\n", False, id="not-http"),
    pytest.param(None, False, id="closed-without-an-answer"),
])
def test_a_probe_passes_on_200_to_399(tmp_path: Path, answer: bytes | None,
                                      passes: bool) -> None:
    with pod_port(tmp_path / "8080.sock", answer) as seen:
        assert probe_once(tmp_path / "8080.sock", PROBE, "10.0.0.7") is passes
    request = seen[0].decode("latin-1").split("\r\n")
    assert request[0] == "GET /healthz?full=1 HTTP/1.1"
    assert {"Host: 10.0.0.7:8080", "User-Agent: kube-probe/1.35", "X-Probe: yes"} <= set(request)


def test_a_probe_of_a_port_nothing_serves_fails(tmp_path: Path) -> None:
    assert probe_once(tmp_path / "missing.sock", PROBE, "10.0.0.7") is False
