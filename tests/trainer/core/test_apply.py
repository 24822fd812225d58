"""Apply order, the stamped body, the customisers and the unchanged-object check."""

from __future__ import annotations

from typing import Any

import pytest

from functions.trainer.core.apply import (
    Action,
    Stamp,
    apply_order,
    contains,
    desired_body,
    plan_object,
)

Obj = dict[str, Any]
STAMP = Stamp(generation=3, name="default-trainer", uid="u-1", type="Kubeflow Trainer",
              version="2.3.0")
STAMPED = {
    "platform.opendatahub.io/instance.generation": "3",
    "platform.opendatahub.io/instance.name": "default-trainer",
    "platform.opendatahub.io/instance.uid": "u-1",
    "platform.opendatahub.io/type": "Kubeflow Trainer",
    "platform.opendatahub.io/version": "2.3.0",
}
TRAINER_REF = {"apiVersion": "components.platform.opendatahub.io/v1alpha1", "kind": "Trainer",
               "name": "default-trainer", "uid": "u-1"}
DSC_REF = {"apiVersion": "datasciencecluster.opendatahub.io/v1", "kind": "DataScienceCluster",
           "name": "default-dsc", "uid": "d-1"}


def make(kind: str, name: str = "x", api_version: str = "v1", namespace: str | None = None,
         **rest: Any) -> Obj:
    meta: Obj = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **rest}


def deployment(image: str = "img:1", replicas: int | None = None,
               resources: Obj | None = None, annotations: Obj | None = None) -> Obj:
    container: Obj = {"name": "manager", "image": image}
    if resources is not None:
        container["resources"] = resources
    spec: Obj = {"template": {"spec": {"containers": [container]}}}
    if replicas is not None:
        spec["replicas"] = replicas
    out = make("Deployment", "d", "apps/v1", "ns", spec=spec)
    if annotations:
        out["metadata"]["annotations"] = annotations
    return out


def test_apply_order_follows_kind_ranks() -> None:
    objs = [
        make("ValidatingWebhookConfiguration", "v", "admissionregistration.k8s.io/v1"),
        make("ClusterTrainingRuntime", "b", "trainer.kubeflow.org/v1alpha1"),
        make("Deployment", "d", "apps/v1", "ns"),
        make("MutatingWebhookConfiguration", "m", "admissionregistration.k8s.io/v1"),
        make("PodMonitor", "p", "monitoring.coreos.com/v1", "ns"),
        make("ClusterTrainingRuntime", "a", "trainer.kubeflow.org/v1alpha1"),
        make("ConfigMap", "c2", namespace="ns"),
        make("ConfigMap", "c1", namespace="ns"),
        make("ClusterRole", "r", "rbac.authorization.k8s.io/v1"),
        make("CustomResourceDefinition", "crd", "apiextensions.k8s.io/v1"),
        make("Namespace", "ns"),
    ]
    assert [(o["kind"], o["metadata"]["name"]) for o in apply_order(objs)] == [
        ("Namespace", "ns"), ("CustomResourceDefinition", "crd"), ("ClusterRole", "r"),
        ("ConfigMap", "c1"), ("ConfigMap", "c2"), ("Deployment", "d"),
        ("PodMonitor", "p"), ("ClusterTrainingRuntime", "a"), ("ClusterTrainingRuntime", "b"),
        ("MutatingWebhookConfiguration", "m"), ("ValidatingWebhookConfiguration", "v")]


