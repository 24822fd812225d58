"""The cluster network of the local stack: what cluster DNS and kube-proxy do, for local
processes, and nothing more.

Knative's data plane addresses everything by in-cluster name (the Broker ingress, the channel,
the Broker filter, the subscribers' Knative Services). Its HTTP clients clone Go's
``http.DefaultTransport``, so they honour ``HTTP_PROXY`` (a ``socks5://`` one too); Go never
proxies a loopback address, so their API server traffic stays direct. One process
(``python -m devstack.network CONFIG``) therefore serves, all on this machine:

* a SOCKS5 proxy (:mod:`devstack.socks`), the ``HTTP_PROXY`` of every local pod (through
  :mod:`devstack.podnet`): a connection per destination, its bytes copied unread;
* an HTTP forward proxy (:mod:`devstack.proxy`), plain requests and ``CONNECT`` tunnels,
  on a Unix socket (the API server's egress to the cluster network, which is how admission
  webhooks are reached) and on 127.0.0.1 (for callers on this machine and the tests);
* a Unix socket forwarded to the API server, the pods' way to it out of their namespace;
* a hand-off socket (:mod:`devstack.handoff`) through which the pods give it their
  connections to the proxy and to the API server as file descriptors.

Names resolve with :class:`devstack.core.routes.Resolver` over informers of Services
and Endpoints, spreading connections over ready endpoints in turn; ``kubernetes.default``
is the API server. Static routes (the Knative
Services' local pods: the functions) come from a JSON file, read again whenever it changes.
An address nothing answers at gets ``502 Bad Gateway`` (``CONNECT``: the tunnel is refused).

CONFIG is a JSON file: ``kubeconfig``, ``listen_port``, ``api_port``, ``api_sock``,
``proxy_sock``, ``handoff_sock``, ``pods_dir``, ``routes_file``.
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

from devstack.core.routes import Backend, Resolver
from devstack.handoff import serve_handoffs
from devstack.podnet import run_loop, splice
from devstack.proxy import Proxy
from devstack.socks import Socks
from functions.kube import resources
from functions.kube.cache import CacheSpec, Informer
from functions.kube.client import KubeClient
from functions.kube.config import from_kubeconfig
from functions.kube.resources import Resource

log = logging.getLogger("devstack.network")

ENDPOINTS = Resource("", "v1", "endpoints", "Endpoints")


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
            pods_dir=str(self.config["pods_dir"]), static=self.routes.current(),
            api_server=Backend(host="127.0.0.1", port=int(self.config["api_port"])))

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
        proxy = Proxy(self.pick)
        socks = Socks(self.pick, proxy.upstreams)
        handoffs = serve_handoffs(str(self.config["handoff_sock"]),
                                  {"proxy": proxy.handle, "socks": socks.handle,
                                   "api": self.to_api})
        servers = [
            await asyncio.start_server(proxy.handle, "127.0.0.1",
                                       int(self.config["listen_port"])),
            await asyncio.start_unix_server(proxy.handle, str(self.config["proxy_sock"])),
            await asyncio.start_unix_server(self.to_api, str(self.config["api_sock"])),
        ]
        print("network ready", flush=True)
        await asyncio.gather(handoffs(), *(s.serve_forever() for s in servers))

    async def to_api(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream, upstream_writer = await asyncio.open_connection(
                "127.0.0.1", int(self.config["api_port"]))
        except OSError:
            writer.close()
            return
        await splice(reader, writer, upstream, upstream_writer)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m devstack.network CONFIG.json", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    network = Network(json.loads(Path(argv[0]).read_text()))
    with contextlib.suppress(KeyboardInterrupt):
        run_loop(network.serve())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
