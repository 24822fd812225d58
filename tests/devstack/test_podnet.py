"""The local pod network's event loop (``devstack.podnet.run_loop``) and its splice of
two connections."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from devstack.podnet import run_loop, splice


async def loop_type() -> type:
    return type(asyncio.get_running_loop())


def test_the_relays_run_on_uvloop_when_it_is_installed() -> None:
    """The dev extra installs uvloop: the relays and the cluster network run on its loop."""
    assert run_loop(loop_type()) is uvloop.Loop


# -- splice: one connection joined to another after a handshake ------------------------------

HANDSHAKE = b"JOIN\n"


async def _spliced_pair(upstream: Callable[[asyncio.StreamReader, asyncio.StreamWriter],
                                           Awaitable[None]]) -> tuple[int, asyncio.Event]:
    """A front server that reads ``HANDSHAKE`` through its stream, connects to a server
    running ``upstream`` and splices the two; its port, and an event set when a splice ended."""
    backend = await asyncio.start_server(upstream, "127.0.0.1", 0)
    port = backend.sockets[0].getsockname()[1]
    ended = asyncio.Event()

    async def front(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert await reader.readexactly(len(HANDSHAKE)) == HANDSHAKE
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        await splice(reader, writer, up_reader, up_writer)
        ended.set()

    server = await asyncio.start_server(front, "127.0.0.1", 0)
    return server.sockets[0].getsockname()[1], ended


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


async def _echo_through_splice(size: int) -> tuple[bytes, bytes, bool]:
    port, ended = await _spliced_pair(_echo)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    payload = bytes(range(256)) * (size // 256)
    # The first bytes after the handshake arrive with it: the front's stream holds them when
    # the splice begins.
    writer.write(HANDSHAKE + payload[:100])
    await asyncio.sleep(0.05)
    writer.write(payload[100:])
    await writer.drain()
    received = await asyncio.wait_for(reader.readexactly(len(payload)), 10)
    writer.write_eof()
    rest = await asyncio.wait_for(reader.read(), 5)
    await asyncio.wait_for(ended.wait(), 5)
    writer.close()
    return payload, received + rest, ended.is_set()


@pytest.mark.parametrize("size", [
    pytest.param(1024, id="one-message"),
    pytest.param(8 << 20, id="more-than-the-buffers-hold"),
])
def test_a_spliced_connection_carries_every_byte_both_ways_and_ends_with_either_side(
        size: int) -> None:
    sent, received, ended = run_loop(_echo_through_splice(size))
    assert received == sent
    assert ended


async def _upstream_closes_first() -> tuple[bytes, bool]:
    async def greet_and_close(reader: asyncio.StreamReader,
                              writer: asyncio.StreamWriter) -> None:
        writer.write(b"bye")
        await writer.drain()
        writer.close()

    port, ended = await _spliced_pair(greet_and_close)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(HANDSHAKE)
    received = await asyncio.wait_for(reader.read(), 5)  # to the end: the front closed too
    await asyncio.wait_for(ended.wait(), 5)
    writer.close()
    return received, ended.is_set()


def test_the_upstream_closing_closes_the_client_after_its_last_bytes() -> None:
    assert run_loop(_upstream_closes_first()) == (b"bye", True)
