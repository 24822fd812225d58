"""func.yaml: current specVersion, the prebuilt image, and the same scale, resources and health
endpoints as the reconcile Knative Service in config/serving."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from functions.core.delivery_auth import FUNCTION_LABEL, audience_for
from tests.deploy.support import REPO, build, find, knative_service

CURRENT_SPEC_VERSION = "0.36.0"  # knative/func pkg/functions/function_migrations.go


@pytest.fixture(scope="module")
def func() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO / "func.yaml").read_text())
    return data


@pytest.fixture(scope="module")
def reconcile(bin_dir: Path) -> dict[str, Any]:
    return knative_service(build(bin_dir / "kustomize", "config/default"),
                           "odh-training-reconcile")


def test_required_fields_and_current_spec_version(func: dict[str, Any]) -> None:
    assert func["specVersion"] == CURRENT_SPEC_VERSION
    assert func["created"]
    assert func["runtime"] == "python"
    assert func["invoke"] == "cloudevent"


def test_deploys_the_image_config_serving_deploys(func: dict[str, Any],
                                                  reconcile: dict[str, Any]) -> None:
    [container] = reconcile["spec"]["template"]["spec"]["containers"]
    assert func["image"] == func["deploy"]["image"] == container["image"]
    assert func["deploy"]["namespace"] == reconcile["metadata"]["namespace"]


def test_scale_and_resources_match_the_reconcile_service(func: dict[str, Any],
                                                         reconcile: dict[str, Any]) -> None:
    annotations = reconcile["spec"]["template"]["metadata"]["annotations"]
    spec = reconcile["spec"]["template"]["spec"]
    [container] = spec["containers"]
    options = func["deploy"]["options"]
    assert options["scale"] == {
        "min": int(annotations["autoscaling.knative.dev/min-scale"]),
        "max": int(annotations["autoscaling.knative.dev/max-scale"]),
        "metric": annotations["autoscaling.knative.dev/metric"]}
    assert options["resources"]["requests"] == container["resources"]["requests"]
    limits = dict(options["resources"]["limits"])
    assert limits.pop("concurrency") == spec["containerConcurrency"]
    assert limits == container["resources"]["limits"]
    assert func["deploy"]["healthEndpoints"] == {
        "liveness": container["livenessProbe"]["httpGet"]["path"],
        "readiness": container["readinessProbe"]["httpGet"]["path"]}
    labels = {item["key"]: item["value"] for item in func["deploy"]["labels"]}
    assert labels["networking.knative.dev/visibility"] == "cluster-local"


def test_identity_and_trigger_exist_in_config_func(func: dict[str, Any],
                                                   bin_dir: Path) -> None:
    """config/func's Trigger subscribes the Service func deploys, with that Service's audience
    (func's own subscriptions would name none, and every delivery would be refused)."""
    objs = build(bin_dir / "kustomize", "config/func")
    find(objs, "ServiceAccount", func["deploy"]["serviceAccountName"])
    assert "subscriptions" not in func["deploy"]
    trigger = find(objs, "Trigger", func["name"])
    find(objs, "Broker", trigger["spec"]["broker"])
    assert trigger["spec"]["subscriber"]["ref"]["name"] == func["name"]
    assert trigger["spec"]["subscriber"]["audience"] == audience_for(
        func["deploy"]["namespace"], func["name"])
    assert trigger["metadata"]["labels"][FUNCTION_LABEL] == "all"
