"""The forwarding proxy of the local cluster network: HTTP/1.1 requests in absolute form (each
to its own destination) and ``CONNECT`` tunnels, sent on to the backends a ``pick`` callable
chooses (:class:`devstack.network.Network` resolves in-cluster names).

A Go client behind ``HTTP_PROXY`` keeps a few connections to the proxy and sends every plain
request on them, whatever its destination, so one client connection carries requests for
many backends in turn (the Broker filter's to each subscriber). The connections to backends
are therefore not tied to a client connection: a request takes an idle keep-alive connection
to its backend from a pool shared by all clients, or opens one, and gives it back once the
answer has been relayed in full. Without the pool, every change of backend on a client
connection closed one backend connection and opened another, and each open costs a round
trip to the target pod's network half and an accept in its server. A local pod's port is
reached through its ``<port>.fd`` socket when it has one (:mod:`devstack.handoff`: a
socket connected inside the pod, no relay), else through its relay socket.

Both sides' HTTP is parsed and written by ``h11`` state machines, one per client connection
and one per exchange with a backend: a malformed request is answered with its 4xx (400, or
431 for a head over :data:`MAX_HEAD`) and its connection closed; a backend's answer that is
not HTTP, or ends early, is a ``502 Bad Gateway`` when nothing of it has been relayed yet, and
otherwise ends the client's connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import h11

from devstack import handoff
from devstack.core.routes import Backend, NoRoute
from devstack.core.targets import BadTarget, Target, host_header, request_target
from devstack.podnet import CHUNK, splice

log = logging.getLogger("devstack.network")

CONNECT_TIMEOUT = 5.0
# A request body up to this size is read before it is sent, so that a request whose pooled
# connection the backend had just closed can go again on a fresh one.
REPLAYABLE_BODY = 1 << 20
# The largest message head read (a request's or an answer's): h11 refuses one whose part
# still incomplete after a read is longer, so a head may reach this plus one read (CHUNK).
MAX_HEAD = 1 << 16
# After refusing a request: how long and how much of what the client still sends is read.
LINGER_SECONDS = 1.0
LINGER_BYTES = 1 << 20
# Headers meant for the proxy itself, never passed on.
PROXY_HEADERS = frozenset({b"proxy-connection", b"proxy-authorization", b"proxy-authenticate"})
# What ends the exchange with a backend without a whole answer.
UPSTREAM_ERRORS = (h11.ProtocolError, ConnectionError, OSError, TimeoutError)


@dataclass
class Connection:
    """One open connection to a backend, and when it last finished an exchange."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = field(default_factory=time.monotonic)

    def usable(self, now: float, idle_seconds: float) -> bool:
        """Open, not idle too long, and with nothing on it that nobody asked for (the stream
        reader's buffer holds what arrived while it was idle)."""
        return (not self.writer.is_closing() and not self.reader.at_eof()
                and not getattr(self.reader, "_buffer", b"")
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


class BadGateway(ConnectionError):
    """The backend's answer is not HTTP, or ended before it was whole."""


class Proxy:
    """Serves client connections (:meth:`handle`) with backends from ``pick(host, port)``."""

    def __init__(self, pick: Callable[[str, int], Backend],
                 upstreams: Upstreams | None = None) -> None:
        self.pick = pick
        self.upstreams = upstreams or Upstreams()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection: requests in turn (keep-alive), or one ``CONNECT`` tunnel."""
        client = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        try:
            while await self._serve_one(client, reader, writer):
                client.start_next_cycle()
        except h11.RemoteProtocolError as exc:  # the client's: its own requests' parser
            log.info("proxy: a malformed request: %s", exc)
            await _answer(client, reader, writer, exc.error_status_hint, str(exc))
        except BadTarget as exc:
            log.info("proxy: %s", exc)
            await _answer(client, reader, writer, 400, str(exc))
        except (*UPSTREAM_ERRORS, asyncio.IncompleteReadError) as exc:
            log.debug("proxy connection ended: %s", exc)
            await _answer(client, reader, writer, 502, str(exc))
        finally:
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                writer.close()

    async def _serve_one(self, client: h11.Connection, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> bool:
        """One request (or a tunnel): whether the client's connection goes on."""
        request = await _next(client, reader)
        if not isinstance(request, h11.Request):
            return False  # the client closed between requests
        target = request_target(request.method, request.target,
                                next((v for k, v in request.headers if k == b"host"), None))
        try:
            backend = self.pick(target.host, target.port)
        except NoRoute as exc:
            log.info("no route for %s:%s: %s", target.host, target.port, exc)
            if request.method == b"CONNECT":
                await _answer(client, reader, writer, 502, str(exc))
                return False
            await _body(client, reader, keep=False)  # read to its end: the connection goes on
            writer.write(_simple(client, 502, str(exc)))
            await writer.drain()
            return client.our_state is h11.DONE and client.their_state is h11.DONE
        if request.method == b"CONNECT":
            await self._tunnel(client, backend, reader, writer)
            return False
        return await self._request(client, request, target, backend, reader, writer)

    async def _tunnel(self, client: h11.Connection, backend: Backend,
                      reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream = await self.upstreams.open(backend)
        except (TimeoutError, OSError) as exc:
            await _answer(client, reader, writer, 502, str(exc))
            return
        while not isinstance(await _next(client, reader), h11.EndOfMessage):
            pass  # a CONNECT's body, if it has one, is nobody's
        writer.write(client.send(h11.Response(status_code=200, headers=[],
                                              reason=b"Connection established")))
        early, _ = client.trailing_data  # what the client sent after its request's head
        upstream.writer.write(early)
        await splice(reader, writer, upstream.reader, upstream.writer)

    async def _request(self, client: h11.Connection, request: h11.Request, target: Target,
                       backend: Backend, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> bool:
        """One request to ``backend`` on a pooled connection; whether the client's stays."""
        headers = [(k, v) for k, v in request.headers if k not in PROXY_HEADERS]
        if client.they_are_waiting_for_100_continue:
            # Answered here: the body is read before the backend is asked (for a resend).
            writer.write(client.send(h11.InformationalResponse(status_code=100, headers=[])))
            headers = [(k, v) for k, v in headers if k != b"expect"]
        if not any(k == b"host" for k, _ in headers):  # an HTTP/1.0 client's
            headers.insert(0, (b"host", host_header(target)))
        sent = h11.Request(method=request.method, target=target.path, headers=headers)
        length = next((int(v) for k, v in headers if k == b"content-length"), None)
        body = (await _body(client, reader)
                if length is not None and length <= REPLAYABLE_BODY else None)
        upstream, reused = await self.upstreams.take(backend)
        try:
            try:
                keep = await self._exchange(client, sent, body, reader, writer, upstream)
            except UpstreamClosed:
                upstream.close()
                if not reused or body is None:
                    raise
                upstream = await self.upstreams.open(backend)
                keep = await self._exchange(client, sent, body, reader, writer, upstream)
        except BaseException:
            upstream.close()
            raise
        if keep:
            self.upstreams.give(backend, upstream)
        else:
            upstream.close()
        return client.our_state is h11.DONE and client.their_state is h11.DONE

    async def _exchange(self, client: h11.Connection, sent: h11.Request,
                        body: list[h11.Data | h11.EndOfMessage] | None,
                        reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        upstream: Connection) -> bool:
        """Send one request on and its answer back; whether the backend's connection stays
        open. ``body`` is the request body already read, or ``None`` to relay it as it comes."""
        backend = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        upstream.writer.write(backend.send(sent))
        if body is None:
            await _relay_body(client, reader, backend, upstream.writer)
        else:
            upstream.writer.write(b"".join(backend.send(event) or b"" for event in body))
            await upstream.writer.drain()
        received = False
        while True:
            try:
                event = backend.next_event()
                if event is h11.NEED_DATA:
                    data = await upstream.reader.read(CHUNK)
                    if not data and not received:
                        raise UpstreamClosed("the backend closed before answering")
                    received = True
                    backend.receive_data(data)
                    continue
            except (ConnectionResetError, BrokenPipeError) as exc:
                if not received:
                    raise UpstreamClosed(str(exc)) from exc
                raise
            except h11.RemoteProtocolError as exc:
                raise BadGateway(f"the backend's answer: {exc}") from exc
            if not isinstance(event, h11.InformationalResponse | h11.Response | h11.Data
                              | h11.EndOfMessage):
                raise BadGateway("the backend closed in the middle of its answer")
            writer.write(client.send(event) or b"")
            if isinstance(event, h11.InformationalResponse) and event.status_code == 101:
                await _switch(client, reader, writer, backend, upstream)
                return False
            if isinstance(event, h11.Data):
                await writer.drain()
            if isinstance(event, h11.EndOfMessage):
                await writer.drain()
                return (backend.our_state is h11.DONE and backend.their_state is h11.DONE
                        and not backend.trailing_data[0])


async def _next(connection: h11.Connection, reader: asyncio.StreamReader) -> h11.Event:
    """The next event of ``connection``, reading from ``reader`` as it needs."""
    while True:
        event = connection.next_event()
        if event is not h11.NEED_DATA:
            return event  # type: ignore[return-value]
        connection.receive_data(await reader.read(CHUNK))


async def _body(client: h11.Connection, reader: asyncio.StreamReader, *,
                keep: bool = True) -> list[h11.Data | h11.EndOfMessage]:
    """The client's request body as events, read to its end (and dropped, unless ``keep``):
    a body this reads whole has a length the caller has bounded."""
    events: list[h11.Data | h11.EndOfMessage] = []
    while True:
        event = await _next(client, reader)
        if isinstance(event, h11.Data):
            if keep:
                events.append(event)
        elif isinstance(event, h11.EndOfMessage):
            events.append(event)
            return events
        else:
            raise ConnectionError("the client closed in the middle of its request")


async def _relay_body(client: h11.Connection, reader: asyncio.StreamReader,
                      backend: h11.Connection, writer: asyncio.StreamWriter) -> None:
    """The client's request body sent on as it comes."""
    while True:
        event = await _next(client, reader)
        if not isinstance(event, h11.Data | h11.EndOfMessage):
            raise ConnectionError("the client closed in the middle of its request")
        writer.write(backend.send(event) or b"")
        await writer.drain()
        if isinstance(event, h11.EndOfMessage):
            return


async def _switch(client: h11.Connection, reader: asyncio.StreamReader,
                  writer: asyncio.StreamWriter, backend: h11.Connection,
                  upstream: Connection) -> None:
    """After a ``101 Switching Protocols``: both connections joined, with what each side's
    parser had read past the switch handed to the other."""
    writer.write(backend.trailing_data[0])
    upstream.writer.write(client.trailing_data[0])
    await splice(reader, writer, upstream.reader, upstream.writer)


def _simple(client: h11.Connection, status: int, detail: str, *, close: bool = False) -> bytes:
    """A short plain-text answer from the proxy itself."""
    body = (detail + "\n").encode("utf-8", "replace")
    headers = [(b"content-type", b"text/plain; charset=utf-8"),
               (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    return b"".join(client.send(event) or b"" for event in (
        h11.Response(status_code=status, headers=headers), h11.Data(data=body),
        h11.EndOfMessage()))


async def _answer(client: h11.Connection, reader: asyncio.StreamReader,
                  writer: asyncio.StreamWriter, status: int, detail: str) -> None:
    """Answer ``status`` if nothing of an answer has been sent yet, then end the connection:
    our side first, then what the client still sends is read and dropped for a moment (a
    connection closed with unread bytes is reset, and the reset can take the answer with it
    before the client has read it)."""
    if client.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    with contextlib.suppress(ConnectionError, OSError, RuntimeError, TimeoutError,
                             h11.LocalProtocolError):
        writer.write(_simple(client, status, detail, close=True))
        if writer.can_write_eof():
            writer.write_eof()
        await asyncio.wait_for(_drop(reader), LINGER_SECONDS)


async def _drop(reader: asyncio.StreamReader) -> None:
    dropped = 0
    while dropped < LINGER_BYTES and (data := await reader.read(CHUNK)):
        dropped += len(data)
