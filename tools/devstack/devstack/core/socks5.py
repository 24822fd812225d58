"""The parts of SOCKS5 (RFC 1928) the local pods' proxy needs, as pure functions: the method
negotiation (no authentication only), a ``CONNECT`` request and the server's replies.

A Go client whose ``HTTP_PROXY`` is a ``socks5://`` URL opens one connection through the proxy
per destination, sends the destination's name (never resolving it itself), and then speaks
plain HTTP on it, keeping it alive as it would a direct connection. A proxy that only joins
the two ends therefore never reads a request: what kube-proxy does in a cluster, one
connection at a time.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

VERSION = 5
NO_AUTHENTICATION = 0
NO_ACCEPTABLE_METHOD = 0xFF
CONNECT = 1
IPV4 = 1
DOMAIN_NAME = 3
IPV6 = 4

# Reply codes (RFC 1928 section 6).
SUCCEEDED = 0
GENERAL_FAILURE = 1
HOST_UNREACHABLE = 4
CONNECTION_REFUSED = 5
COMMAND_NOT_SUPPORTED = 7
ADDRESS_TYPE_NOT_SUPPORTED = 8

# The version, command, reserved and address type bytes that start a request.
REQUEST_START = 4


class Refused(ValueError):
    """A greeting or request the proxy does not serve; ``answer`` is what it sends back
    before closing the connection (empty when the peer does not speak SOCKS5 at all)."""

    def __init__(self, reason: str, answer: bytes = b"") -> None:
        super().__init__(reason)
        self.answer = answer


@dataclass(frozen=True)
class Destination:
    host: str
    port: int


def method_answer(version: int, methods: bytes) -> bytes:
    """The answer to a greeting (``version`` and the ``methods`` it offers): no
    authentication, the one method served."""
    if version != VERSION:
        raise Refused(f"not SOCKS5 (version {version})")
    if NO_AUTHENTICATION not in methods:
        raise Refused("no acceptable authentication method",
                      bytes((VERSION, NO_ACCEPTABLE_METHOD)))
    return bytes((VERSION, NO_AUTHENTICATION))


def address_size(start: bytes, first: int) -> int:
    """How many bytes of a request follow its start and the address's ``first`` byte: the
    rest of the address and the port."""
    check_start(start)
    address_type = start[3]
    if address_type == IPV4:
        return 4 - 1 + 2
    if address_type == IPV6:
        return 16 - 1 + 2
    return first + 2


def check_start(start: bytes) -> None:
    """Refuse a request whose first :data:`REQUEST_START` bytes ask for anything but a
    ``CONNECT`` to an address of a known type."""
    version, command, _, address_type = start
    if version != VERSION:
        raise Refused(f"not SOCKS5 (version {version})")
    if command != CONNECT:
        raise Refused(f"command {command} is not served", answer(COMMAND_NOT_SUPPORTED))
    if address_type not in (IPV4, DOMAIN_NAME, IPV6):
        raise Refused(f"address type {address_type} is not served",
                      answer(ADDRESS_TYPE_NOT_SUPPORTED))


def destination(start: bytes, address: bytes) -> Destination:
    """The destination of a request: its start, then the whole address and the port."""
    check_start(start)
    address_type = start[3]
    raw, port = address[:-2], int.from_bytes(address[-2:], "big")
    if address_type == DOMAIN_NAME:
        name = raw[1:1 + raw[0]] if raw else b""
        if not name or len(name) != raw[0]:
            raise Refused("an empty or truncated domain name", answer(GENERAL_FAILURE))
        return Destination(name.decode("ascii", "replace"), port)
    return Destination(str(ipaddress.ip_address(raw)), port)


def answer(code: int) -> bytes:
    """A reply with ``code`` and an unspecified bound address (``0.0.0.0:0``): the clients
    here connect through the proxy and never use it."""
    return bytes((VERSION, code, 0, IPV4, 0, 0, 0, 0, 0, 0))
