"""The local cluster network's forwarding proxy (``devstack.proxy``), over real loopback
sockets: backend connections pooled across client connections and destinations, a request
whose pooled connection the backend dropped sent again on a fresh one, no route answered 502."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from devstack.core.routes import Backend, NoRoute
from devstack.proxy import Proxy, Upstreams


@dataclass
class Server:
    """A keep-alive HTTP server answering ``<name> <body>``. With ``drop_at``, its first
    connection ends at that request (1-based) without an answer, as a server does when its
    idle timeout meets a request; with ``close_after_answer``, every answer says
    ``Connection: close``."""

    name: str
    drop_at: int | None = None
    close_after_answer: bool = False
    accepted: int = 0
    port: int = 0
    requests: list[bytes] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        first = self.accepted == 1
        served = 0
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                size = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                             if line.lower().startswith(b"content-length:")), 0)
                body = await reader.readexactly(size)
                served += 1
                if first and served == self.drop_at:
                    return
                self.requests.append(head.split(b"\r\n", 1)[0] + b" " + body)
                answer = f"{self.name} ".encode() + body
                close = b"Connection: close\r\n" if self.close_after_answer else b""
                writer.write(b"HTTP/1.1 200 OK\r\n" + close
                             + f"Content-Length: {len(answer)}\r\n\r\n".encode() + answer)
                await writer.drain()
                if self.close_after_answer:
                    return
        finally:
            writer.close()


@asynccontextmanager
async def serving(*servers: Server) -> AsyncIterator[tuple[int, Proxy]]:
    """Start the backends and a proxy routing ``<name>.ns:80`` to each; yield its port."""
    started = []
    for server in servers:
        started.append(await asyncio.start_server(server.handle, "127.0.0.1", 0))
        server.port = started[-1].sockets[0].getsockname()[1]
    routes = {f"{s.name}.ns": Backend(host="127.0.0.1", port=s.port) for s in servers}

    def pick(host: str, port: int) -> Backend:
        if host not in routes:
            raise NoRoute(f"no Service {host}")
        return routes[host]

    proxy = Proxy(pick, Upstreams())
    front = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
    try:
        yield front.sockets[0].getsockname()[1], proxy
    finally:
        proxy.upstreams.close()
        for server_ in [front, *started]:
            server_.close()


async def ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str,
              body: bytes) -> tuple[int, bytes]:
    writer.write(f"POST http://{host}/ HTTP/1.1\r\nHost: {host}\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    size = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:"))
    return status, await reader.readexactly(size)


async def client(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


def test_backend_connections_are_pooled_across_destinations_and_clients() -> None:
    """Requests to two backends in turn, on two client connections, open one connection per
    backend (a connection tied to its client would reopen on every change of backend)."""
    async def scenario() -> None:
        a, b = Server("a"), Server("b")
        async with serving(a, b) as (port, proxy):
            for _ in range(2):
                reader, writer = await client(port)
                for i in range(3):
                    assert await ask(reader, writer, "a.ns", b"%d" % i) == (200, b"a %d" % i)
                    assert await ask(reader, writer, "b.ns", b"%d" % i) == (200, b"b %d" % i)
                writer.close()
            assert (a.accepted, b.accepted, proxy.upstreams.opened) == (1, 1, 2)
            assert a.requests[0] == b"POST / HTTP/1.1 0"
    asyncio.run(scenario())


@pytest.mark.parametrize(("server", "accepted"), [
    pytest.param(Server("a", drop_at=2), 2, id="dropped-request-sent-again-on-a-new-connection"),
    pytest.param(Server("a", close_after_answer=True), 3, id="connection-close-is-not-pooled"),
])
def test_a_connection_the_backend_ends_is_never_reused(server: Server, accepted: int) -> None:
    async def scenario() -> None:
        answers = []
        async with serving(server) as (port, _):
            for i in range(3):
                reader, writer = await client(port)
                answers.append(await ask(reader, writer, "a.ns", b"x%d" % i))
                writer.close()
        assert answers == [(200, b"a x0"), (200, b"a x1"), (200, b"a x2")]
        assert server.accepted == accepted
    asyncio.run(scenario())


def test_no_route_answers_502_and_the_client_connection_goes_on() -> None:
    async def scenario() -> None:
        async with serving(Server("a")) as (port, _):
            reader, writer = await client(port)
            status, body = await ask(reader, writer, "missing.ns", b"lost")
            assert (status, body) == (502, b"no Service missing.ns\n")
            assert await ask(reader, writer, "a.ns", b"y") == (200, b"a y")
            writer.close()
    asyncio.run(scenario())
