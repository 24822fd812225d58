"""The local pods' proxy: SOCKS5 ``CONNECT`` to in-cluster names, each connection joined to a
backend that a ``pick`` callable chooses (:class:`devstack.network.Network` resolves
in-cluster names), as kube-proxy joins a connection to a Service with one of its endpoints.

Every local pod's ``HTTP_PROXY`` is this proxy (:mod:`devstack.kubelet`), so a Go client
of the Knative data plane opens a connection per destination and keeps it, and the cluster
network copies the bytes of each exchange without reading them. As the pods' HTTP forward
proxy (:mod:`devstack.proxy`), which parses and sends on every request and answer, the
cluster network spent 2.4-3.1 s of CPU on a 200-job burst through the real Broker; as this,
1.5-1.6 s (four runs each). The HTTP proxy stays for the API server's egress to webhooks and
for callers on this machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from devstack.core import socks5
from devstack.core.routes import Backend, NoRoute
from devstack.podnet import splice
from devstack.proxy import Connection, Upstreams

log = logging.getLogger("devstack.network")

# A client that has connected has its greeting and request ready: one that says nothing for
# this long is not a SOCKS client.
HANDSHAKE_TIMEOUT = 10.0


class Socks:
    """Serves SOCKS5 client connections (:meth:`handle`) with backends from
    ``pick(host, port)``, opened by ``upstreams`` (which knows how to reach a local pod)."""

    def __init__(self, pick: Callable[[str, int], Backend],
                 upstreams: Upstreams | None = None) -> None:
        self.pick = pick
        self.upstreams = upstreams or Upstreams()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            target = await asyncio.wait_for(self._handshake(reader, writer), HANDSHAKE_TIMEOUT)
            upstream = await self._connect(target)
        except socks5.Refused as exc:
            log.info("socks: %s", exc)
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                writer.write(exc.answer)
                await writer.drain()
                writer.close()
            return
        except (TimeoutError, ConnectionError, OSError, asyncio.IncompleteReadError) as exc:
            log.debug("socks: a handshake ended: %s", exc)
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                writer.close()
            return
        writer.write(socks5.answer(socks5.SUCCEEDED))
        await splice(reader, writer, upstream.reader, upstream.writer)

    async def _handshake(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> socks5.Destination:
        version, count = await reader.readexactly(2)
        writer.write(socks5.method_answer(version, await reader.readexactly(count)))
        start = await reader.readexactly(socks5.REQUEST_START)
        first = await reader.readexactly(1)
        rest = await reader.readexactly(socks5.address_size(start, first[0]))
        return socks5.destination(start, first + rest)

    async def _connect(self, target: socks5.Destination) -> Connection:
        try:
            backend = self.pick(target.host, target.port)
        except NoRoute as exc:
            raise socks5.Refused(f"no route for {target.host}:{target.port}: {exc}",
                                 socks5.answer(socks5.HOST_UNREACHABLE)) from exc
        try:
            return await self.upstreams.open(backend)
        except (TimeoutError, OSError) as exc:
            raise socks5.Refused(f"{backend.describe()} refused {target.host}:{target.port}: "
                                 f"{exc}", socks5.answer(socks5.CONNECTION_REFUSED)) from exc

