from __future__ import annotations

import pytest

from devstack.core import socks5


def request(address_type: int, address: bytes, port: int, command: int = socks5.CONNECT,
            version: int = socks5.VERSION) -> tuple[bytes, bytes]:
    """A request's start and its address with the port, as a client sends them."""
    return bytes((version, command, 0, address_type)), address + port.to_bytes(2, "big")


@pytest.mark.parametrize(("start", "address", "expected"), [
    pytest.param(*request(socks5.DOMAIN_NAME, b"\x1ebroker-filter.knative-eventing", 80),
                 socks5.Destination("broker-filter.knative-eventing", 80), id="domain-name"),
    pytest.param(*request(socks5.IPV4, bytes((10, 96, 0, 7)), 8080),
                 socks5.Destination("10.96.0.7", 8080), id="ipv4"),
    pytest.param(*request(socks5.IPV6, bytes(15) + b"\x01", 443),
                 socks5.Destination("::1", 443), id="ipv6"),
])
def test_destination(start: bytes, address: bytes, expected: socks5.Destination) -> None:
    assert socks5.address_size(start, address[0]) == len(address) - 1
    assert socks5.destination(start, address) == expected


@pytest.mark.parametrize(("start", "address", "answer"), [
    pytest.param(*request(socks5.DOMAIN_NAME, b"\x01a", 80, command=2),
                 socks5.answer(socks5.COMMAND_NOT_SUPPORTED), id="bind-command"),
    pytest.param(*request(2, b"\x01a", 80), socks5.answer(socks5.ADDRESS_TYPE_NOT_SUPPORTED),
                 id="unknown-address-type"),
    pytest.param(*request(socks5.DOMAIN_NAME, b"\x00", 80),
                 socks5.answer(socks5.GENERAL_FAILURE), id="empty-domain-name"),
    pytest.param(*request(socks5.DOMAIN_NAME, b"\x05ab", 80),
                 socks5.answer(socks5.GENERAL_FAILURE), id="truncated-domain-name"),
    pytest.param(*request(socks5.DOMAIN_NAME, b"\x01a", 80, version=4), b"",
                 id="socks4-request"),
])
def test_refused_requests(start: bytes, address: bytes, answer: bytes) -> None:
    with pytest.raises(socks5.Refused) as refused:
        socks5.destination(start, address)
    assert refused.value.answer == answer


@pytest.mark.parametrize(("version", "methods", "expected"), [
    pytest.param(5, b"\x00", b"\x05\x00", id="no-authentication"),
    pytest.param(5, b"\x02\x00", b"\x05\x00", id="no-authentication-among-others"),
])
def test_method_answer(version: int, methods: bytes, expected: bytes) -> None:
    assert socks5.method_answer(version, methods) == expected


@pytest.mark.parametrize(("version", "methods", "answer"), [
    pytest.param(5, b"\x02", b"\x05\xff", id="password-only"),
    pytest.param(5, b"", b"\x05\xff", id="no-method"),
    pytest.param(4, b"\x00", b"", id="socks4"),
])
def test_method_refused(version: int, methods: bytes, answer: bytes) -> None:
    with pytest.raises(socks5.Refused) as refused:
        socks5.method_answer(version, methods)
    assert refused.value.answer == answer


def test_answer_is_a_reply_with_an_unspecified_ipv4_address() -> None:
    assert socks5.answer(socks5.HOST_UNREACHABLE) == b"\x05\x04\x00\x01" + bytes(6)