@pytest.mark.parametrize(("desired", "observed", "check"), [
    pytest.param(make("ConfigMap", "c", namespace="ns"), None,
                 lambda b: b["metadata"]["annotations"] == STAMPED, id="five-annotations"),
    pytest.param(make("CustomResourceDefinition", "c", "apiextensions.k8s.io/v1"), None,
                 lambda b: "annotations" not in b["metadata"], id="crd-not-stamped"),
    pytest.param({**make("ClusterRole", "agg", "rbac.authorization.k8s.io/v1"),
                  "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"a": "b"}}]},
                  "rules": [{"verbs": ["get"]}]}, None,
                 lambda b: "rules" not in b and "aggregationRule" in b,
                 id="aggregated-clusterrole-without-rules"),
    pytest.param({**make("ClusterRole", "plain", "rbac.authorization.k8s.io/v1"),
                  "rules": [{"verbs": ["get"]}]}, None,
                 lambda b: b["rules"] == [{"verbs": ["get"]}], id="plain-clusterrole-keeps-rules"),
    pytest.param({**make("Secret", "s", namespace="ns"), "status": {"x": 1},
                  "metadata": {"name": "s", "resourceVersion": "9", "managedFields": [],
                               "uid": "q"}}, None,
                 lambda b: "status" not in b and set(b["metadata"]) == {"name", "annotations"},
                 id="server-fields-stripped"),
    pytest.param(deployment(), deployment(replicas=4, resources={"limits": {"cpu": "2"}}),
                 lambda b: b["spec"]["replicas"] == 4 and
                 b["spec"]["template"]["spec"]["containers"][0]["resources"] ==
                 {"limits": {"cpu": "2"}}, id="deployment-user-tuning-kept"),
    pytest.param(deployment(), deployment(replicas=4, resources={"limits": {"cpu": "2"}},
                                          annotations={"opendatahub.io/managed": "true"}),
                 lambda b: "replicas" not in b["spec"] and
                 "resources" not in b["spec"]["template"]["spec"]["containers"][0],
                 id="deployment-managed-true-enforces"),
    pytest.param(deployment(), None, lambda b: "replicas" not in b["spec"],
                 id="deployment-created-as-rendered"),
])
def test_desired_body(desired: Obj, observed: Obj | None, check: Any) -> None:
    assert check(desired_body(desired, observed, STAMP))


def applied(obj: Obj) -> Obj:
    """What the server would hold after applying ``obj`` (plus some server-side fields)."""
    out = desired_body(obj, None, STAMP)
    out["metadata"].update({"uid": "s-1", "resourceVersion": "7", "generation": 1})
    out["status"] = {"observedGeneration": 1}
    return out


@pytest.mark.parametrize(("desired", "observed", "action"), [
    pytest.param(make("ConfigMap", "c", namespace="ns", data={"a": "1"}), None, Action.APPLY,
                 id="absent-applies"),
    pytest.param(make("ConfigMap", "c", namespace="ns", data={"a": "1"}),
                 applied(make("ConfigMap", "c", namespace="ns", data={"a": "1"})),
                 Action.UNCHANGED, id="same-is-unchanged"),
    pytest.param(make("ConfigMap", "c", namespace="ns", data={"a": "1"}),
                 applied(make("ConfigMap", "c", namespace="ns", data={"a": "2"})),
                 Action.APPLY, id="drifted-applies"),
    pytest.param(deployment("img:2"), applied(deployment("img:1")), Action.APPLY,
                 id="changed-image-applies"),
    pytest.param(deployment(), applied(deployment(replicas=5)), Action.UNCHANGED,
                 id="user-scaled-replicas-unchanged"),
    pytest.param(make("ConfigMap", "c", namespace="ns"),
                 {**applied(make("ConfigMap", "c", namespace="ns")),
                  "metadata": {"name": "c", "namespace": "ns",
                               "annotations": {**STAMPED, "platform.opendatahub.io/"
                                               "instance.generation": "2"}}},
                 Action.APPLY, id="old-generation-restamps"),
    pytest.param(make("ConfigMap", "c", namespace="ns", data={"a": "1"}),
                 {**make("ConfigMap", "c", namespace="ns", data={"a": "2"}),
                  "metadata": {"name": "c", "namespace": "ns",
                               "annotations": {"opendatahub.io/managed": "false"}}},
                 Action.OPTED_OUT, id="live-opt-out"),
    pytest.param({**make("ConfigMap", "c", namespace="ns"),
                  "metadata": {"name": "c", "namespace": "ns",
                               "annotations": {"opendatahub.io/managed": "false"}}},
                 make("ConfigMap", "c", namespace="ns", data={"user": "1"}),
                 Action.OPTED_OUT, id="desired-opt-out-is-create-only"),
    pytest.param({**make("ConfigMap", "c", namespace="ns"),
                  "metadata": {"name": "c", "namespace": "ns",
                               "annotations": {"opendatahub.io/managed": "false"}}},
                 None, Action.APPLY, id="desired-opt-out-creates"),
])
def test_plan_action(desired: Obj, observed: Obj | None, action: Action) -> None:
    assert plan_object(desired, observed, STAMP).action is action


