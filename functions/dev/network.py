"""The cluster network of the local stack: what cluster DNS and kube-proxy do, for local
processes, and nothing more.

Knative's data plane addresses everything by in-cluster name (the Broker ingress, the channel,
the Broker filter, the subscribers' Knative Services). Its HTTP clients clone Go's
``http.DefaultTransport``, so they honour ``HTTP_PROXY``; Go never proxies a loopback address,
so their API server traffic stays direct. One process
(``python -m functions.dev.network CONFIG``) therefore serves, all on this machine:

* an HTTP forward proxy, plain requests and ``CONNECT`` tunnels, on 127.0.0.1 (for the API
  server's egress to the cluster network, which is how admission webhooks are reached, and for
  the tests) and on a Unix socket (the ``HTTP_PROXY`` of every local pod, through
  :mod:`functions.dev.podnet`);
* a Unix socket forwarded to the API server, the pods' way to it out of their namespace.

Names resolve with :class:`functions.dev.core.routes.Resolver` over informers of Services
and Endpoints, spreading connections over ready endpoints in turn. Static routes (the Knative
Services' local pods: the functions) come from a JSON file, read again whenever it changes.
An address nothing answers at gets ``502 Bad Gateway`` (``CONNECT``: the tunnel is refused).

CONFIG is a JSON file: ``kubeconfig``, ``listen_port``, ``api_port``, ``api_sock``,
``proxy_sock``, ``pods_dir``, ``routes_file``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import sys
import threading
from pathlib import Path
from typing import Any

from functions.dev.core import http1
from functions.dev.core.routes import Backend, NoRoute, Resolver
from functions.dev.podnet import CHUNK, pipe, run_loop, splice
from functions.kube import resources
from functions.kube.cache import CacheSpec, Informer
from functions.kube.client import KubeClient
from functions.kube.config import from_kubeconfig
from functions.kube.resources import Resource

log = logging.getLogger("functions.dev.network")

ENDPOINTS = Resource("", "v1", "endpoints", "Endpoints")
CONNECT_TIMEOUT = 5.0


class StaticRoutes:
    """``name.namespace -> [URL]`` from a JSON file, re-read when its modification time
    changes (so routes can be added while the network runs)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp = -1
        self._routes: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    def current(self) -> dict[str, list[str]]:
        try:
            stamp = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            return {}
        with self._lock:
            if stamp != self._stamp:
                self._routes = {str(k): [str(u) for u in v]
                                for k, v in json.loads(self.path.read_text()).items()}
                self._stamp = stamp
            return self._routes


