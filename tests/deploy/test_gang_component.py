"""The gang-scheduling components (config/components/gang-scheduling) in an overlay of
config/default: the one setting reaches all three functions, and the PodGroups of that flavour
are sent by an ApiServerSource of their own, readable by its adapter, and taken by a job's
controller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from functions.jobs.controller import CONTROLLERS
from functions.jobs.core.gang import podgroup_api_version
from functions.jobs.reads import settings_from_env
from tests.deploy.support import FUNCTIONS, build_default_with, find, knative_service, uncovered

Obj = dict[str, Any]


def overlay(kustomize: Path, tmp: Path, component: str | None) -> list[Obj]:
    """config/default with the gang-scheduling ``component`` added (or none)."""
    added = [f"config/components/gang-scheduling/{component}"] if component else []
    return build_default_with(kustomize, tmp, *added)


def env_of(objs: list[Obj], name: str) -> dict[str, str]:
    [container] = knative_service(objs, name)["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


@pytest.mark.parametrize(("component", "scheduler", "scheduler_name", "api_version"), [
    pytest.param(None, "", "scheduler-plugins-scheduler", None, id="default-no-gang"),
    pytest.param("volcano", "volcano", "scheduler-plugins-scheduler",
                 "scheduling.volcano.sh/v1beta1", id="volcano"),
    pytest.param("scheduler-plugins", "scheduler-plugins", "scheduler-plugins-scheduler",
                 "scheduling.x-k8s.io/v1alpha1", id="scheduler-plugins"),
])
def test_component_sets_the_scheduler_and_watches_its_podgroups(
        bin_dir: Path, tmp_path: Path, component: str | None, scheduler: str,
        scheduler_name: str, api_version: str | None) -> None:
    objs = overlay(bin_dir / "kustomize", tmp_path, component)
    for function in FUNCTIONS:
        settings = settings_from_env(env_of(objs, f"odh-training-{function}"))
        assert (settings.gang_scheduler, settings.gang_scheduler_name) == (
            scheduler, scheduler_name), function
        if api_version:
            assert podgroup_api_version(settings) == api_version
    assert "TRAINING_GANG_SCHEDULER" not in env_of(objs, "odh-training-dead-letters")

    # PodGroups in a source of their own: a cluster without the CRD stops only that adapter.
    watched = {(s["metadata"]["name"], r["apiVersion"]) for s in objs
               if s["kind"] == "ApiServerSource" for r in s["spec"]["resources"]
               if r["kind"] == "PodGroup"}
    assert watched == ({("odh-training-podgroups", api_version)} if api_version else set())
    if api_version:
        source = find(objs, "ApiServerSource", "odh-training-podgroups")
        assert len(source["spec"]["resources"]) == 1
        assert source["spec"]["sink"] == find(objs, "ApiServerSource", "odh-training-objects")[
            "spec"]["sink"]
    role = find(objs, "ClusterRole", "odh-training-events")
    group = (api_version or "scheduling.volcano.sh/").rpartition("/")[0]
    missing = uncovered([{"apiGroups": [group], "resources": ["podgroups"],
                          "verbs": ["get", "list", "watch"]}], role["rules"])
    assert (missing == []) is bool(api_version)
    if api_version:
        for controller in CONTROLLERS:
            assert ("PodGroup", api_version) in {
                (c.kind, c.api_version) for c in controller.children}, controller.name