@pytest.mark.parametrize(("kind", "api_version", "manager"), [
    pytest.param("CustomResourceDefinition", "apiextensions.k8s.io/v1", "platform.opendatahub.io",
                 id="crd"),
    pytest.param("Deployment", "apps/v1", "trainer-module-controller", id="other"),
])
def test_field_manager(kind: str, api_version: str, manager: str) -> None:
    assert plan_object(make(kind, api_version=api_version), None, STAMP).field_manager == manager


@pytest.mark.parametrize(("refs", "opted_out", "expected"), [
    pytest.param([], False, None, id="none"),
    pytest.param([TRAINER_REF], False, None, id="only-trainer-kept"),
    pytest.param([DSC_REF, TRAINER_REF], False, [TRAINER_REF], id="foreign-stripped"),
    pytest.param([DSC_REF], False, [], id="all-foreign"),
    pytest.param([TRAINER_REF], True, [], id="opted-out-loses-trainer-ref"),
])
def test_owner_references(refs: list[Obj], opted_out: bool, expected: list[Obj] | None) -> None:
    live = applied(make("ConfigMap", "c", namespace="ns"))
    live["metadata"]["ownerReferences"] = refs
    if opted_out:
        live["metadata"]["annotations"]["opendatahub.io/managed"] = "false"
    plan = plan_object(make("ConfigMap", "c", namespace="ns"), live, STAMP)
    assert plan.owner_references == expected


@pytest.mark.parametrize(("observed", "desired", "expected"), [
    pytest.param({"a": 1, "b": 2}, {"a": 1}, True, id="extra-observed-keys"),
    pytest.param({"a": 1}, {"a": 1, "b": 2}, False, id="missing-key"),
    pytest.param({}, {"data": {}}, True, id="empty-map-matches-absent"),
    pytest.param({}, {"items": []}, True, id="empty-list-matches-absent"),
    pytest.param({"x": None}, {"x": {}}, True, id="empty-map-matches-null"),
    pytest.param({"l": [{"a": 1, "d": 0}, {"a": 2}]}, {"l": [{"a": 1}, {"a": 2}]}, True,
                 id="list-items-subset"),
    pytest.param({"l": [{"a": 1}]}, {"l": [{"a": 1}, {"a": 2}]}, False, id="list-length"),
    pytest.param({"l": [{"a": 2}, {"a": 1}]}, {"l": [{"a": 1}, {"a": 2}]}, False,
                 id="list-order"),
    pytest.param({"n": 1}, {"n": 1.0}, True, id="int-float"),
    pytest.param({"n": "1"}, {"n": 1}, False, id="string-vs-int"),
    pytest.param({"b": 1}, {"b": True}, False, id="bool-vs-int"),
    pytest.param({"limits": {"cpu": "1"}}, {"limits": {"cpu": "1000m"}}, True,
                 id="quantity-canonical"),
    pytest.param({"requests": {"memory": "1Gi"}}, {"requests": {"memory": "1024Mi"}}, True,
                 id="quantity-binary"),
    pytest.param({"requests": {"memory": "1G"}}, {"requests": {"memory": "1Gi"}}, False,
                 id="quantity-different"),
    pytest.param({"tag": "3.40"}, {"tag": "3.4"}, False, id="no-quantity-outside-resources"),
])
def test_contains(observed: Any, desired: Any, expected: bool) -> None:
    assert contains(observed, desired) is expected
