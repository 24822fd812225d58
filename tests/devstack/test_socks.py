"""The local pods' SOCKS5 proxy (``devstack.socks``), over real loopback sockets: a
connection per destination, joined to the backend the routes pick and kept alive; an unknown
name, a refused backend and a request it does not serve each get their reply code."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from devstack.core import socks5
from devstack.core.routes import Backend, NoRoute
from devstack.socks import Socks
from tests.devstack.test_proxy import Server


@asynccontextmanager
async def serving(routes: dict[str, int]) -> AsyncIterator[int]:
    """A SOCKS5 proxy routing ``<name>:80`` to the port in ``routes``; yields its port."""
    def pick(host: str, port: int) -> Backend:
        if host not in routes or port != 80:
            raise NoRoute(f"no Service {host}")
        return Backend(host="127.0.0.1", port=routes[host])

    socks = Socks(pick)
    front = await asyncio.start_server(socks.handle, "127.0.0.1", 0)
    try:
        yield front.sockets[0].getsockname()[1]
    finally:
        front.close()


async def connect(port: int, host: str, *, methods: bytes = b"\x00", command: int = 1,
                  ) -> tuple[bytes, asyncio.StreamReader, asyncio.StreamWriter]:
    """Open a connection through the proxy as Go's SOCKS dialer does; the reply to the
    request (or to the greeting, when that was refused) and the streams."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(bytes((5, len(methods))) + methods)
    chosen = await reader.readexactly(2)
    if chosen != b"\x05\x00":
        return chosen, reader, writer
    name = host.encode()
    writer.write(bytes((5, command, 0, 3, len(name))) + name + (80).to_bytes(2, "big"))
    reply = await reader.read(10)
    return reply, reader, writer


async def ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
              body: bytes) -> bytes:
    writer.write(f"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                 + body)
    head = await reader.readuntil(b"\r\n\r\n")
    size = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:"))
    return await reader.readexactly(size)


def test_a_connection_is_joined_to_its_backend_and_kept_alive() -> None:
    async def scenario() -> None:
        a, b = Server("a"), Server("b")
        servers = [await asyncio.start_server(s.handle, "127.0.0.1", 0) for s in (a, b)]
        ports = {name: s.sockets[0].getsockname()[1] for name, s in zip("ab", servers, strict=True)}
        async with serving({"a.ns": ports["a"], "b.ns": ports["b"]}) as port:
            reply, ra, wa = await connect(port, "a.ns")
            assert reply == socks5.answer(socks5.SUCCEEDED)
            _, rb, wb = await connect(port, "b.ns")
            for i in range(3):
                assert await ask(ra, wa, b"%d" % i) == b"a %d" % i
                assert await ask(rb, wb, b"%d" % i) == b"b %d" % i
            wa.close()
            wb.close()
        assert (a.accepted, b.accepted) == (1, 1)
        assert a.requests == [b"POST / HTTP/1.1 0", b"POST / HTTP/1.1 1", b"POST / HTTP/1.1 2"]
        for server in servers:
            server.close()
    asyncio.run(scenario())


def closed_port() -> int:
    async def bound() -> int:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port: int = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        return port
    return asyncio.run(bound())


@pytest.mark.parametrize(("host", "kwargs", "expected"), [
    pytest.param("missing.ns", {}, socks5.answer(socks5.HOST_UNREACHABLE), id="no-route"),
    pytest.param("down.ns", {}, socks5.answer(socks5.CONNECTION_REFUSED),
                 id="backend-refuses"),
    pytest.param("a.ns", {"command": 2}, socks5.answer(socks5.COMMAND_NOT_SUPPORTED),
                 id="bind-command"),
    pytest.param("a.ns", {"methods": b"\x02"}, b"\x05\xff", id="password-only"),
])
def test_refused_connections_get_their_reply_and_are_closed(
        host: str, kwargs: dict[str, object], expected: bytes) -> None:
    down = closed_port()

    async def scenario() -> None:
        async with serving({"a.ns": down, "down.ns": down}) as port:
            reply, reader, writer = await connect(port, host, **kwargs)  # type: ignore[arg-type]
            assert reply == expected
            assert await reader.read() == b""
            writer.close()
    asyncio.run(scenario())