class Network:
    """The proxy and forwarders of one local cluster."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        kube = KubeClient.from_config(from_kubeconfig(Path(config["kubeconfig"])))
        self.services = Informer(kube, CacheSpec(resources.SERVICES))
        self.endpoints = Informer(kube, CacheSpec(ENDPOINTS))
        self.routes = StaticRoutes(Path(config["routes_file"]))
        self._turns: dict[str, itertools.count[int]] = {}

    def resolver(self) -> Resolver:
        return Resolver(
            service=self.services.store.get,
            service_by_ip=self._service_by_ip,
            endpoints=self.endpoints.store.get,
            pods_dir=str(self.config["pods_dir"]), static=self.routes.current())

    def _service_by_ip(self, ip: str) -> dict[str, Any] | None:
        return next((s for s in self.services.store.values()
                     if (s.get("spec") or {}).get("clusterIP") == ip), None)

    def pick(self, host: str, port: int) -> Backend:
        """One backend for ``host:port``, taking the ready ones in turn."""
        backends = self.resolver().resolve(host, port)
        turn = next(self._turns.setdefault(f"{host}:{port}", itertools.count()))
        return backends[turn % len(backends)]

    # -- serving ------------------------------------------------------------------------------

    async def serve(self) -> None:
        for informer in (self.services, self.endpoints):
            informer.start()
        for informer in (self.services, self.endpoints):
            await asyncio.to_thread(informer.synced.wait, 30)
        servers = [
            await asyncio.start_server(self.proxy, "127.0.0.1", int(self.config["listen_port"])),
            await asyncio.start_unix_server(self.proxy, str(self.config["proxy_sock"])),
            await asyncio.start_unix_server(self.to_api, str(self.config["api_sock"])),
        ]
        print("network ready", flush=True)
        await asyncio.gather(*(s.serve_forever() for s in servers))

    async def to_api(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream, upstream_writer = await asyncio.open_connection(
                "127.0.0.1", int(self.config["api_port"]))
        except OSError:
            writer.close()
            return
        await splice(reader, writer, upstream, upstream_writer)

    async def proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection: requests in turn (keep-alive), or one ``CONNECT`` tunnel."""
        upstream: tuple[Backend, asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                raw = await _read_head(reader)
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
                    await _discard_body(reader, http1.request_framing(head))
                    continue
                if head.first == "CONNECT":
                    await self._tunnel(backend, reader, writer)
                    return
                if upstream is None or upstream[0] != backend or upstream[2].is_closing():
                    if upstream is not None:
                        upstream[2].close()
                    upstream = (backend, *await _open(backend))
                keep = await self._exchange(head, target, reader, writer, upstream[1],
                                            upstream[2])
                if not keep:
                    return
        except (TimeoutError, http1.BadMessage, ConnectionError, OSError,
                asyncio.IncompleteReadError) as exc:
            log.debug("proxy connection ended: %s", exc)
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                writer.write(http1.status_response(502, "Bad Gateway", str(exc)))
        finally:
            if upstream is not None:
                upstream[2].close()
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                writer.close()

    async def _tunnel(self, backend: Backend, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        try:
            upstream, upstream_writer = await _open(backend)
        except (TimeoutError, OSError) as exc:
            writer.write(http1.status_response(502, "Bad Gateway", str(exc)))
            await writer.drain()
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await splice(reader, writer, upstream, upstream_writer)

    async def _exchange(self, head: http1.Head, target: http1.Target,
                        reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        upstream: asyncio.StreamReader,
                        upstream_writer: asyncio.StreamWriter) -> bool:
        """Send one request on and its answer back; whether the client connection stays."""
        upstream_writer.write(http1.upstream_request(head, target))
        await _relay_body(reader, upstream_writer, http1.request_framing(head))
        while True:
            raw = await _read_head(upstream)
            if raw is None:
                raise ConnectionError("the upstream closed before answering")
            answer = http1.parse_head(raw)
            writer.write(raw + b"\r\n\r\n")
            framing = http1.response_framing(answer, head.first)
            if framing.kind == "close":
                await pipe(upstream, writer)
                return False
            await _relay_body(upstream, writer, framing)
            if not answer.second.startswith("1") or answer.second == "101":
                break
        return (http1.keeps_alive(head, head.third) and http1.keeps_alive(answer, answer.first))


async def _open(backend: Backend) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    if backend.unix is not None:
        opened = asyncio.open_unix_connection(backend.unix, limit=CHUNK)
    else:
        opened = asyncio.open_connection(backend.host, backend.port, limit=CHUNK)
    return await asyncio.wait_for(opened, CONNECT_TIMEOUT)


async def _read_head(reader: asyncio.StreamReader) -> bytes | None:
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


async def _relay_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
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


async def _discard_body(reader: asyncio.StreamReader, framing: http1.Framing) -> None:
    sink = _Discard()
    await _relay_body(reader, sink, framing)  # type: ignore[arg-type]


class _Discard:
    def write(self, _: bytes) -> None:
        pass

    async def drain(self) -> None:
        pass


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m functions.dev.network CONFIG.json", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    network = Network(json.loads(Path(argv[0]).read_text()))
    with contextlib.suppress(KeyboardInterrupt):
        run_loop(network.serve())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
