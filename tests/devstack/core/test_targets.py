"""Where a request to the local forwarding proxy goes (``devstack.core.targets``)."""

from __future__ import annotations

import pytest

from devstack.core.targets import BadTarget, Target, host_header, request_target


@pytest.mark.parametrize(("method", "target", "host", "expected"), [
    pytest.param(b"CONNECT", b"broker-ingress.knative-eventing.svc:443", b"x",
                 Target("broker-ingress.knative-eventing.svc", 443, b""), id="connect"),
    pytest.param(b"CONNECT", b"[::1]:8443", None, Target("::1", 8443, b""),
                 id="connect-ipv6"),
    pytest.param(b"POST", b"http://odh-training-gc.opendatahub.svc.cluster.local/", None,
                 Target("odh-training-gc.opendatahub.svc.cluster.local", 80, b"/"),
                 id="absolute-default-port"),
    pytest.param(b"POST", b"http://broker-ingress.knative-eventing:8080/ns/b?x=1", None,
                 Target("broker-ingress.knative-eventing", 8080, b"/ns/b?x=1"),
                 id="absolute-with-port-and-query"),
    pytest.param(b"GET", b"http://a.b", None, Target("a.b", 80, b"/"),
                 id="absolute-without-path"),
    pytest.param(b"GET", b"/health", b"[::1]:9090", Target("::1", 9090, b"/health"),
                 id="origin-form-ipv6-host"),
])
def test_request_target(method: bytes, target: bytes, host: bytes | None,
                        expected: Target) -> None:
    assert request_target(method, target, host) == expected


@pytest.mark.parametrize(("method", "target", "host"), [
    pytest.param(b"GET", b"/x", None, id="origin-form-without-host"),
    pytest.param(b"GET", b"ftp://a/", None, id="unsupported-scheme"),
    pytest.param(b"GET", b"https://a/", None, id="absolute-https"),
    pytest.param(b"GET", b"http://a:port/", None, id="bad-port"),
    pytest.param(b"GET", b"http://user@a/", None, id="credentials"),
    pytest.param(b"CONNECT", b"a.b:443/path", None, id="connect-with-a-path"),
    pytest.param(b"GET", b"/", b":80", id="host-without-a-name"),
    pytest.param(b"GET", b"*", b"a", id="asterisk-form"),
])
def test_request_target_refused(method: bytes, target: bytes, host: bytes | None) -> None:
    with pytest.raises(BadTarget):
        request_target(method, target, host)


@pytest.mark.parametrize(("target", "expected"), [
    pytest.param(Target("a.ns", 80, b"/"), b"a.ns:80", id="name"),
    pytest.param(Target("::1", 9090, b"/"), b"[::1]:9090", id="ipv6"),
])
def test_host_header(target: Target, expected: bytes) -> None:
    assert host_header(target) == expected
