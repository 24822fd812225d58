"""The forwarding proxy's HTTP framing (``devstack.proxy``, on h11), over real loopback
sockets: malformed requests answered 4xx and closed, bodies relayed in every framing, a
backend's answer that is not HTTP a 502, tunnels and protocol switches joined with the bytes
sent early, and a pooled backend connection never carrying a stale answer to the next
request."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from devstack.proxy import REPLAYABLE_BODY
from tests.devstack.test_proxy import Server, ask, client, serving

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Raw"], Awaitable[None]]


@dataclass
class Raw:
    """A backend answering each connection with ``script``; records what it read."""

    name: str
    script: Handler
    port: int = 0
    accepted: int = 0
    read: list[bytes] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            await self.script(reader, writer, self)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """A request head and its body (by Content-Length, or chunked to its last chunk)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lowered = head.lower()
    if b"transfer-encoding: chunked" in lowered:  # to the last chunk, then to the empty line
        body = await reader.readuntil(b"\r\n0\r\n")
        while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
            body += line
        return head + body + line
    size = next((int(line.split(b":", 1)[1]) for line in lowered.split(b"\r\n")
                 if line.startswith(b"content-length:")), 0)
    return head + await reader.readexactly(size)


def answering(*answers: bytes) -> Handler:
    """Read each request and write the next answer; then close."""
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     server: Raw) -> None:
        for answer in answers:
            server.read.append(await read_request(reader))
            writer.write(answer)
            await writer.drain()
        await reader.read()  # until the proxy closes
    return script


