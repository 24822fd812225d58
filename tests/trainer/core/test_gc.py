"""Which labelled objects garbage collection deletes."""

from __future__ import annotations

from typing import Any

import pytest

from functions.trainer.core.apply import Stamp, object_id
from functions.trainer.core.gc import (
    ApiType,
    collectable,
    runtime_finalizers_without_legacy,
    stale_by_annotations,
    sweep_needed,
    sweepable,
)

Obj = dict[str, Any]
STAMP = Stamp(generation=2, name="default-trainer", uid="u-1", type="Kubeflow Trainer",
              version="2.3.0")
LABELS = {"platform.opendatahub.io/part-of": "trainer"}


def stamped(**changes: str) -> dict[str, str]:
    annotations = {
        "platform.opendatahub.io/instance.generation": "2",
        "platform.opendatahub.io/instance.name": "default-trainer",
        "platform.opendatahub.io/instance.uid": "u-1",
        "platform.opendatahub.io/type": "Kubeflow Trainer",
        "platform.opendatahub.io/version": "2.3.0",
    }
    for key, value in changes.items():
        full = {"generation": "platform.opendatahub.io/instance.generation",
                "uid": "platform.opendatahub.io/instance.uid",
                "type": "platform.opendatahub.io/type",
                "version": "platform.opendatahub.io/version"}[key]
        if value:
            annotations[full] = value
        else:
            del annotations[full]
    return annotations


def thing(kind: str = "ConfigMap", name: str = "c", api_version: str = "v1",
          annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
          **meta: Any) -> Obj:
    metadata: Obj = {"name": name, "namespace": "ns",
                     "labels": LABELS if labels is None else labels, **meta}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata}


@pytest.mark.parametrize(("annotations", "stamp", "expected"), [
    pytest.param(None, STAMP, False, id="no-annotations-kept"),
    pytest.param({"openshift.io/sa.scc.mcs": "s0"}, STAMP, True, id="foreign-annotations-only"),
    pytest.param(stamped(), STAMP, False, id="current"),
    pytest.param(stamped(generation="1"), STAMP, True, id="old-generation"),
    pytest.param(stamped(uid="u-0"), STAMP, True, id="other-instance"),
    pytest.param(stamped(version="2.2.0"), STAMP, True, id="old-release"),
    pytest.param(stamped(type="platform"), STAMP, True, id="other-release-type"),
    pytest.param(stamped(version=""), STAMP, True, id="version-missing"),
    pytest.param(stamped(), None, True, id="cleanup-takes-all-stamped"),
    pytest.param(None, None, False, id="cleanup-keeps-unannotated"),
])
def test_stale_by_annotations(annotations: dict[str, str] | None, stamp: Stamp | None,
                              expected: bool) -> None:
    assert stale_by_annotations(thing(annotations=annotations), stamp) is expected


