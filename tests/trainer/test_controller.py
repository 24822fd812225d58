"""The Trainer controller's registration: which events concern the Trainer."""

from __future__ import annotations

from typing import Any

import pytest

from functions.trainer.controller import CONTROLLERS, TRAINER_KEY

LABELLED = {"metadata": {"name": "x", "namespace": "ns",
                         "labels": {"platform.opendatahub.io/part-of": "trainer"}}}
UNLABELLED = {"metadata": {"name": "x", "namespace": "ns", "labels": {"app": "other"}}}


@pytest.mark.parametrize(("api_version", "kind", "obj", "concerned"), [
    pytest.param("apps/v1", "Deployment", LABELLED, True, id="labelled-deployment"),
    pytest.param("apps/v1", "Deployment", UNLABELLED, False, id="foreign-deployment"),
    pytest.param("v1", "ConfigMap", {"metadata": {"name": "odh-trainer-config",
                                                  "namespace": "opendatahub"}}, True,
                 id="platform-handshake-configmap"),
    pytest.param("v1", "ConfigMap", UNLABELLED, False, id="other-configmap"),
    pytest.param("v1", "ConfigMap", LABELLED, True, id="labelled-configmap"),
    pytest.param("rbac.authorization.k8s.io/v1", "ClusterRole", LABELLED, True,
                 id="labelled-clusterrole"),
    pytest.param("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", LABELLED,
                 True, id="labelled-webhook"),
    pytest.param("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                 {"metadata": {"name": "jobsets.jobset.x-k8s.io"}}, True, id="jobset-crd"),
    pytest.param("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                 {"metadata": {"name": "foos.example.com"}}, False, id="other-crd"),
    pytest.param("operator.openshift.io/v1", "JobSetOperator", {"metadata": {"name": "cluster"}},
                 True, id="jobset-operator"),
    pytest.param("v1", "Pod", LABELLED, False, id="pods-not-mapped"),
])
def test_children_map_to_the_singleton(api_version: str, kind: str, obj: dict[str, Any],
                                       concerned: bool) -> None:
    (trainer,) = CONTROLLERS
    assert trainer.parents_of(api_version, kind, obj) == ([TRAINER_KEY] if concerned else [])


def test_registration() -> None:
    (trainer,) = CONTROLLERS
    assert set(trainer.handlers) == {"reconcile", "gc", "status"}
    assert trainer.owns("components.platform.opendatahub.io/v1alpha1", "Trainer")
    assert (TRAINER_KEY.kind, TRAINER_KEY.namespace, TRAINER_KEY.name) == (
        "Trainer", "", "default-trainer")
