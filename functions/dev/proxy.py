"""The forwarding proxy of the local cluster network: HTTP/1.1 requests in absolute form (each
to its own destination) and ``CONNECT`` tunnels, sent on to the backends a ``pick`` callable
chooses (:class:`functions.dev.network.Network` resolves in-cluster names).

A Go client behind ``HTTP_PROXY`` keeps a few connections to the proxy and sends every plain
request on them, whatever its destination, so one client connection carries requests for
many backends in turn (the Broker filter's to each subscriber). The connections to backends
are therefore not tied to a client connection: a request takes an idle keep-alive connection
to its backend from a pool shared by all clients, or opens one, and gives it back once the
answer has been relayed in full. Without the pool, every change of backend on a client
connection closed one backend connection and opened another, and each open costs a round
trip to the target pod's network half and an accept in its server. A local pod's port is
reached through its ``<port>.fd`` socket when it has one (:mod:`functions.dev.handoff`: a
socket connected inside the pod, no relay), else through its relay socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from functions.core import http1
from functions.dev import handoff
from functions.dev.core.routes import Backend, NoRoute
from functions.dev.podnet import CHUNK, pipe, splice

log = logging.getLogger("functions.dev.network")

CONNECT_TIMEOUT = 5.0
# A request body up to this size is read before it is sent, so that a request whose pooled
# connection the backend had just closed can go again on a fresh one.
REPLAYABLE_BODY = 1 << 20


@dataclass
class Connection:
    """One open connection to a backend, and when it last finished an exchange."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = field(default_factory=time.monotonic)

    def usable(self, now: float, idle_seconds: float) -> bool:
        return (not self.writer.is_closing() and not self.reader.at_eof()
                and now - self.idle_since < idle_seconds)

    def close(self) -> None:
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            self.writer.close()


