"""Other controllers of our objects: who they are, and what each conflict stops."""

from __future__ import annotations

from typing import Any

import pytest

from functions.platform.core.coexistence import (
    Crd,
    DscComponent,
    Platform,
    Scope,
    Workload,
    blocking,
    conflicts,
    dsc_components,
    managed_elsewhere,
    summary,
)

Obj = dict[str, Any]
TRAINER_OPERATOR = Workload(namespace="opendatahub", name="trainer-operator-controller-manager")
TRAINING_OPERATOR = Workload(namespace="opendatahub", name="kubeflow-training-operator")


def crd(name: str, served: tuple[str, ...], **labels: str) -> dict[str, Crd]:
    return {name: Crd(name=name, served=served, labels=labels)}


@pytest.mark.parametrize(("platform", "reasons"), [
    pytest.param(Platform(), [], id="nothing-else-runs"),
    pytest.param(Platform(trainer_operators=(TRAINER_OPERATOR,)),
                 [(Scope.TRAINER, "PlatformTrainerOperator")], id="platform-trainer-operator"),
    pytest.param(Platform(trainer_operators=(TRAINER_OPERATOR.model_copy(
        update={"replicas": 0}),)), [], id="trainer-operator-scaled-to-zero"),
    pytest.param(Platform(training_operators=(TRAINING_OPERATOR,)),
                 [(Scope.JOBS, "TrainingOperator")], id="training-operator"),
    pytest.param(Platform(dsc=(DscComponent(cluster="default-dsc", component="trainer",
                                            management_state="Managed"),)),
                 [(Scope.TRAINER, "PlatformComponentManaged")], id="dsc-trainer-managed"),
    pytest.param(Platform(dsc=(DscComponent(cluster="default-dsc", component="trainer",
                                            management_state="Removed"),)),
                 [], id="dsc-trainer-removed"),
    pytest.param(Platform(dsc=(DscComponent(cluster="default-dsc", component="trainingoperator",
                                            management_state="Managed"),)),
                 [(Scope.JOBS, "PlatformComponentManaged")], id="dsc-trainingoperator-managed"),
    pytest.param(Platform(crds=crd("mpijobs.kubeflow.org", ("v1",))),
                 [(Scope.JOBS, "CRDVersionNotServed")], id="mpijobs-v1-only"),
    pytest.param(Platform(crds=crd("mpijobs.kubeflow.org", ("v2beta1",),
                                   **{"app.kubernetes.io/part-of": "odh-training"})),
                 [], id="mpijobs-ours"),
    pytest.param(Platform(crds=crd("trainers.components.platform.opendatahub.io",
                                   ("v1alpha1",), **{"olm.managed": "true"})),
                 [(Scope.TRAINER, "CRDOwnedElsewhere")], id="trainer-crd-from-olm"),
    pytest.param(Platform(crds=crd("pytorchjobs.kubeflow.org", ("v1",),
                                   **{"app.kubernetes.io/part-of": "kubeflow"})),
                 [(Scope.JOBS, "CRDOwnedElsewhere")], id="job-crd-of-another-product"),
    pytest.param(Platform(crds=crd("widgets.example.com", ("v9",), **{"olm.managed": "true"})),
                 [], id="crds-not-ours-ignored"),
    pytest.param(Platform(training_operators=(TRAINING_OPERATOR,),
                          trainer_operators=(TRAINER_OPERATOR,)),
                 [(Scope.TRAINER, "PlatformTrainerOperator"), (Scope.JOBS, "TrainingOperator")],
                 id="trainer-conflicts-first"),
])
def test_conflicts(platform: Platform, reasons: list[tuple[Scope, str]]) -> None:
    found = conflicts(platform)
    assert [(c.scope, c.reason) for c in found] == reasons
    assert all(c.fix and c.message for c in found)


def test_blocking_keeps_one_scope_and_the_summary_names_the_fix() -> None:
    platform = Platform(trainer_operators=(TRAINER_OPERATOR,),
                        training_operators=(TRAINING_OPERATOR,))
    (only,) = blocking(platform, Scope.TRAINER)
    assert only.reason == "PlatformTrainerOperator"
    text = summary([only])
    assert "opendatahub/trainer-operator-controller-manager" in text
    assert "managementState: Removed" in text


@pytest.mark.parametrize(("dsc", "expected"), [
    pytest.param({"metadata": {"name": "default-dsc"},
                  "spec": {"components": {"trainer": {"managementState": "Managed"},
                                          "trainingoperator": {"managementState": "Removed"},
                                          "dashboard": {"managementState": "Managed"}}}},
                 [("trainer", "Managed"), ("trainingoperator", "Removed")], id="both"),
    pytest.param({"metadata": {"name": "d"}, "spec": {"components": {"trainer": {}}}}, [],
                 id="state-unset"),
    pytest.param({"metadata": {"name": "d"}}, [], id="no-spec"),
])
def test_dsc_components(dsc: Obj, expected: list[tuple[str, str]]) -> None:
    assert [(c.component, c.management_state) for c in dsc_components(dsc)] == expected


@pytest.mark.parametrize(("obj", "expected"), [
    pytest.param({"metadata": {"labels": {"app.kubernetes.io/name": "trainer-operator"}}}, True,
                 id="trainer-operator"),
    pytest.param({"metadata": {"labels": {"control-plane": "kubeflow-training-operator"}}},
                 True, id="training-operator"),
    pytest.param({"metadata": {"labels": {"olm.owner": "x"}}}, True, id="olm-owned"),
    pytest.param({"metadata": {"labels": {"operators.coreos.com/p.ns": ""}}}, True,
                 id="olm-operator-label"),
    pytest.param({"metadata": {"labels": {"app.kubernetes.io/name": "trainer"}}}, False,
                 id="operand"),
    pytest.param({"metadata": {}}, False, id="unlabelled"),
])
def test_managed_elsewhere(obj: Obj, expected: bool) -> None:
    assert managed_elsewhere(obj) is expected


def test_objects_parse_from_the_api_shapes() -> None:
    workload = Workload.from_object({"metadata": {"name": "d", "namespace": "n"},
                                     "spec": {"replicas": 0}})
    assert (workload.where, workload.replicas) == ("Deployment n/d", 0)
    parsed = Crd.from_object({"metadata": {"name": "mpijobs.kubeflow.org", "labels": {"a": "b"}},
                              "spec": {"versions": [{"name": "v1", "served": True},
                                                    {"name": "v2", "served": False}]}})
    assert (parsed.served, parsed.labels, parsed.foreign_owner()) == (("v1",), {"a": "b"}, None)
