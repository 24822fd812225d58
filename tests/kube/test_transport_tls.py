"""The API transport's TLS settings from a :class:`ClusterConfig` against a local TLS server:
the CA it verifies the server with, the client certificate it shows, the server's name
checked, and ``insecure`` verifying nothing."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from devstack.cluster.pki import CertificateAuthority
from functions.kube.config import ClusterConfig
from functions.kube.transport import HttpTransport, Request, TransportError


@contextmanager
def tls_server(directory: Path, host: str) -> Iterator[tuple[int, CertificateAuthority]]:
    """A TLS server on ``host`` (its certificate names 127.0.0.1 and localhost) answering
    each request with the common name of the client's certificate, or ``anonymous``."""
    authority = CertificateAuthority(directory)
    served = authority.issue("server", "server", server=True)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=authority.files.cert)
    context.load_cert_chain(served.cert, served.key)
    context.verify_mode = ssl.CERT_OPTIONAL
    listener = socket.create_server((host, 0))

    def serve(conn: socket.socket) -> None:
        with suppress(OSError), context.wrap_socket(conn, server_side=True) as tls:
            subject: Any = (tls.getpeercert() or {}).get("subject", ())
            name = next((value for rdn in subject for key, value in rdn
                         if key == "commonName"), "anonymous").encode()
            data = b""
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = tls.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                data = data.split(b"\r\n\r\n", 1)[1]
                tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
                            % (len(name), name))

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1], authority
    finally:
        with suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()


@pytest.mark.parametrize(("host", "trust", "client_cert", "insecure", "answer"), [
    pytest.param("127.0.0.1", True, True, False, b"odh-client", id="ca-and-client-cert"),
    pytest.param("127.0.0.1", True, False, False, b"anonymous", id="ca-alone"),
    pytest.param("127.0.0.1", False, False, False, None, id="unknown-ca-refused"),
    pytest.param("127.0.0.2", True, False, False, None, id="another-name-refused"),
    pytest.param("127.0.0.2", False, True, True, b"odh-client", id="insecure-verifies-nothing"),
])
def test_tls_settings_come_from_the_config(tmp_path: Path, host: str, trust: bool,
                                           client_cert: bool, insecure: bool,
                                           answer: bytes | None) -> None:
    with tls_server(tmp_path, host) as (port, authority):
        client = authority.issue("client", "odh-client") if client_cert else None
        transport = HttpTransport(ClusterConfig(
            server=f"https://{host}:{port}",
            ca_file=str(authority.files.cert) if trust else None,
            client_cert_file=str(client.cert) if client else None,
            client_key_file=str(client.key) if client else None, insecure=insecure))
        try:
            if answer is None:
                with pytest.raises(TransportError, match=r"CERTIFICATE_VERIFY_FAILED|match"):
                    transport.send(Request("GET", "/x"), 5)
            else:
                for _ in range(2):
                    assert transport.send(Request("GET", "/x"), 5).body == answer
        finally:
            transport.close()
