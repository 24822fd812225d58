"""How an in-cluster address reaches a local process: cluster DNS and kube-proxy, as pure
functions over Services and Endpoints.

A name ``<service>.<namespace>[.svc[.cluster.local]]`` or a Service's cluster IP, with a port,
resolves as in a cluster: an ``ExternalName`` Service is followed to its target, a Service port
is mapped to the port its Endpoints list under the same name, and only ready addresses that
point at a Pod count. Each such Pod is a local pod whose container ports are Unix sockets under
``<pods dir>/<pod uid>/<port>`` (:mod:`devstack.podnet`). Names with a static route (the
Knative Services, whose pods are the local functions) resolve to those URLs instead.

The ``kubernetes`` Service of ``default`` is the API server: in a cluster the API server writes
its Endpoints itself, with its advertised address; the local one listens on loopback, which
an Endpoints object may not hold, so it writes none, and its address is given to the
resolver (``api_server``). Pods reach it so by name, as Knative's OIDC verifiers do
(``https://kubernetes.default.svc``, the issuer of ServiceAccount tokens).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
CLUSTER_DOMAIN = "cluster.local"
MAX_EXTERNAL_NAMES = 5
API_SERVICE = ("default", "kubernetes")


class NoRoute(LookupError):
    """Nothing answers at that address (a cluster would fail the DNS lookup or the connect)."""


@dataclass(frozen=True)
class Backend:
    """Where one connection goes: a Unix socket of a local pod, or a host and port."""

    unix: str | None = None
    host: str = ""
    port: int = 0

    def describe(self) -> str:
        return self.unix or f"{self.host}:{self.port}"


def service_name(host: str) -> tuple[str, str] | None:
    """``(name, namespace)`` for an in-cluster service host name, else ``None``."""
    labels = host.lower().rstrip(".").split(".")
    if labels[2:] in ([], ["svc"], ["svc", *CLUSTER_DOMAIN.split(".")]) and len(labels) >= 2:
        return labels[0], labels[1]
    return None


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def static_backends(urls: Sequence[str]) -> list[Backend]:
    """``http://host:port/`` URLs of a static route as backends."""
    found = []
    for url in urls:
        rest = url.split("://", 1)[-1].split("/", 1)[0]
        host, _, port = rest.rpartition(":")
        found.append(Backend(host=host or rest, port=int(port) if port.isdigit() else 80))
    return found


@dataclass
class Resolver:
    """Resolves ``(host, port)`` against lookups of the cluster's current objects.

    :param service: ``(namespace, name) -> Service`` or ``None``.
    :param service_by_ip: cluster IP -> Service or ``None``.
    :param endpoints: ``(namespace, name) -> Endpoints`` or ``None``.
    :param static: canonical ``name.namespace`` -> URLs (the Knative Services' local pods).
    :param api_server: where the API server listens (the ``kubernetes`` Service's endpoint).
    """

    service: Callable[[str, str], Obj | None]
    service_by_ip: Callable[[str], Obj | None]
    endpoints: Callable[[str, str], Obj | None]
    pods_dir: str
    static: Mapping[str, Sequence[str]]
    api_server: Backend | None = None

    def resolve(self, host: str, port: int) -> list[Backend]:
        """Every backend that may take the connection (raises :class:`NoRoute` if none)."""
        return self._resolve(host, port, MAX_EXTERNAL_NAMES)

    def _resolve(self, host: str, port: int, hops: int) -> list[Backend]:
        if is_ip(host):
            svc = self.service_by_ip(host)
            if svc is None:
                raise NoRoute(f"no Service has the cluster IP {host}")
        else:
            named = service_name(host)
            if named is None:
                raise NoRoute(f"{host} is not an in-cluster name")
            name, namespace = named
            urls = self.static.get(f"{name}.{namespace}")
            if urls:
                return static_backends(urls)
            svc = self.service(namespace, name)
            if svc is None:
                raise NoRoute(f"no Service {namespace}/{name}")
        spec = svc.get("spec") or {}
        if spec.get("type") == "ExternalName":
            if hops <= 0:
                raise NoRoute(f"too many ExternalName hops at {host}")
            return self._resolve(str(spec.get("externalName", "")), port, hops - 1)
        meta = svc["metadata"]
        if self.api_server is not None and (meta["namespace"], meta["name"]) == API_SERVICE:
            if not any(int(p.get("port", 0)) == port for p in spec.get("ports") or []):
                raise NoRoute(f"Service default/kubernetes:{port}: no such port")
            return [self.api_server]
        return self.pod_backends(svc, port, self.endpoints(meta["namespace"], meta["name"]))

    def pod_backends(self, svc: Obj, port: int, endpoints: Obj | None) -> list[Backend]:
        meta = svc["metadata"]
        where = f"{meta['namespace']}/{meta['name']}:{port}"
        ports = [p for p in (svc.get("spec") or {}).get("ports") or []
                 if int(p.get("port", 0)) == port]
        if not ports:
            raise NoRoute(f"Service {where}: no such port")
        port_name = ports[0].get("name") or ""
        found: list[Backend] = []
        for subset in (endpoints or {}).get("subsets") or []:
            numbers = [int(p["port"]) for p in subset.get("ports") or []
                       if (p.get("name") or "") == port_name]
            if not numbers:
                continue
            for address in subset.get("addresses") or []:
                ref = address.get("targetRef") or {}
                if ref.get("kind") == "Pod" and ref.get("uid"):
                    found.append(Backend(unix=f"{self.pods_dir}/{ref['uid']}/{numbers[0]}"))
        if not found:
            raise NoRoute(f"Service {where}: no ready endpoint")
        return found