async def exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` on a new client connection; everything read until the proxy closes."""
    reader, writer = await client(port)
    writer.write(data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@pytest.mark.parametrize(("request_bytes", "status"), [
    pytest.param(b"POST http://a.ns/ HTTP/1.1\r\nHost: a.ns\r\nContent-Length: -1\r\n\r\n",
                 400, id="negative-content-length"),
    pytest.param(b"POST http://a.ns/ HTTP/1.1\r\nHost: a.ns\r\nContent-Length: 3\r\n"
                 b"Content-Length: 5\r\n\r\nabcde", 400, id="conflicting-content-lengths"),
    pytest.param(b"POST http://a.ns/ HTTP/1.1\r\nHost: a.ns\r\nTransfer-Encoding: chunked\r\n"
                 b"\r\nzz\r\n", 400, id="chunk-size-not-hex"),
    pytest.param(b"GET http://a.ns/ HTTP/1.1\r\nHost: a.ns\r\nno colon here\r\n\r\n", 400,
                 id="header-line-without-a-colon"),
    pytest.param(b"GET http://a.ns/ HTTP/1.1\r\nHost: a.ns\r\nX-Big: " + b"x" * 200000
                 + b"\r\n\r\n", 431, id="head-over-the-limit"),
    pytest.param(b"GET foo HTTP/1.1\r\nHost: a.ns\r\n\r\n", 400, id="target-of-no-form"),
    pytest.param(b"GET https://a.ns/ HTTP/1.1\r\nHost: a.ns\r\n\r\n", 400,
                 id="absolute-https-target"),
    pytest.param(b"GET / HTTP/1.1\r\nHost: a.ns:http\r\n\r\n", 400, id="host-with-a-bad-port"),
    pytest.param(b"GET / HTTP/1.1\r\n\r\n", 400, id="origin-form-without-host"),
    pytest.param(b"SSH-2.0-OpenSSH_9.6\r\n\r\n", 400, id="not-http"),
])
def test_a_malformed_request_is_answered_4xx_and_closed(request_bytes: bytes,
                                                        status: int) -> None:
    async def scenario() -> None:
        backend = Raw("a", answering(OK))
        async with serving(backend) as (port, _):  # type: ignore[arg-type]
            answer = await exchange(port, request_bytes)
        assert answer.startswith(b"HTTP/1.1 %d " % status)
        assert b"connection: close" in answer.lower()
        assert backend.read == []
    asyncio.run(scenario())


@pytest.mark.parametrize("body_request", [
    pytest.param(b"POST http://a.ns/up HTTP/1.1\r\nHost: a.ns\r\nTransfer-Encoding: chunked\r\n"
                 b"\r\n5\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n", id="chunked"),
    pytest.param(b"POST http://a.ns/up HTTP/1.1\r\nHost: a.ns\r\nContent-Length: %d\r\n\r\n"
                 % (REPLAYABLE_BODY + 5) + b"h" * (REPLAYABLE_BODY + 5), id="over-the-replay-size"),
])
def test_a_request_body_is_relayed_in_its_framing(body_request: bytes) -> None:
    async def scenario() -> None:
        backend = Raw("a", answering(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                     b"3\r\nbig\r\n4\r\n one\r\n0\r\n\r\n"))
        async with serving(backend) as (port, _):  # type: ignore[arg-type]
            reader, writer = await client(port)
            writer.write(body_request)
            head = await reader.readuntil(b"\r\n\r\n")
            rest = await reader.readuntil(b"0\r\n\r\n")
            writer.close()
        assert head.startswith(b"HTTP/1.1 200 ")
        assert b"transfer-encoding: chunked" in head.lower()
        assert rest == b"3\r\nbig\r\n4\r\n one\r\n0\r\n\r\n"
        sent_body = body_request.split(b"\r\n\r\n", 1)[1]
        assert backend.read[0].split(b"\r\n\r\n", 1)[1] == sent_body
        assert backend.read[0].startswith(b"POST /up HTTP/1.1\r\n")
    asyncio.run(scenario())


@pytest.mark.parametrize(("backend_answer", "relayed"), [
    pytest.param(b"SSH-2.0-OpenSSH_9.6\r\n\r\n", None, id="not-http"),
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\nabc",
                 None, id="conflicting-content-lengths"),
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nabc", None,
                 id="negative-content-length"),
    pytest.param(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                 b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                 id="chunk-size-not-hex-after-the-head"),
])
def test_a_backend_answer_that_is_not_http_is_a_502(backend_answer: bytes,
                                                    relayed: bytes | None) -> None:
    """A 502 while nothing of the answer has been relayed; after its head, the client's
    connection ends with the body unfinished (its last chunk never comes)."""
    async def scenario() -> None:
        backend = Raw("a", answering(backend_answer))
        async with serving(backend) as (port, _):  # type: ignore[arg-type]
            answer = await exchange(port, b"GET http://a.ns/ HTTP/1.1\r\nHost: a.ns\r\n\r\n")
        if relayed is None:
            assert answer.startswith(b"HTTP/1.1 502 ")
        else:
            assert answer == relayed
    asyncio.run(scenario())


def test_a_backend_closing_mid_body_ends_the_client_connection() -> None:
    async def scenario() -> None:
        cut = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"

        async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         server: Raw) -> None:
            server.read.append(await read_request(reader))
            writer.write(cut)
            await writer.drain()

        async with serving(Raw("a", script)) as (port, _):  # type: ignore[arg-type]
            answer = await exchange(port, b"GET http://a.ns/ HTTP/1.1\r\nHost: a.ns\r\n\r\n")
        assert answer == cut  # and then the end: nothing pretends the body was whole
    asyncio.run(scenario())


def test_a_stale_answer_on_a_pooled_connection_never_answers_the_next_request() -> None:
    """The backend answers its first request twice: the connection holding the second
    answer is not pooled, or not reused, and the next request gets its own answer."""
    async def scenario() -> None:
        async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         server: Raw) -> None:
            while True:
                server.read.append(await read_request(reader))
                number = len(server.read)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n%d" % number)
                if number == 1:
                    await asyncio.sleep(0.05)
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale")
                await writer.drain()

        async with serving(Raw("a", script)) as (port, _):  # type: ignore[arg-type]
            reader, writer = await client(port)
            assert await ask(reader, writer, "a.ns", b"") == (200, b"1")
            await asyncio.sleep(0.2)  # the stale answer has reached the proxy
            assert await ask(reader, writer, "a.ns", b"") == (200, b"2")
            writer.close()
    asyncio.run(scenario())


def test_head_an_http_10_client_and_expect_100_continue() -> None:
    async def scenario() -> None:
        backend = Raw("a", answering(
            b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok"))
        async with serving(backend) as (port, _):  # type: ignore[arg-type]
            reader, writer = await client(port)
            writer.write(b"HEAD http://a.ns/ HTTP/1.1\r\nHost: a.ns\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 ") and b"content-length: 99" in head.lower()
            writer.write(b"GET http://a.ns/old HTTP/1.0\r\n\r\n")
            old = await reader.readuntil(b"ok")
            assert old.startswith(b"HTTP/1.1 200 ")
            writer.close()
            reader, writer = await client(port)
            writer.write(b"POST http://a.ns/ HTTP/1.1\r\nHost: a.ns\r\nExpect: 100-continue\r\n"
                         b"Content-Length: 4\r\n\r\n")
            assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 \r\n\r\n"
            writer.write(b"body")
            assert (await reader.readuntil(b"ok")).startswith(b"HTTP/1.1 201 ")
            writer.close()
        assert backend.read[1].startswith(b"GET /old HTTP/1.1\r\nhost: a.ns:80\r\n")
        assert b"expect" not in backend.read[2].lower()
        assert backend.read[2].endswith(b"\r\n\r\nbody")
    asyncio.run(scenario())


async def echo_after(head: bytes, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
    """Write ``head``, then echo every byte until the end."""
    writer.write(head)
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()


def test_a_tunnel_carries_the_bytes_sent_with_its_request() -> None:
    async def scenario() -> None:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       _: Raw) -> None:
            await echo_after(b"", reader, writer)

        async with serving(Raw("a", echo)) as (port, _):  # type: ignore[arg-type]
            reader, writer = await client(port)
            writer.write(b"CONNECT a.ns:80 HTTP/1.1\r\nHost: a.ns:80\r\n\r\nearly")
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 ")
            assert await reader.readexactly(5) == b"early"
            writer.write(b"later")
            assert await reader.readexactly(5) == b"later"
            writer.close()
    asyncio.run(scenario())


def test_a_switch_of_protocol_joins_both_sides() -> None:
    async def scenario() -> None:
        async def upgrade(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          server: Raw) -> None:
            server.read.append(await read_request(reader))
            await echo_after(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\n"
                             b"Connection: upgrade\r\n\r\nhello", reader, writer)

        async with serving(Raw("a", upgrade)) as (port, _):  # type: ignore[arg-type]
            reader, writer = await client(port)
            writer.write(b"GET http://a.ns/ HTTP/1.1\r\nHost: a.ns\r\nConnection: upgrade\r\n"
                         b"Upgrade: echo\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 101 ")
            assert await reader.readexactly(5) == b"hello"
            writer.write(b"again")
            assert await reader.readexactly(5) == b"again"
            writer.close()
    asyncio.run(scenario())


def test_plain_servers_still_answer_beside_raw_ones() -> None:
    async def scenario() -> None:
        async with serving(Server("b")) as (port, _):
            reader, writer = await client(port)
            assert await ask(reader, writer, "b.ns", b"x") == (200, b"b x")
            writer.close()
    asyncio.run(scenario())