class Upstreams:
    """Idle keep-alive connections per backend, shared by every client connection.

    :param idle_seconds: an idle connection older than this is closed rather than reused
        (below the idle timeouts of the servers behind it).
    :param max_idle: idle connections kept per backend; more are closed when given back.
    """

    def __init__(self, idle_seconds: float = 20.0, max_idle: int = 64) -> None:
        self.idle_seconds = idle_seconds
        self.max_idle = max_idle
        self._idle: dict[Backend, list[Connection]] = {}
        self.opened = 0

    async def take(self, backend: Backend) -> tuple[Connection, bool]:
        """An idle connection to ``backend`` (and ``True``), or a new one (and ``False``)."""
        idle = self._idle.get(backend) or []
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if connection.usable(now, self.idle_seconds):
                return connection, True
            connection.close()
        return await self.open(backend), False

    async def open(self, backend: Backend) -> Connection:
        if backend.unix is not None and os.path.exists(backend.unix + handoff.SUFFIX):
            opened = handoff.connect_through(backend.unix + handoff.SUFFIX)
        elif backend.unix is not None:
            opened = asyncio.open_unix_connection(backend.unix, limit=CHUNK)
        else:
            opened = asyncio.open_connection(backend.host, backend.port, limit=CHUNK)
        reader, writer = await asyncio.wait_for(opened, CONNECT_TIMEOUT)
        self.opened += 1
        return Connection(reader, writer)

    def give(self, backend: Backend, connection: Connection) -> None:
        """Keep ``connection`` for the next request to ``backend``."""
        idle = self._idle.setdefault(backend, [])
        if len(idle) >= self.max_idle or connection.writer.is_closing():
            connection.close()
            return
        connection.idle_since = time.monotonic()
        idle.append(connection)

    def close(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()


class UpstreamClosed(ConnectionError):
    """The backend closed the connection before any byte of an answer."""


class Proxy:
    """Serves client connections (:meth:`handle`) with backends from ``pick(host, port)``."""

    def __init__(self, pick: Callable[[str, int], Backend],
                 upstreams: Upstreams | None = None) -> None:
        self.pick = pick
        self.upstreams = upstreams or Upstreams()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection: requests in turn (keep-alive), or one ``CONNECT`` tunnel."""
        try:
            while True:
                raw = await read_head(reader)
                if raw is None:
                    return
                head = http1.parse_head(raw)
                target = http1.request_target(head)
                try:
                    backend = self.pick(target.host, target.port)
                except NoRoute as exc:
                    log.info("no route for %s:%s: %s", target.host, target.port, exc)
                    writer.write(http1.status_response(502, "Bad Gateway", str(exc)))
                    await writer.drain()
                    if head.first == "CONNECT":
                        return
                    await relay_body(reader, _Discard(), http1.request_framing(head))
                    continue
                if head.first == "CONNECT":
                    await self._tunnel(backend, reader, writer)
                    return
                if not await self._request(backend, head, target, reader, writer):
                    return
        except (TimeoutError, http1.BadMessage, ConnectionError, OSError,
                asyncio.IncompleteReadError) as exc:
            log.debug("proxy connection ended: %s", exc)
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                writer.write(http1.status_response(502, "Bad Gateway", str(exc)))
        finally:
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                writer.close()

    async def _tunnel(self, backend: Backend, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        try:
            upstream = await self.upstreams.open(backend)
        except (TimeoutError, OSError) as exc:
            writer.write(http1.status_response(502, "Bad Gateway", str(exc)))
            await writer.drain()
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await splice(reader, writer, upstream.reader, upstream.writer)

    async def _request(self, backend: Backend, head: http1.Head, target: http1.Target,
                       reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """One request to ``backend`` on a pooled connection; whether the client's stays."""
        framing = http1.request_framing(head)
        body: bytes | None = b""
        if framing.kind == "length" and framing.size <= REPLAYABLE_BODY:
            body = await reader.readexactly(framing.size)
        elif framing.kind != "none":
            body = None
        sent = http1.upstream_request(head, target)
        upstream, reused = await self.upstreams.take(backend)
        try:
            try:
                keep = await self._exchange(head, sent, body, reader, writer, upstream)
            except UpstreamClosed:
                upstream.close()
                if not reused or body is None:
                    raise
                upstream = await self.upstreams.open(backend)
                keep = await self._exchange(head, sent, body, reader, writer, upstream)
        except BaseException:
            upstream.close()
            raise
        client_keeps, upstream_keeps = keep
        if upstream_keeps:
            self.upstreams.give(backend, upstream)
        else:
            upstream.close()
        return client_keeps

    async def _exchange(self, head: http1.Head, sent: bytes, body: bytes | None,
                        reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        upstream: Connection) -> tuple[bool, bool]:
        """Send one request on and its answer back: whether the client's connection and the
        backend's stay open. ``body`` is the request body already read, or ``None`` to relay
        it from ``reader``."""
        if body is None:
            upstream.writer.write(sent)
            await relay_body(reader, upstream.writer, http1.request_framing(head))
        else:
            upstream.writer.write(sent + body)
            await upstream.writer.drain()
        first = True
        while True:
            try:
                raw = await read_head(upstream.reader)
            except (ConnectionResetError, BrokenPipeError) as exc:
                if first:
                    raise UpstreamClosed(str(exc)) from exc
                raise
            if raw is None:
                if first:
                    raise UpstreamClosed("the upstream closed before answering")
                raise ConnectionError("the upstream closed before answering")
            first = False
            answer = http1.parse_head(raw)
            writer.write(raw + b"\r\n\r\n")
            framing = http1.response_framing(answer, head.first)
            if framing.kind == "close":
                await pipe(upstream.reader, writer)
                return False, False
            await relay_body(upstream.reader, writer, framing)
            if answer.second == "101":
                await splice(reader, writer, upstream.reader, upstream.writer)
                return False, False
            if not answer.second.startswith("1"):
                break
        keep = http1.keeps_alive(head, head.third) and http1.keeps_alive(answer, answer.first)
        return keep, keep


async def read_head(reader: asyncio.StreamReader) -> bytes | None:
    """A message head without its final blank line, or ``None`` at a clean end of stream."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise
    except asyncio.LimitOverrunError as exc:
        raise http1.BadMessage("message head too large") from exc
    return raw[:-4]


async def relay_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter | _Discard,
                     framing: http1.Framing) -> None:
    if framing.kind == "length":
        remaining = framing.size
        while remaining:
            data = await reader.read(min(CHUNK, remaining))
            if not data:
                raise ConnectionError("body ended early")
            writer.write(data)
            remaining -= len(data)
    elif framing.kind == "chunked":
        while True:
            line = await reader.readuntil(b"\r\n")
            writer.write(line)
            size = http1.chunk_size(line)
            if size == 0:
                while (trailer := await reader.readuntil(b"\r\n")) != b"\r\n":
                    writer.write(trailer)
                writer.write(b"\r\n")
                break
            writer.write(await reader.readexactly(size + 2))
    await writer.drain()


class _Discard:
    def write(self, _: bytes) -> None:
        pass

    async def drain(self) -> None:
        pass
