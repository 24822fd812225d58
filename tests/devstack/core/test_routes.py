from __future__ import annotations

from typing import Any

import pytest

from devstack.core.routes import Backend, NoRoute, Resolver, service_name

Obj = dict[str, Any]
PODS = "/run/p"


def service(name: str, namespace: str, *, ip: str = "10.96.0.10",
            ports: list[Obj] | None = None, external: str | None = None) -> Obj:
    spec: Obj = {"clusterIP": ip, "ports": ports if ports is not None
                 else [{"name": "http", "port": 80, "targetPort": 8080}]}
    if external is not None:
        spec = {"type": "ExternalName", "externalName": external}
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def endpoints(*subsets: Obj) -> Obj:
    return {"subsets": list(subsets)}


def subset(uids: list[str], ports: list[Obj] | None = None, *,
           not_ready: tuple[str, ...] = ()) -> Obj:
    return {"addresses": [{"ip": "10.244.0.1", "targetRef": {"kind": "Pod", "uid": u}}
                          for u in uids],
            "notReadyAddresses": [{"ip": "10.244.0.2", "targetRef": {"kind": "Pod", "uid": u}}
                                  for u in not_ready],
            "ports": ports if ports is not None else [{"name": "http", "port": 8080}]}


def resolver(services: list[Obj], eps: dict[tuple[str, str], Obj],
             static: dict[str, list[str]] | None = None,
             api_server: Backend | None = None) -> Resolver:
    by_key = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in services}
    return Resolver(
        service=lambda ns, name: by_key.get((ns, name)),
        service_by_ip=lambda ip: next((s for s in services
                                       if s["spec"].get("clusterIP") == ip), None),
        endpoints=lambda ns, name: eps.get((ns, name)),
        pods_dir=PODS, static=static or {}, api_server=api_server)


INGRESS = service("broker-ingress", "knative-eventing")
INGRESS_EPS = {("knative-eventing", "broker-ingress"): endpoints(subset(["u1", "u2"]))}


@pytest.mark.parametrize(("host", "expected"), [
    pytest.param("broker-ingress.knative-eventing", ("broker-ingress", "knative-eventing"),
                 id="short"),
    pytest.param("a.b.svc", ("a", "b"), id="svc"),
    pytest.param("A.B.svc.cluster.local.", ("a", "b"), id="fqdn-case-and-root-dot"),
    pytest.param("a.b.svc.example.com", None, id="other-domain"),
    pytest.param("localhost", None, id="single-label"),
])
def test_service_name(host: str, expected: tuple[str, str] | None) -> None:
    assert service_name(host) == expected


@pytest.mark.parametrize(("host", "port", "expected"), [
    pytest.param("broker-ingress.knative-eventing.svc.cluster.local", 80,
                 [Backend(unix=f"{PODS}/u1/8080"), Backend(unix=f"{PODS}/u2/8080")],
                 id="name-to-ready-pods-target-port"),
    pytest.param("10.96.0.10", 80,
                 [Backend(unix=f"{PODS}/u1/8080"), Backend(unix=f"{PODS}/u2/8080")],
                 id="cluster-ip"),
    pytest.param("odh-training-gc.opendatahub.svc.cluster.local", 80,
                 [Backend(host="127.0.0.1", port=4001)], id="static-route"),
    pytest.param("alias.default", 80,
                 [Backend(unix=f"{PODS}/u1/8080"), Backend(unix=f"{PODS}/u2/8080")],
                 id="external-name-followed"),
])
def test_resolve(host: str, port: int, expected: list[Backend]) -> None:
    found = resolver(
        [INGRESS, service("alias", "default",
                          external="broker-ingress.knative-eventing.svc.cluster.local")],
        INGRESS_EPS,
        {"odh-training-gc.opendatahub": ["http://127.0.0.1:4001/"]}).resolve(host, port)
    assert found == expected


API = Backend(host="127.0.0.1", port=6443)
KUBERNETES = service("kubernetes", "default", ip="10.96.0.1",
                     ports=[{"name": "https", "port": 443, "targetPort": 6443}])


@pytest.mark.parametrize("host", [
    pytest.param("kubernetes.default.svc", id="by-name"),
    pytest.param("kubernetes.default.svc.cluster.local", id="fqdn"),
    pytest.param("kubernetes.default", id="short"),
    pytest.param("10.96.0.1", id="cluster-ip"),
])
def test_the_kubernetes_service_is_the_api_server(host: str) -> None:
    """It has no Endpoints here (the API server's address is loopback) and still resolves,
    on its Service port only."""
    found = resolver([KUBERNETES, INGRESS], INGRESS_EPS, api_server=API)
    assert found.resolve(host, 443) == [API]
    with pytest.raises(NoRoute):
        found.resolve(host, 80)


def test_without_its_address_the_kubernetes_service_is_like_any_other() -> None:
    with pytest.raises(NoRoute, match="no ready endpoint"):
        resolver([KUBERNETES], {}).resolve("kubernetes.default.svc", 443)


@pytest.mark.parametrize(("services", "eps", "host", "port"), [
    pytest.param([INGRESS], INGRESS_EPS, "example.com", 80, id="not-in-cluster"),
    pytest.param([INGRESS], INGRESS_EPS, "missing.knative-eventing", 80, id="no-service"),
    pytest.param([INGRESS], INGRESS_EPS, "10.96.9.9", 80, id="unknown-cluster-ip"),
    pytest.param([INGRESS], INGRESS_EPS, "broker-ingress.knative-eventing", 81,
                 id="no-such-port"),
    pytest.param([INGRESS], {}, "broker-ingress.knative-eventing", 80, id="no-endpoints"),
    pytest.param([INGRESS],
                 {("knative-eventing", "broker-ingress"): endpoints(subset([], not_ready=("u",)))},
                 "broker-ingress.knative-eventing", 80, id="only-not-ready"),
    pytest.param([INGRESS],
                 {("knative-eventing", "broker-ingress"): endpoints(
                     subset(["u"], [{"name": "metrics", "port": 9090}]))},
                 "broker-ingress.knative-eventing", 80, id="port-name-differs"),
    pytest.param([service("loop", "default", external="loop.default")], {}, "loop.default",
                 80, id="external-name-loop"),
])
def test_no_route(services: list[Obj], eps: dict[tuple[str, str], Obj], host: str,
                  port: int) -> None:
    with pytest.raises(NoRoute):
        resolver(services, eps).resolve(host, port)
