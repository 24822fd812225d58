"""``python -m functions doctor`` against a real API server, in three states of one cluster:
bare (no Knative), prepared like a healthy OpenShift Serverless cluster (the Knative CRDs,
Knative's namespaces and Deployments as OpenShift Serverless labels them, the install's RBAC,
event sources and NetworkPolicy next to a platform deny-by-default policy, a Ready Trainer),
and then broken (the platform's trainer-operator running and our Trainer refusing to act next
to it, our NetworkPolicy gone, the training operator's v1-only MPIJob CRD under a source that
watches v2beta1, reconcile's Lease binding gone, cluster-admin bound to gc).

The cluster is this module's own: the states need CRDs and namespaces the shared session
cluster must not lose or gain. Knative's Deployments only run pods (kwok): the doctor judges
what Knative's objects say, which is all it can see on a real cluster too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.cluster.manifests import apply_objects, load_documents
from devstack.cluster.runner import LocalCluster
from functions.__main__ import main
from functions.kube import resources
from functions.kube.client import KubeClient
from tests.deploy.support import REPO, build
from tests.support import wait_for

pytestmark = pytest.mark.cluster

Obj = dict[str, Any]
NAMESPACE = "opendatahub"
MANAGER = "doctor-test"
SERVERLESS = {"knative.openshift.io/part-of": "openshift-serverless"}
KNATIVE = {"knative-serving": ("controller", "activator", "autoscaler", "webhook"),
           "knative-serving-ingress": ("3scale-kourier-gateway",),
           "knative-eventing": ("eventing-controller", "eventing-webhook",
                                "kafka-broker-receiver", "kafka-broker-dispatcher")}
RBAC = "rbac.authorization.k8s.io"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


@pytest.fixture(scope="module")
def own_cluster(bin_dir: Path) -> Iterator[LocalCluster]:
    local = LocalCluster(bin_dir)
    local.start()
    try:
        yield local
    finally:
        local.stop()


def doctor(cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Obj]]:
    code = main(["doctor", "--kubeconfig", str(cluster.kubeconfig), "-n", NAMESPACE, "--json"])
    findings = json.loads(capsys.readouterr().out)
    return code, {f["check"]: f for f in findings}


def statuses(findings: dict[str, Obj]) -> dict[str, str]:
    return {check: f["status"] for check, f in findings.items()}


def deployment(namespace: str, name: str, version: str = "1.16.2") -> Obj:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {**labels, "app.kubernetes.io/version": version}},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "c", "image": "x:1"}]}}}}


def namespace(name: str, labels: dict[str, str] | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels or {}}}


def configmap(namespace: str, name: str, data: dict[str, str]) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace}, "data": data}


def platform_deny_by_default() -> Obj:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "platform-deny-by-default", "namespace": NAMESPACE},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": [
                {"namespaceSelector": {"matchLabels": {
                    "opendatahub.io/generated-namespace": "true"}}}]}]}}


def ready(status: str, reason: str, message: str = "") -> Obj:
    return {"type": "Ready", "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z"}


def sources(bin_dir: Path) -> list[Obj]:
    return [o for o in build(bin_dir / "kustomize", "eventing") if o["kind"] == "ApiServerSource"]


def set_ready(kube: KubeClient, obj: Obj, condition: Obj) -> None:
    """What Knative's controllers (or our Trainer) would write in the object's status."""
    meta = obj["metadata"]
    kube.apply_status({"apiVersion": obj["apiVersion"], "kind": obj["kind"],
                       "metadata": {"name": meta["name"],
                                    **({"namespace": meta["namespace"]}
                                       if "namespace" in meta else {})},
                       "status": {"conditions": [condition]}}, MANAGER)


TRAINER: Obj = {"apiVersion": "components.platform.opendatahub.io/v1alpha1", "kind": "Trainer",
                "metadata": {"name": "default-trainer"},
                "spec": {"appNamespace": NAMESPACE, "managementState": "Managed"}}


def prepare(kube: KubeClient, bin_dir: Path) -> None:
    """A cluster as OpenShift Serverless, JobSet and our install's RBAC leave it."""
    crds = bin_dir / "crds"
    apply_objects(kube, load_documents([crds / "serving", crds / "eventing", crds / "jobset",
                                        REPO / "config" / "crd"]), MANAGER, timeout=60)
    objs: list[Obj] = [namespace(n, SERVERLESS) for n in KNATIVE]
    objs += [deployment(ns, name) for ns, names in KNATIVE.items() for name in names]
    objs += [configmap("knative-serving", "config-features", {}),
             configmap("knative-eventing", "config-features", {"delivery-timeout": "enabled",
                                                               "authentication-oidc": "enabled"}),
             configmap("knative-eventing", "kafka-broker-config",
                       {"bootstrap.servers": "kafka:9092"}),
             namespace(NAMESPACE), platform_deny_by_default()]
    rendered = build(bin_dir / "kustomize", "config/overlays/openshift")
    objs += [o for o in rendered if o["kind"] in (*RBAC_KINDS, "NetworkPolicy")]
    apply_objects(kube, [*objs, *sources(bin_dir), TRAINER], MANAGER)
    for obj in [*sources(bin_dir), TRAINER]:
        set_ready(kube, obj, ready("True", "Ready"))
    wait_for(lambda: all(
        (d := kube.get(resources.DEPLOYMENTS, name, ns)) is not None
        and (d.get("status") or {}).get("readyReplicas") == 1
        for ns, names in KNATIVE.items() for name in names), 90, 0.5,
        "Knative's Deployments to be ready")


