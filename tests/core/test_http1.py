from __future__ import annotations

import pytest

from functions.core import http1


def head(text: str) -> http1.Head:
    return http1.parse_head(text.replace("\n", "\r\n").encode("latin-1"))


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("CONNECT broker-ingress.knative-eventing.svc:443 HTTP/1.1\nHost: x",
                 http1.Target("broker-ingress.knative-eventing.svc", 443, ""), id="connect"),
    pytest.param("POST http://odh-training-gc.opendatahub.svc.cluster.local/ HTTP/1.1",
                 http1.Target("odh-training-gc.opendatahub.svc.cluster.local", 80, "/"),
                 id="absolute-default-port"),
    pytest.param("POST http://broker-ingress.knative-eventing:8080/ns/b?x=1 HTTP/1.1",
                 http1.Target("broker-ingress.knative-eventing", 8080, "/ns/b?x=1"),
                 id="absolute-with-port-and-query"),
    pytest.param("GET http://a.b HTTP/1.1", http1.Target("a.b", 80, "/"),
                 id="absolute-without-path"),
    pytest.param("GET /health HTTP/1.1\nHost: [::1]:9090",
                 http1.Target("::1", 9090, "/health"), id="origin-form-ipv6-host"),
])
def test_request_target(text: str, expected: http1.Target) -> None:
    assert http1.request_target(head(text)) == expected


@pytest.mark.parametrize("text", [
    pytest.param("GET /x HTTP/1.1", id="origin-form-without-host"),
    pytest.param("GET ftp://a/ HTTP/1.1", id="unsupported-scheme"),
    pytest.param("GET http://a:port/ HTTP/1.1", id="bad-port"),
])
def test_request_target_refused(text: str) -> None:
    with pytest.raises(http1.BadMessage):
        http1.request_target(head(text))


@pytest.mark.parametrize("raw", [
    pytest.param(b"GARBAGE", id="one-word-start-line"),
    pytest.param(b"GET / HTTP/1.1\r\nno colon here", id="header-without-colon"),
    pytest.param(b"GET / HTTP/1.1\r\n Folded: value", id="obsolete-line-folding"),
])
def test_parse_head_refuses(raw: bytes) -> None:
    with pytest.raises(http1.BadMessage):
        http1.parse_head(raw)


def test_upstream_request_is_origin_form_without_proxy_headers() -> None:
    request = head("POST http://gc.opendatahub.svc:80/p HTTP/1.1\nHost: gc.opendatahub.svc\n"
                   "Proxy-Authorization: secret\nCe-Id: 1")
    sent = http1.upstream_request(request, http1.request_target(request))
    assert sent == (b"POST /p HTTP/1.1\r\nHost: gc.opendatahub.svc\r\nCe-Id: 1\r\n\r\n")


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("POST / HTTP/1.1\nContent-Length: 12", http1.Framing("length", 12),
                 id="length"),
    pytest.param("POST / HTTP/1.1\nContent-Length: 0", http1.Framing("none"), id="empty"),
    pytest.param("POST / HTTP/1.1\nTransfer-Encoding: gzip, chunked\nContent-Length: 5",
                 http1.Framing("chunked"), id="chunked-wins-over-length"),
    pytest.param("GET / HTTP/1.1", http1.Framing("none"), id="no-body"),
])
def test_request_framing(text: str, expected: http1.Framing) -> None:
    assert http1.request_framing(head(text)) == expected


@pytest.mark.parametrize(("text", "method", "expected"), [
    pytest.param("HTTP/1.1 202 Accepted\nContent-Length: 3", "POST",
                 http1.Framing("length", 3), id="length"),
    pytest.param("HTTP/1.1 200 OK\nContent-Length: 3", "HEAD", http1.Framing("none"),
                 id="head-request"),
    pytest.param("HTTP/1.1 204 No Content", "POST", http1.Framing("none"), id="204"),
    pytest.param("HTTP/1.1 100 Continue", "POST", http1.Framing("none"), id="interim"),
    pytest.param("HTTP/1.1 200 OK\nTransfer-Encoding: chunked", "GET",
                 http1.Framing("chunked"), id="chunked"),
    pytest.param("HTTP/1.0 200 OK", "GET", http1.Framing("close"), id="until-close"),
])
def test_response_framing(text: str, method: str, expected: http1.Framing) -> None:
    assert http1.response_framing(head(text), method) == expected


@pytest.mark.parametrize(("text", "version", "expected"), [
    pytest.param("HTTP/1.1 200 OK", "HTTP/1.1", True, id="http11-default"),
    pytest.param("HTTP/1.1 200 OK\nConnection: close", "HTTP/1.1", False, id="close"),
    pytest.param("HTTP/1.0 200 OK", "HTTP/1.0", False, id="http10-default"),
    pytest.param("HTTP/1.0 200 OK\nConnection: Keep-Alive", "HTTP/1.0", True,
                 id="http10-keep-alive"),
])
def test_keeps_alive(text: str, version: str, expected: bool) -> None:
    assert http1.keeps_alive(head(text), version) is expected


@pytest.mark.parametrize(("line", "size"), [
    pytest.param(b"1a\r\n", 26, id="hex"),
    pytest.param(b"0;ext=1\r\n", 0, id="last-with-extension"),
])
def test_chunk_size(line: bytes, size: int) -> None:
    assert http1.chunk_size(line) == size


def test_chunk_size_refuses_garbage() -> None:
    with pytest.raises(http1.BadMessage):
        http1.chunk_size(b"zz\r\n")


def test_status_response_is_a_complete_message() -> None:
    raw = http1.status_response(502, "Bad Gateway", "no route")
    head_bytes, _, body = raw.partition(b"\r\n\r\n")
    parsed = http1.parse_head(head_bytes)
    assert (parsed.second, body) == ("502", b"no route\n")
    assert parsed.get("content-length") == str(len(body))
