"""The parts of HTTP/1.1 that the local forwarding proxy (:mod:`functions.dev.proxy`) and the
blocking client connection (:mod:`functions.kube.wire`) need, as pure functions: message heads,
where a body ends (RFC 9112 section 6.3), and the request line a proxy sends on (origin
form)."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_HEAD = 65536
# Headers meant for the proxy itself, never passed on.
HOP_BY_HOP = frozenset({"proxy-connection", "proxy-authorization", "proxy-authenticate"})


class BadMessage(ValueError):
    """Not a well-formed HTTP/1.1 message head."""


@dataclass(frozen=True)
class Head:
    """A request or response head: its start line's three parts and its headers in order."""

    first: str
    second: str
    third: str
    headers: list[tuple[str, str]] = field(default_factory=list)

    def get(self, name: str) -> str | None:
        lowered = name.lower()
        return next((v for k, v in self.headers if k.lower() == lowered), None)


def parse_head(data: bytes) -> Head:
    """Parse everything up to (not including) the blank line."""
    try:
        text = data.decode("latin-1")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes any byte
        raise BadMessage(str(exc)) from exc
    lines = text.split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2:
        raise BadMessage(f"bad start line {lines[0]!r}")
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadMessage(f"bad header line {line!r}")
        headers.append((name, value.strip()))
    return Head(parts[0], parts[1], parts[2] if len(parts) > 2 else "", headers)


@dataclass(frozen=True)
class Target:
    """Where a proxied request goes and what the upstream is sent as its request target."""

    host: str
    port: int
    path: str


def request_target(head: Head) -> Target:
    """The destination of a request to a proxy: ``CONNECT host:port``, an absolute
    ``http://host[:port]/path``, or (origin form) the ``Host`` header."""
    method, target = head.first, head.second
    if method == "CONNECT":
        host, port = split_host_port(target, 443)
        return Target(host, port, "")
    if target.startswith("http://"):
        authority, slash, rest = target[len("http://"):].partition("/")
        host, port = split_host_port(authority, 80)
        return Target(host, port, slash + rest if slash else "/")
    if target.startswith("/"):
        host_header = head.get("Host")
        if not host_header:
            raise BadMessage("an origin-form request without Host")
        host, port = split_host_port(host_header, 80)
        return Target(host, port, target)
    raise BadMessage(f"unsupported request target {target!r}")


def split_host_port(authority: str, default: int) -> tuple[str, int]:
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = authority.partition(":")
    if port and not port.isdigit():
        raise BadMessage(f"bad port in {authority!r}")
    return host, int(port) if port else default


def upstream_request(head: Head, target: Target) -> bytes:
    """The head sent on: origin-form target, proxy headers dropped, ``Host`` kept."""
    lines = [f"{head.first} {target.path} {head.third}"]
    lines += [f"{k}: {v}" for k, v in head.headers if k.lower() not in HOP_BY_HOP]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def serialize(head: Head) -> bytes:
    lines = [" ".join(p for p in (head.first, head.second, head.third) if p)]
    lines += [f"{k}: {v}" for k, v in head.headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


@dataclass(frozen=True)
class Framing:
    """How a body is delimited: ``none``, ``length`` (``size`` bytes), ``chunked``, or
    ``close`` (until the connection ends)."""

    kind: str
    size: int = 0


def request_framing(head: Head) -> Framing:
    if _chunked(head):
        return Framing("chunked")
    return _length(head) or Framing("none")


def response_framing(head: Head, request_method: str) -> Framing:
    status = int(head.second) if head.second.isdigit() else 0
    if request_method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return Framing("none")
    if _chunked(head):
        return Framing("chunked")
    return _length(head) or Framing("close")


def keeps_alive(head: Head, http_version: str) -> bool:
    """Whether the connection stays open after this message."""
    tokens = {t.strip().lower() for t in (head.get("Connection") or "").split(",")}
    if "close" in tokens:
        return False
    return http_version == "HTTP/1.1" or "keep-alive" in tokens


def _chunked(head: Head) -> bool:
    encoding = (head.get("Transfer-Encoding") or "").lower()
    return encoding.split(",")[-1].strip() == "chunked"


def _length(head: Head) -> Framing | None:
    value = head.get("Content-Length")
    if value is None:
        return None
    text = value.strip()
    if not (text.isascii() and text.isdigit()):
        raise BadMessage(f"bad Content-Length {value!r}")
    size = int(text)
    return Framing("length", size) if size else Framing("none")


def chunk_size(line: bytes) -> int:
    """The size in a chunk-size line (extensions ignored)."""
    text = line.split(b";", 1)[0].strip()
    try:
        return int(text, 16)
    except ValueError as exc:
        raise BadMessage(f"bad chunk size {line!r}") from exc


def status_response(status: int, reason: str, detail: str) -> bytes:
    """A short plain-text answer from the proxy itself (e.g. 502 when nothing answers)."""
    body = (detail + "\n").encode("utf-8", "replace")
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode("latin-1") + body
