"""The installs' NetworkPolicies admit Knative's namespaces to the function Services and the
dead-letter sink, and nobody else: judged on the rendered objects with the NetworkPolicy
semantics of :mod:`functions.doctor.core.netpol` (no CNI runs here, so no packet is sent), alone
and next to a platform-like deny-by-default policy. The cluster variant applies the same objects
to the local API server and judges what it stored (defaults included).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devstack.cluster.manifests import apply_objects
from functions.doctor.core.netpol import Endpoint, admits
from functions.kube.client import KubeClient
from functions.kube.resources import Resource
from tests.deploy.support import build

Obj = dict[str, Any]
NAMESPACE = "opendatahub"
QUEUE_PROXY = 8012
USER_PORT = 8080  # the function container's own port, which Knative names user-port
SERVERLESS = {"knative.openshift.io/part-of": "openshift-serverless"}
RECEIVERS = ("odh-training-reconcile", "odh-training-gc", "odh-training-status",
             "odh-training-dead-letters", "odh-training-functions", "odh-training-api")
NETWORK_POLICIES = Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")


def namespace(name: str, **labels: str) -> Endpoint:
    return Endpoint(name, {"kubernetes.io/metadata.name": name, **labels})


# (install, Knative namespaces as that platform labels them)
KNATIVE = {
    "config/default": [namespace(n) for n in ("knative-serving", "kourier-system",
                                              "knative-eventing")],
    "config/overlays/openshift": [namespace(n, **SERVERLESS) for n in (
        "knative-serving", "knative-serving-ingress", "knative-eventing", "knative-kafka")],
}
OTHERS = [
    namespace("team-a"),
    namespace(NAMESPACE),  # the install's own namespace (the event source adapters run here)
    namespace("openshift-monitoring", **{"network.openshift.io/policy-group": "monitoring"}),
    namespace("redhat-ods-applications", **{"opendatahub.io/generated-namespace": "true"}),
    # Knative's namespaces on the other platform's terms do not count.
    namespace("knative-serving-ingress"),
]


def platform_deny_by_default() -> Obj:
    """Like the platform's policy on its applications namespace: every pod isolated; its own
    namespaces, the router and monitoring admitted."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "platform-deny-by-default", "namespace": NAMESPACE},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": [
                {"namespaceSelector": {"matchLabels": {
                    "opendatahub.io/generated-namespace": "true"}}},
                {"namespaceSelector": {"matchLabels": {
                    "network.openshift.io/policy-group": "ingress"}}},
                {"namespaceSelector": {"matchLabels": {
                    "network.openshift.io/policy-group": "monitoring"}}}]}]}}


def pod(service: str) -> Endpoint:
    """A pod of a Knative Service as Knative labels it."""
    return Endpoint(NAMESPACE, {"kubernetes.io/metadata.name": NAMESPACE},
                    {"serving.knative.dev/service": service,
                     "app.kubernetes.io/part-of": "odh-training"},
                    {"queue-port": QUEUE_PROXY, "user-port": USER_PORT})


def policies(objs: list[Obj]) -> list[Obj]:
    return [o for o in objs if o["kind"] == "NetworkPolicy"]


@pytest.fixture(scope="module")
def rendered(bin_dir: Path) -> dict[str, list[Obj]]:
    return {install: policies(build(bin_dir / "kustomize", install)) for install in KNATIVE}


@pytest.mark.parametrize("install", list(KNATIVE))
def test_install_ships_one_policy_for_the_receivers(rendered: dict[str, list[Obj]],
                                                    install: str) -> None:
    (policy,) = rendered[install]
    assert policy["metadata"] == {"name": "odh-training-allow-knative", "namespace": NAMESPACE,
                                  "labels": {"app.kubernetes.io/part-of": "odh-training"}}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert "egress" not in policy["spec"]


def judge(objs: list[Obj], install: str) -> dict[str, set[str]]:
    """Which source namespaces reach each receiver."""
    sources = KNATIVE[install] + OTHERS
    return {service: {s.namespace for s in sources if admits(objs, s, pod(service), QUEUE_PROXY)}
            for service in RECEIVERS}


@pytest.mark.parametrize("install", list(KNATIVE))
@pytest.mark.parametrize("with_platform", [pytest.param(False, id="alone"),
                                           pytest.param(True, id="with-platform-deny")])
