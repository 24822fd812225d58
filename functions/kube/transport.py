"""HTTP transports for :class:`functions.kube.client.KubeClient`.

A transport sends one request and returns one response; it knows nothing of Kubernetes
semantics. The default speaks HTTPS with ``urllib3`` (already a dependency of the official
client) using a :class:`~functions.kube.config.ClusterConfig`. Tests and benchmarks wrap it to
count or perturb traffic.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlencode

import urllib3

from functions.kube.config import ClusterConfig


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: Mapping[str, str] = field(default_factory=dict)
    body: bytes | None = None
    content_type: str | None = None

    def url_path(self) -> str:
        return f"{self.path}?{urlencode(self.query)}" if self.query else self.path


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: Mapping[str, str]
    body: bytes


class TransportError(Exception):
    """The request did not produce an HTTP response (connection refused, reset, timeout)."""


class Transport(Protocol):
    def send(self, request: Request, timeout: float) -> Response: ...

    def refresh_credentials(self) -> None: ...


class Urllib3Transport:
    """HTTPS to one API server with a pooled, thread-safe urllib3 manager."""

    def __init__(self, config: ClusterConfig, pool_size: int = 16) -> None:
        self.config = config
        self._token_lock = threading.Lock()
        self._token = config.bearer_token()
        kwargs: dict[str, object] = {"maxsize": pool_size, "block": False, "retries": False}
        if config.insecure:
            kwargs["cert_reqs"] = "CERT_NONE"
        else:
            kwargs["cert_reqs"] = "CERT_REQUIRED"
            if config.ca_file:
                kwargs["ca_certs"] = config.ca_file
        if config.client_cert_file:
            kwargs["cert_file"] = config.client_cert_file
            kwargs["key_file"] = config.client_key_file
        self._pool = urllib3.PoolManager(**kwargs)  # type: ignore[arg-type]

    def refresh_credentials(self) -> None:
        """Re-read a rotating service-account token (called after a 401)."""
        with self._token_lock:
            self._token = self.config.bearer_token()

    def send(self, request: Request, timeout: float) -> Response:
        headers = {"Accept": "application/json"}
        if request.content_type:
            headers["Content-Type"] = request.content_type
        token = self._token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            raw = self._pool.request(
                request.method,
                self.config.server + request.url_path(),
                body=request.body,
                headers=headers,
                timeout=urllib3.Timeout(connect=min(timeout, 5.0), read=timeout),
                redirect=False,
                preload_content=True,
            )
        except urllib3.exceptions.HTTPError as exc:
            raise TransportError(f"{request.method} {request.path}: {exc}") from exc
        return Response(raw.status, dict(raw.headers), raw.data)

    def stream(self, request: Request, timeout: float) -> tuple[int, Mapping[str, str],
                                                                 urllib3.BaseHTTPResponse]:
        """Send ``request`` and return the response unread, for bodies that keep coming
        (``follow`` logs). The caller reads it with ``stream()`` and must ``release_conn()``."""
        headers = {"Accept": "*/*"}
        token = self._token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            raw = self._pool.request(
                request.method, self.config.server + request.url_path(), headers=headers,
                timeout=urllib3.Timeout(connect=min(timeout, 5.0), read=timeout),
                redirect=False, preload_content=False)
        except urllib3.exceptions.HTTPError as exc:
            raise TransportError(f"{request.method} {request.path}: {exc}") from exc
        return raw.status, dict(raw.headers), raw