@pytest.mark.parametrize(("obj", "stamp", "desired", "expected"), [
    pytest.param(thing(annotations=stamped(generation="1")), STAMP, None, True, id="stale"),
    pytest.param(thing(annotations=stamped(generation="1"), labels={}), STAMP, None, False,
                 id="unlabelled"),
    pytest.param(thing(annotations={**stamped(generation="1"),
                                    "opendatahub.io/managed": "false"}), STAMP, None, False,
                 id="opted-out"),
    pytest.param(thing(annotations=stamped(generation="1"),
                       deletionTimestamp="2026-01-01T00:00:00Z"), STAMP, None, False,
                 id="already-deleting"),
    pytest.param(thing("Namespace", annotations={"a": "b"}), None, None, False, id="namespace"),
    pytest.param(thing("CustomResourceDefinition", api_version="apiextensions.k8s.io/v1",
                       annotations={"a": "b"}), None, None, False, id="crd"),
    pytest.param(thing("Lease", api_version="coordination.k8s.io/v1", annotations={"a": "b"}),
                 None, None, False, id="lease"),
    pytest.param(thing("ClusterTrainingRuntime", api_version="trainer.kubeflow.org/v1alpha1",
                       annotations=stamped()), None, None, False, id="runtime-explicit-only"),
    pytest.param(thing(name="odh-trainer-config", annotations={"a": "b"}), None, None, False,
                 id="platform-configmap-protected"),
    pytest.param(thing(annotations=stamped(generation="1"),
                       ownerReferences=[{"kind": "Deployment", "controller": True}]), STAMP,
                 None, False, id="controller-owned"),
    pytest.param(thing("ReplicaSet", api_version="apps/v1",
                       annotations={"deployment.kubernetes.io/revision": "1"}), None, None,
                 False, id="replicaset-derived-from-deployment"),
    pytest.param(thing("Endpoints", annotations={"x": "y"}), None, None, False,
                 id="endpoints-derived-from-service"),
    pytest.param(thing(name="rhoai-config-old", annotations=stamped()), STAMP,
                 {object_id(thing(name="rhoai-config-new"))}, True,
                 id="current-but-no-longer-rendered"),
    pytest.param(thing(name="rhoai-config-new", annotations=stamped()), STAMP,
                 {object_id(thing(name="rhoai-config-new"))}, False, id="current-and-rendered"),
    pytest.param(thing(name="user", annotations={**stamped(uid="u-1"),
                                                 "platform.opendatahub.io/instance.name": "x"}),
                 STAMP, set(), False, id="not-stamped-by-this-instance-name"),
    pytest.param(thing("Deployment", api_version="apps/v1", annotations=stamped(),
                       labels={**LABELS, "app.kubernetes.io/name": "trainer-operator"}),
                 None, None, False, id="platform-trainer-operator-never-swept"),
    pytest.param(thing("ServiceAccount", annotations=stamped(),
                       labels={**LABELS, "operators.coreos.com/trainer.opendatahub": ""}),
                 None, None, False, id="olm-installed-never-swept"),
    pytest.param(thing("Deployment", api_version="apps/v1", annotations=stamped(),
                       labels={**LABELS, "app.kubernetes.io/name": "trainer"}),
                 None, None, True, id="our-operand-swept-on-cleanup"),
])
def test_collectable(obj: Obj, stamp: Stamp | None, desired: set[Any] | None,
                     expected: bool) -> None:
    assert collectable(obj, stamp, desired) is expected


@pytest.mark.parametrize(("group", "kind", "verbs", "expected"), [
    pytest.param("apps", "Deployment", {"list", "delete", "get"}, True, id="deployment"),
    pytest.param("", "Namespace", {"list", "delete"}, False, id="namespace"),
    pytest.param("apiextensions.k8s.io", "CustomResourceDefinition", {"list", "delete"}, False,
                 id="crd"),
    pytest.param("", "Event", {"list", "delete"}, False, id="event"),
    pytest.param("", "Binding", {"create"}, False, id="not-listable"),
    pytest.param("", "ComponentStatus", {"list", "get"}, False, id="not-deletable"),
])
def test_sweepable(group: str, kind: str, verbs: set[str], expected: bool) -> None:
    api_type = ApiType(group, "v1", kind.lower() + "s", kind, True, frozenset(verbs))
    assert sweepable(api_type) is expected


@pytest.mark.parametrize(("objs", "expected"), [
    pytest.param([], False, id="nothing"),
    pytest.param([thing(annotations=stamped())], False, id="all-current"),
    pytest.param([thing(annotations=stamped()), thing(annotations=stamped(version="1.0.0"))],
                 True, id="one-old-release"),
    pytest.param([thing(annotations=stamped(version="1.0.0"), labels={})], False,
                 id="unlabelled-ignored"),
    pytest.param([thing(annotations={**stamped(generation="1"),
                                     "opendatahub.io/managed": "false"})], False,
                 id="opted-out-ignored"),
    pytest.param([thing("CustomResourceDefinition", api_version="apiextensions.k8s.io/v1",
                        annotations={"controller-gen.kubebuilder.io/version": "v0.18.0"})],
                 False, id="unstamped-crd-ignored"),
])
def test_sweep_needed(objs: list[Obj], expected: bool) -> None:
    assert sweep_needed(objs, STAMP) is expected


@pytest.mark.parametrize(("finalizers", "expected"), [
    pytest.param(None, None, id="none"),
    pytest.param(["other"], None, id="absent"),
    pytest.param(["trainer.kubeflow.org/resource-in-use"], [], id="only"),
    pytest.param(["a", "trainer.kubeflow.org/resource-in-use", "b"], ["a", "b"], id="kept-others"),
])
def test_runtime_finalizers(finalizers: list[str] | None, expected: list[str] | None) -> None:
    obj = thing("ClusterTrainingRuntime", api_version="trainer.kubeflow.org/v1alpha1")
    if finalizers is not None:
        obj["metadata"]["finalizers"] = finalizers
    assert runtime_finalizers_without_legacy(obj, "trainer.kubeflow.org/resource-in-use") == \
        expected