def test_knative_and_only_knative_reaches_the_receivers(
        rendered: dict[str, list[Obj]], install: str, with_platform: bool) -> None:
    objs = rendered[install] + ([platform_deny_by_default()] if with_platform else [])
    knative = {s.namespace for s in KNATIVE[install]}
    platform = {"openshift-monitoring", "redhat-ods-applications"} if with_platform else set()
    assert judge(objs, install) == dict.fromkeys(RECEIVERS, knative | platform)


@pytest.mark.parametrize("install", list(KNATIVE))
def test_the_platform_policy_alone_blocks_knative(install: str) -> None:
    """The check is real: without our policy the deny-by-default policy drops deliveries."""
    reached = judge([platform_deny_by_default()], install)
    assert all(not reached[s] & {n.namespace for n in KNATIVE[install]} for s in RECEIVERS)


UWM = "openshift-user-workload-monitoring"


@pytest.mark.parametrize(("source", "port", "admitted"), [
    pytest.param(Endpoint(UWM, {"kubernetes.io/metadata.name": UWM},
                          {"app.kubernetes.io/name": "prometheus"}), USER_PORT, True,
                 id="prometheus-to-the-metrics-port"),
    pytest.param(Endpoint(UWM, {"kubernetes.io/metadata.name": UWM},
                          {"app.kubernetes.io/name": "prometheus"}), QUEUE_PROXY, False,
                 id="prometheus-to-the-queue-proxy"),
    pytest.param(Endpoint(UWM, {"kubernetes.io/metadata.name": UWM},
                          {"app.kubernetes.io/name": "thanos-ruler"}), USER_PORT, False,
                 id="another-pod-of-monitoring"),
    pytest.param(Endpoint("team-a", {"kubernetes.io/metadata.name": "team-a"},
                          {"app.kubernetes.io/name": "prometheus"}), USER_PORT, False,
                 id="a-prometheus-elsewhere"),
])
@pytest.mark.parametrize("with_platform", [pytest.param(False, id="alone"),
                                           pytest.param(True, id="with-platform-deny")])
def test_user_workload_monitoring_reaches_the_metrics_port_only(
        rendered: dict[str, list[Obj]], source: Endpoint, port: int, admitted: bool,
        with_platform: bool) -> None:
    """On OpenShift the PodMonitor's Prometheus scrapes /metrics on user-port; it reaches
    that port of every receiver and nothing else. (The port also takes POST /: a delivery
    there still needs the Broker's token, functions/runtime/delivery_auth.py.)"""
    objs = rendered["config/overlays/openshift"] + (
        [platform_deny_by_default()] if with_platform else [])
    assert {service: admits(objs, source, pod(service), port) for service in RECEIVERS} == \
        dict.fromkeys(RECEIVERS, admitted)


def test_other_pods_of_the_namespace_are_left_alone(rendered: dict[str, list[Obj]]) -> None:
    """The event source adapters (and anything else not served by Knative) keep whatever the
    namespace's own policies say."""
    for objs in rendered.values():
        target = Endpoint(NAMESPACE, {},
                          {"sources.knative.dev/apiServerSource": "odh-training-objects"}, {})
        assert admits(objs, namespace("team-a"), target, 8080)


@pytest.mark.parametrize("install", list(KNATIVE))
def test_policies_as_stored_by_the_api_server(kube: KubeClient, bin_dir: Path, install: str,
                                              rendered: dict[str, list[Obj]]) -> None:
    """Applied to a real API server (validation, defaulting) next to the platform's policy,
    read back, and judged again; a namespace per install keeps the two apart."""
    target = f"netpol-{install.rsplit('/', 1)[-1]}"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": target}},
               "odh-training-tests")
    objs = [{**o, "metadata": {**o["metadata"], "namespace": target}}
            for o in [*rendered[install], platform_deny_by_default()]]
    apply_objects(kube, objs, "odh-training-tests")
    stored = [{**o, "metadata": {**o["metadata"], "namespace": NAMESPACE}}
              for o in kube.list(NETWORK_POLICIES, target)]
    assert len(stored) == 2
    knative = {s.namespace for s in KNATIVE[install]}
    platform = {"openshift-monitoring", "redhat-ods-applications"}
    assert judge(stored, install) == dict.fromkeys(RECEIVERS, knative | platform)
