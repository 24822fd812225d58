"""A PodGroup's minResources: limits standing in for missing requests, replica types in order
of their pods' priority (:mod:`functions.jobs.core.gang`)."""

from __future__ import annotations

from typing import Any

import pytest

from functions.jobs.core.defaults import with_defaults
from functions.jobs.core.gang import container_requests, min_resources, priority_order
from tests.jobs.fixtures import job

PT = "pytorch-master-workers.yaml"
MPI = "mpijob-pi.yaml"
MPI_V1 = "mpijob-v1-pi.yaml"
TF = "tfjob-chief-workers.yaml"


@pytest.mark.parametrize(("resources", "expected"), [
    pytest.param({"requests": {"cpu": "1"}}, {"cpu": "1"}, id="requests"),
    pytest.param({"limits": {"nvidia.com/gpu": "2"}}, {"nvidia.com/gpu": "2"},
                 id="gpu-under-limits-only"),
    pytest.param({"requests": {"cpu": "1"}, "limits": {"cpu": "4", "nvidia.com/gpu": "1"}},
                 {"cpu": "1", "nvidia.com/gpu": "1"}, id="request-wins-limit-fills-in"),
    pytest.param({}, {}, id="nothing"),
])
def test_container_requests(resources: dict[str, Any], expected: dict[str, str]) -> None:
    assert container_requests({"name": "c", "resources": resources}) == expected


def _with(file: str, per_type: dict[str, dict[str, Any]]) -> Any:
    """The job with, per replica type, a priorityClassName and/or its container's resources."""
    raw = job(file)
    specs = {}
    for rtype, extra in per_type.items():
        template: dict[str, Any] = {"spec": {}}
        if "class" in extra:
            template["spec"]["priorityClassName"] = extra["class"]
        specs[rtype] = {"template": template}
    merged = job(file, spec={raw.framework.specs_field: specs})
    d = with_defaults(merged)
    for rtype, extra in per_type.items():
        if "resources" in extra:
            d.replica_specs[rtype].template["spec"]["containers"][0]["resources"] = (
                extra["resources"])
    return d


PRIORITIES = {"high": 1000, "low": -5, "zero": 0}


@pytest.mark.parametrize(("file", "per_type", "default", "order"), [
    pytest.param(PT, {}, 0, ["Master", "Worker"], id="framework-order-by-default"),
    pytest.param(PT, {"Worker": {"class": "high"}}, 0, ["Worker", "Master"],
                 id="higher-class-first"),
    pytest.param(PT, {"Master": {"class": "low"}}, 0, ["Worker", "Master"],
                 id="negative-class-last"),
    pytest.param(PT, {"Master": {"class": "zero"}}, 10, ["Worker", "Master"],
                 id="unnamed-gets-the-global-default"),
    pytest.param(PT, {"Master": {"class": "missing"}}, 0, ["Master", "Worker"],
                 id="unknown-class-counts-zero"),
    pytest.param(MPI, {"Worker": {"class": "high"}}, 0, ["Worker", "Launcher"],
                 id="mpijob-v2beta1"),
    pytest.param(MPI_V1, {"Worker": {"class": "high"}}, 0, ["Worker", "Launcher"],
                 id="mpijob-v1"),
    pytest.param(TF, {"Worker": {"class": "high"}, "Chief": {"class": "zero"}}, 0,
                 ["Worker", "Chief"], id="tfjob"),
])
def test_priority_order(file: str, per_type: dict[str, dict[str, Any]], default: int,
                        order: list[str]) -> None:
    assert priority_order(_with(file, per_type), PRIORITIES, default) == order


GPU_WORKER = {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "2"}}
CPU_MASTER = {"requests": {"cpu": "1", "memory": "1Gi"}}


@pytest.mark.parametrize(("per_type", "min_member", "expected"), [
    pytest.param({"Master": {"resources": CPU_MASTER}, "Worker": {"resources": GPU_WORKER}}, 3,
                 {"cpu": "5", "memory": "1073741824", "nvidia.com/gpu": "2"},
                 id="all-pods-gpus-from-limits"),
    pytest.param({"Master": {"resources": CPU_MASTER}, "Worker": {"resources": GPU_WORKER}}, 2,
                 {"cpu": "3", "memory": "1073741824", "nvidia.com/gpu": "1"},
                 id="master-first-by-framework-order"),
    pytest.param({"Master": {"resources": CPU_MASTER, "class": "low"},
                  "Worker": {"resources": GPU_WORKER, "class": "high"}}, 2,
                 {"cpu": "4", "nvidia.com/gpu": "2"}, id="workers-first-by-priority"),
])
def test_min_resources(per_type: dict[str, dict[str, Any]], min_member: int,
                       expected: dict[str, str]) -> None:
    assert min_resources(_with(PT, per_type), min_member, PRIORITIES) == expected
