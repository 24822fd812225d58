"""Reading the platform's controllers: what is absent, forbidden or not served reads as
nothing there."""

from __future__ import annotations

from typing import Any

import pytest

from functions.platform import coexistence
from tests.trainer.scripted import FORBIDDEN, Answer, items, scripted

DEPLOYMENTS = "/apis/apps/v1/deployments"
DSC_V1 = "/apis/datasciencecluster.opendatahub.io/v1/datascienceclusters"
DSC_V2 = "/apis/datasciencecluster.opendatahub.io/v2/datascienceclusters"
TRAINER_CRD = ("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
               "trainers.components.platform.opendatahub.io")


def operator(replicas: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": "trainer-operator-controller-manager", "namespace": "odh"},
            "spec": {"replicas": replicas}}


def dsc(state: str) -> dict[str, Any]:
    return {"metadata": {"name": "default-dsc"},
            "spec": {"components": {"trainer": {"managementState": state}}}}


@pytest.mark.parametrize(("answers", "operators", "components", "crd_labels"), [
    pytest.param({}, [], [], None, id="plain-kubernetes"),
    pytest.param({("GET", DEPLOYMENTS): (200, items(operator())),
                  ("GET", DSC_V1): (200, items(dsc("Managed"))),
                  ("GET", TRAINER_CRD): (200, {"metadata": {
                      "name": "trainers.components.platform.opendatahub.io",
                      "labels": {"olm.managed": "true"}}})},
                 [("odh", "trainer-operator-controller-manager")], [("trainer", "Managed")],
                 {"olm.managed": "true"}, id="platform-v1-dsc"),
    pytest.param({("GET", DSC_V2): (200, items(dsc("Removed"))),
                  ("GET", DSC_V1): (200, items(dsc("Managed")))},
                 [], [("trainer", "Removed")], None, id="newest-dsc-version-wins"),
    pytest.param({("GET", DEPLOYMENTS): FORBIDDEN, ("GET", DSC_V2): FORBIDDEN,
                  ("GET", TRAINER_CRD): FORBIDDEN}, [], [], None, id="forbidden-reads-nothing"),
])
def test_observe(answers: dict[tuple[str, str], Answer], operators: list[tuple[str, str]],
                 components: list[tuple[str, str]], crd_labels: dict[str, str] | None) -> None:
    kube, transport = scripted(answers)
    platform = coexistence.observe(kube)
    assert [(w.namespace, w.name) for w in platform.trainer_operators] == operators
    assert [(c.component, c.management_state) for c in platform.dsc] == components
    crd = platform.crds.get("trainers.components.platform.opendatahub.io")
    assert (crd.labels if crd else None) == crd_labels
    assert ("GET", DEPLOYMENTS) in transport.seen


@pytest.mark.parametrize(("trainer", "jobs", "reads"), [
    pytest.param(True, False, 1, id="trainer"),
    pytest.param(True, True, 2, id="both"),
    pytest.param(False, True, 1, id="jobs"),
])
def test_each_operator_is_read_only_when_asked(trainer: bool, jobs: bool, reads: int) -> None:
    kube, transport = scripted({})
    coexistence.observe(kube, trainer=trainer, jobs=jobs)
    assert len([p for _, p in transport.seen if p == DEPLOYMENTS]) == reads
