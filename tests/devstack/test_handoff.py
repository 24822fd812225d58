"""Connections handed over as file descriptors (``devstack.handoff``), over real sockets:
what a client sent before the hand-off is not lost, a pod's port is reached through its
``.fd`` socket, and nothing listening there is a refused connection."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

import pytest

from devstack import handoff
from devstack.core.routes import Backend
from devstack.podnet import handed_over, tcp_listener
from devstack.proxy import Upstreams


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer each line with ``<route>:<line>``."""
    while line := await reader.readline():
        writer.write(b"echo:" + line)
        await writer.drain()
    writer.close()


async def echo_server() -> tuple[asyncio.Server, int]:
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def handing_over(tmp_path: Path, routes: dict[str, handoff.Served],
                       name: str) -> tuple[int, list[asyncio.Future[None]]]:
    """The network's hand-off socket serving ``routes``, and a pod's port whose connections
    are handed to it as ``name``: that port, and the tasks to cancel."""
    path = str(tmp_path / "handoff.sock")
    network = asyncio.ensure_future(handoff.serve_handoffs(path, routes)())
    await asyncio.sleep(0.05)
    port = free_port()
    pod = asyncio.ensure_future(handoff.accept_forever(tcp_listener(port),
                                                       handed_over(path, name)))
    return port, [network, pod]


def test_a_handed_over_connection_keeps_what_the_client_sent_first(tmp_path: Path) -> None:
    """The pod's half accepts without a transport (which would read ahead) and hands the
    socket over; the network's half serves it by route name, from its first byte."""
    async def scenario() -> None:
        served: list[str] = []

        async def named(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            served.append("proxy")
            await echo(reader, writer)

        port, tasks = await handing_over(tmp_path, {"proxy": named}, "proxy")
        for line in (b"first\n", b"second\n"):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(line)   # sent at once: before the pod's half has even accepted
            assert await reader.readline() == b"echo:" + line
            writer.close()
        assert served == ["proxy", "proxy"]
        for task in tasks:
            task.cancel()
    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_an_unknown_route_closes_the_connection(tmp_path: Path) -> None:
    async def scenario() -> None:
        port, tasks = await handing_over(tmp_path, {"proxy": echo}, "elsewhere")
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"lost\n")
        with contextlib.suppress(ConnectionResetError):   # closed with the line unread
            assert await reader.read() == b""
        for task in tasks:
            task.cancel()
    asyncio.run(asyncio.wait_for(scenario(), 10))


@pytest.mark.parametrize("listening", [
    pytest.param(True, id="connected-socket-handed-back"),
    pytest.param(False, id="nothing-listening-is-refused"),
])
def test_the_network_reaches_a_pod_port_through_its_fd_socket(tmp_path: Path,
                                                               listening: bool) -> None:
    """``Upstreams.open`` takes ``<port>.fd`` when it exists: no relay socket is needed."""
    async def scenario() -> None:
        server, port = await echo_server()
        if not listening:
            server.close()
            await server.wait_closed()
        relay = tmp_path / str(port)   # the relay socket is never made
        pod = asyncio.ensure_future(
            handoff.serve_connects(str(relay) + handoff.SUFFIX, port)())
        await asyncio.sleep(0.05)
        upstreams = Upstreams()
        if not listening:
            with pytest.raises(ConnectionRefusedError):
                await upstreams.open(Backend(unix=str(relay)))
        else:
            connection = await upstreams.open(Backend(unix=str(relay)))
            connection.writer.write(b"through the pod\n")
            assert await connection.reader.readline() == b"echo:through the pod\n"
            connection.close()
            server.close()
        pod.cancel()
    asyncio.run(asyncio.wait_for(scenario(), 10))