def test_doctor_in_three_states(own_cluster: LocalCluster, bin_dir: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    kube = own_cluster.client()

    code, found = doctor(own_cluster, capsys)
    assert code == 1
    assert {k: v for k, v in statuses(found).items() if k in (
        "knative-serving", "knative-eventing", "jobset", "conflicts-trainer",
        "network-policy", "permissions-reconcile", "event-path", "trainer")} == {
        "knative-serving": "fail", "knative-eventing": "fail", "jobset": "fail",
        "conflicts-trainer": "pass", "network-policy": "skip",
        "permissions-reconcile": "skip", "event-path": "skip", "trainer": "skip"}
    assert "not served" in found["knative-serving"]["summary"]

    prepare(kube, bin_dir)
    code, found = doctor(own_cluster, capsys)
    assert [c for c, s in statuses(found).items() if s in ("fail", "warn")] == []
    assert code == 0
    assert "Knative Serving 1.16" in found["knative-serving"]["summary"]
    assert "Knative Eventing 1.16" in found["knative-eventing"]["summary"]
    # The func path's all-in-one identity is not part of this install, nor (dead letters in
    # Kafka) the dead-letter sink's.
    assert {c: s for c, s in statuses(found).items() if c.startswith("permissions-")} == {
        "permissions-reconcile": "pass", "permissions-gc": "pass", "permissions-status": "pass",
        "permissions-events": "pass", "permissions-functions": "skip",
        "permissions-dead-letters": "skip"}
    assert "authentication-oidc enabled" in found["delivery-auth"]["summary"]
    assert {c: statuses(found)[c] for c in ("event-sources", "event-path", "trainer")} == {
        "event-sources": "pass", "event-path": "pass", "trainer": "pass"}
    assert "admitted" in found["network-policy"]["summary"]

    # Broken: the platform's trainer-operator runs (and our Trainer says so), our
    # NetworkPolicy is gone, mpijobs is the training operator's v1-only CRD while a source
    # watches v2beta1, reconcile may not take the queue's Lease, gc is cluster-admin, and
    # Eventing runs without authentication-oidc.
    apply_objects(kube, [{**deployment(NAMESPACE, "trainer-operator-controller-manager"),
                          "metadata": {"name": "trainer-operator-controller-manager",
                                       "namespace": NAMESPACE,
                                       "labels": {"app.kubernetes.io/name": "trainer-operator"}}}],
                  MANAGER)
    set_ready(kube, TRAINER, ready("False", "ConflictingController",
                                   "the platform's trainer-operator manages the Trainer"))
    kube.delete(resources.Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"),
                "odh-training-allow-knative", NAMESPACE)
    kube.delete(resources.Resource(RBAC, "v1", "rolebindings", "RoleBinding"),
                "odh-training-reconcile-lease", NAMESPACE)
    gc_admin: Obj = {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding",
                     "metadata": {"name": "gc-admin"},
                     "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "cluster-admin"},
                     "subjects": [{"kind": "ServiceAccount", "name": "odh-training-gc",
                                   "namespace": NAMESPACE}]}
    kube.delete(resources.CRDS, "mpijobs.kubeflow.org")
    wait_for(lambda: kube.get(resources.CRDS, "mpijobs.kubeflow.org") is None, 60, 0.2,
             "the MPIJob CRD to go")
    v1_only: Obj = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                    "metadata": {"name": "mpijobs.kubeflow.org"},
                    "spec": {"group": "kubeflow.org", "scope": "Namespaced",
                             "names": {"plural": "mpijobs", "kind": "MPIJob"},
                             "versions": [{"name": "v1", "served": True, "storage": True,
                                           "schema": {"openAPIV3Schema": {
                                               "type": "object",
                                               "x-kubernetes-preserve-unknown-fields": True}}}]}}
    apply_objects(kube, [v1_only, gc_admin,
                         configmap("knative-eventing", "config-features",
                                   {"delivery-timeout": "enabled"})], MANAGER)
    code, found = doctor(own_cluster, capsys)
    assert code == 1
    assert {c: s for c, s in statuses(found).items() if s != "pass"} == {
        "conflicts-trainer": "fail", "conflicts-jobs": "fail", "network-policy": "fail",
        "event-sources": "fail", "permissions-reconcile": "fail", "permissions-gc": "warn",
        "permissions-functions": "skip", "permissions-dead-letters": "skip",
        "delivery-auth": "fail", "trainer": "fail"}
    assert "trainer-operator-controller-manager" in found["conflicts-trainer"]["summary"]
    assert "serves v1, not v2beta1" in found["conflicts-jobs"]["summary"]
    assert any("odh-training-mpijobs: MPIJob kubeflow.org/v2beta1" in d
               for d in found["event-sources"]["details"])
    assert "knative-serving -> odh-training-reconcile" in found["network-policy"]["details"]
    assert any("leases" in d for d in found["permissions-reconcile"]["details"])
    assert any("trainer-operator manages" in d for d in found["trainer"]["details"])
