from __future__ import annotations

from typing import Any

import pytest

from devstack import knative

Obj = dict[str, Any]


def obj(kind: str, name: str = "x", image: str | None = None) -> Obj:
    found: Obj = {"kind": kind, "metadata": {"name": name}}
    if image is not None:
        found["spec"] = {"template": {"spec": {"containers": [{"image": image}]}}}
    return found


def test_install_waves_keep_a_file_ordered_install_order() -> None:
    objects = [obj("Deployment", "controller"), obj("ConfigMap", "config-features"),
               obj("ValidatingWebhookConfiguration"), obj("Namespace"),
               obj("CustomResourceDefinition"), obj("ServiceAccount")]
    waves = [[o["kind"] for o in wave] for wave in knative.install_waves(objects)]
    assert waves == [["Namespace", "CustomResourceDefinition"],
                     ["ConfigMap", "ServiceAccount"],
                     ["Deployment", "ValidatingWebhookConfiguration"]]


@pytest.mark.parametrize(("candidate", "kept"), [
    pytest.param(obj("Deployment", image="ko://knative.dev/eventing/cmd/controller"), True,
                 id="deployment-with-a-binary"),
    pytest.param(obj("StatefulSet", image="ko://knative.dev/eventing/cmd/requestreply"), False,
                 id="statefulset-without-a-binary"),
    pytest.param(obj("Deployment", image="ko://knative.dev/eventing/cmd/jobsink"), False,
                 id="deployment-without-a-binary"),
    pytest.param(obj("ConfigMap"), True, id="not-a-workload"),
])
def test_runs_locally(candidate: Obj, kept: bool) -> None:
    assert knative.runs_locally(candidate) is kept


@pytest.mark.parametrize(("status", "expected"), [
    pytest.param({"conditions": [{"type": "Ready", "status": "True"}]}, "True", id="ready"),
    pytest.param({"conditions": [{"type": "Other", "status": "True"}]}, None, id="no-ready"),
    pytest.param(None, None, id="no-status"),
])
def test_ready_condition(status: Obj | None, expected: str | None) -> None:
    assert knative.ready_condition({"status": status}).get("status") == expected


FLAGS = {"new-apiserversource-filters": "disabled", "delivery-timeout": "enabled"}
FEATURES: Obj = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "config-features", "namespace": "knative-eventing"},
                 "data": dict(FLAGS)}


@pytest.mark.parametrize(("obj", "expected_data"), [
    pytest.param(FEATURES, {"new-apiserversource-filters": "enabled",
                            "delivery-timeout": "enabled"}, id="config-features"),
    pytest.param({**FEATURES, "metadata": {"name": "config-logging"}}, FLAGS,
                 id="another-configmap-unchanged"),
])
def test_with_features_sets_flags_of_config_features_only(obj: Obj,
                                                          expected_data: dict[str, str]) -> None:
    changed = knative.with_features(obj, {"new-apiserversource-filters": "enabled"})
    assert changed["data"] == expected_data
    assert FEATURES["data"] == FLAGS  # not changed in place
