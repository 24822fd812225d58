"""Connections handed between a local pod's network namespace and the cluster network as
file descriptors (``SCM_RIGHTS`` over a Unix socket), so that no byte of them is copied by a
relay inside the pod.

A socket belongs to the network namespace it was made in, but whoever holds its descriptor
can read and write it. So a pod's network half (:mod:`devstack.podnet`):

* accepts the container's connections to the cluster network and to the API server (its
  ``127.0.0.1`` ports) and hands each to the cluster network's hand-off socket with the name
  of what it is for (:func:`hand_over`); the cluster network serves it as its own
  (:func:`serve_handoffs`);
* answers each connection to ``<pod dir>/<port>.fd`` with a socket it connected to the
  container's port (:func:`serve_connects`); the cluster network opens its connections to
  the pod that way (:func:`connect_through`).

Relayed through the pod instead, every message would be copied twice more (into the pod's
network half and out of it); handed off, the pod's half only accepts and connects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable

log = logging.getLogger("devstack.network")

Served = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
CHUNK = 65536
SUFFIX = ".fd"
NAME_MAX = 64


async def readable(sock: socket.socket) -> None:
    """Wait until ``sock`` can be read (or has ended) without blocking the loop."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)
    loop.add_reader(sock.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_reader(sock.fileno())


async def receive(sock: socket.socket) -> tuple[bytes, socket.socket | None]:
    """One message and the socket it carries, if any."""
    await readable(sock)
    data, fds, _, _ = socket.recv_fds(sock, NAME_MAX, 1)
    if not fds:
        return data, None
    received = socket.socket(fileno=fds[0])
    received.setblocking(False)
    return data, received


async def streams(sock: socket.socket) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(sock=sock, limit=CHUNK)


async def hand_over(connection: socket.socket, handoff: str, name: str) -> None:
    """Give ``connection`` to the cluster network at ``handoff``, as ``name``; it is closed
    here either way (the cluster network holds its own copy)."""
    loop = asyncio.get_running_loop()
    with connection, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix:
        unix.setblocking(False)
        try:
            await loop.sock_connect(unix, handoff)
            socket.send_fds(unix, [name.encode()], [connection.fileno()])
        except OSError as exc:
            log.debug("hand-off of a %s connection failed: %s", name, exc)


def listening(path: str) -> socket.socket:
    """A Unix socket listening at ``path`` (replacing a stale one)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener.bind(path)
    listener.listen(256)
    return listener


async def accept_forever(listener: socket.socket,
                         each: Callable[[socket.socket], Awaitable[None]]) -> None:
    """Accept on ``listener`` (never through a transport, which would read ahead) and run
    ``each`` for every connection."""
    loop = asyncio.get_running_loop()
    listener.setblocking(False)
    tasks: set[asyncio.Task[None]] = set()
    while True:
        connection, _ = await loop.sock_accept(listener)
        connection.setblocking(False)
        task = asyncio.ensure_future(each(connection))
        tasks.add(task)
        task.add_done_callback(tasks.discard)


def serve_handoffs(path: str, routes: dict[str, Served]) -> Callable[[], Awaitable[None]]:
    """The cluster network's side: serve each handed-over connection with ``routes[name]``."""
    async def each(unix: socket.socket) -> None:
        with unix:
            try:
                name, connection = await receive(unix)
            except OSError as exc:
                log.debug("a hand-off failed: %s", exc)
                return
        if connection is None:
            return
        serve = routes.get(name.decode(errors="replace"))
        if serve is None:
            log.warning("a connection handed over for an unknown route %r", name)
            connection.close()
            return
        reader, writer = await streams(connection)
        await serve(reader, writer)

    async def run() -> None:
        await accept_forever(listening(path), each)
    return run


def serve_connects(path: str, port: int) -> Callable[[], Awaitable[None]]:
    """The pod's side: answer each connection to ``path`` with a socket connected to the
    container's ``127.0.0.1:port`` (or a bare ``-`` when nothing listens there)."""
    async def each(unix: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        with unix, socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            tcp.setblocking(False)
            try:
                await loop.sock_connect(tcp, ("127.0.0.1", port))
                tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                socket.send_fds(unix, [b"+"], [tcp.fileno()])
            except OSError:
                with contextlib.suppress(OSError):
                    unix.send(b"-")

    async def run() -> None:
        await accept_forever(listening(path), each)
    return run


async def connect_through(path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to a pod's port through its ``<port>.fd`` socket."""
    loop = asyncio.get_running_loop()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix:
        unix.setblocking(False)
        await loop.sock_connect(unix, path)
        answer, connection = await receive(unix)
    if connection is None:
        raise ConnectionRefusedError(f"nothing listens behind {path} ({answer!r})")
    return await streams(connection)
