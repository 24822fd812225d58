"""Where a request to the local forwarding proxy (:mod:`devstack.proxy`) goes, as pure
functions of its request line and ``Host`` header: ``CONNECT host:port``, an absolute
``http://host[:port]/path``, or (origin form) the ``Host`` header, and the request target the
backend is sent (origin form)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit


class BadTarget(ValueError):
    """A request target the proxy cannot send on."""


@dataclass(frozen=True)
class Target:
    """Where a proxied request goes and what the backend is sent as its request target."""

    host: str
    port: int
    path: bytes


def request_target(method: bytes, target: bytes, host: bytes | None) -> Target:
    """The destination of a request to a proxy, from its method, its request target and its
    ``Host`` header (``None`` when it has none). Both are visible ASCII, as h11 admits them."""
    text = target.decode("ascii")
    if method == b"CONNECT":
        name, port = authority(text, 443)
        return Target(name, port, b"")
    if text.startswith("http://"):
        parts = urlsplit(text)
        name, port = authority(parts.netloc, 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return Target(name, port, path.encode("ascii"))
    if text.startswith("/"):
        if not host:
            raise BadTarget("an origin-form request without Host")
        name, port = authority(host.decode("ascii"), 80)
        return Target(name, port, target)
    raise BadTarget(f"unsupported request target {text!r}")


def authority(text: str, default_port: int) -> tuple[str, int]:
    """``host[:port]`` (an IPv6 host in brackets) as a host and a port."""
    parts = urlsplit("//" + text)
    try:
        port = parts.port
    except ValueError as exc:
        raise BadTarget(f"bad port in {text!r}") from exc
    if not parts.hostname or parts.path or parts.query or parts.username is not None:
        raise BadTarget(f"bad authority {text!r}")
    return parts.hostname, port or default_port


def host_header(target: Target) -> bytes:
    """The ``Host`` of a request sent to ``target`` (for a client that sent none)."""
    name = f"[{target.host}]" if ":" in target.host else target.host
    return f"{name}:{target.port}".encode("ascii")
