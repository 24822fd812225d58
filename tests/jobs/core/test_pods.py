"""Reading a child's role and replica index from the labels the controllers set; what the
watch caches keep of a pod, and that the handlers decide the same on it as on the whole pod."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from functions.jobs.core.defaults import with_defaults
from functions.jobs.core.frameworks import LABEL_JOB_ROLE, LABEL_REPLICA_INDEX
from functions.jobs.core.model import Job, Obj
from functions.jobs.core.objects import desired_pod
from functions.jobs.core.plan import reconcile_plan, status_of
from functions.jobs.core.planning import Observed
from functions.jobs.core.pod_problems import pod_problems
from functions.jobs.core.pods import as_cached, index_of, role_of
from functions.jobs.core.settings import Settings
from tests.jobs.fixtures import NOW, job, stamp


def labelled(**labels: str) -> dict[str, Any]:
    return {"metadata": {"labels": labels}}


@pytest.mark.parametrize(("obj", "role"), [
    pytest.param(labelled(**{LABEL_JOB_ROLE: "launcher"}), "launcher", id="launcher"),
    pytest.param(labelled(**{LABEL_JOB_ROLE: "worker"}), "worker", id="worker"),
    pytest.param(labelled(), "", id="no-label"),
    pytest.param({}, "", id="no-metadata"),
])
def test_role_of(obj: dict[str, Any], role: str) -> None:
    assert role_of(obj) == role


@pytest.mark.parametrize(("obj", "index"), [
    pytest.param(labelled(**{LABEL_REPLICA_INDEX: "3"}), 3, id="number"),
    pytest.param(labelled(**{LABEL_REPLICA_INDEX: "three"}), None, id="not-a-number"),
    pytest.param(labelled(), None, id="no-label"),
])
def test_index_of(obj: dict[str, Any], index: int | None) -> None:
    assert index_of(obj) == index


def test_a_cached_pod_keeps_metadata_status_and_the_containers_names_and_images() -> None:
    pod: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}},
                "spec": {"nodeName": "n", "schedulerName": "volcano", "restartPolicy": "Never",
                         "volumes": [{"name": "v"}], "tolerations": [{"key": "k"}],
                         "initContainers": [{"name": "i", "image": "x:1", "env": [{"name": "E"}]}],
                         "containers": [{"name": "c", "image": "y:2", "args": ["--big"],
                                         "resources": {"limits": {"cpu": "1"}}}]},
                "status": {"phase": "Running", "podIP": "10.0.0.1"}}
    assert as_cached(pod) == {
        "apiVersion": "v1", "kind": "Pod", "metadata": pod["metadata"], "status": pod["status"],
        "spec": {"initContainers": [{"name": "i", "image": "x:1"}],
                 "containers": [{"name": "c", "image": "y:2"}]}}
    assert as_cached({"metadata": {"name": "p"}}) == {"metadata": {"name": "p"}}


def _states(container: str) -> dict[str, Obj]:
    def one(phase: str, state: Obj) -> Obj:
        return {"phase": phase, "containerStatuses": [
            {"name": container, "restartCount": 0, "state": state}]}
    return {"running": one("Running", {"running": {}}),
            "succeeded": one("Succeeded", {"terminated": {"exitCode": 0}}),
            "failed-retryable": one("Failed", {"terminated": {"exitCode": 137}}),
            "failed": one("Failed", {"terminated": {"exitCode": 1}}),
            "image-pull": one("Pending", {"waiting": {"reason": "ImagePullBackOff"}})}


def _whole_pods(file: str, outcome: str) -> tuple[Job, list[Obj]]:
    raw = job(file, status={"conditions": [{"type": "Created", "status": "True"},
                                           {"type": "Running", "status": "True"}],
                            "startTime": stamp(-600)})
    defaulted = with_defaults(raw)
    pods = []
    for rtype in defaulted.replica_specs:
        for index in range(defaulted.replicas(rtype)):
            pod = desired_pod(defaulted, rtype, index, Settings())[0]
            pod["metadata"].update(uid=f"uid-{rtype}-{index}", creationTimestamp=stamp(-900),
                                   resourceVersion="7")
            container = pod["spec"]["containers"][0]["name"]
            first = index == 0 and rtype == next(iter(defaulted.replica_specs))
            pod["status"] = _states(container)[outcome if first else "running"]
            pods.append(pod)
    return raw, pods


def _by_name(value: Any) -> Any:
    """``value`` with every pod in it replaced by its name (plans list the pods they act on)."""
    if isinstance(value, dict):
        if value.get("kind") == "Pod" and "metadata" in value:
            return value["metadata"].get("name")
        return {k: _by_name(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_by_name(v) for v in value]
    return value


@pytest.mark.parametrize("file", [
    pytest.param(f, id=f.removesuffix(".yaml")) for f in (
        "pytorch-master-workers.yaml", "pytorch-elastic.yaml", "tfjob-chief-workers.yaml",
        "tfjob-ps-worker-evaluator.yaml", "mxjob-train.yaml", "paddlejob-collective.yaml",
        "paddlejob-ps.yaml", "jaxjob-workers.yaml", "xgboostjob-master-workers.yaml",
        "mpijob-v1-pi.yaml", "mpijob-pi.yaml")])
@pytest.mark.parametrize("outcome", ["running", "succeeded", "failed-retryable", "failed",
                                     "image-pull"])
def test_status_and_plan_are_the_same_on_cached_pods(file: str, outcome: str) -> None:
    raw, pods = _whole_pods(file, outcome)
    cached = [as_cached(p) for p in pods]
    whole_status = status_of(Observed(job=raw, pods=pods), NOW)
    assert whole_status == status_of(Observed(job=raw, pods=cached), NOW)
    whole = reconcile_plan(Observed(job=raw, pods=pods), NOW, Settings())
    trimmed = reconcile_plan(Observed(job=raw, pods=cached), NOW, Settings())
    assert _by_name(dataclasses.asdict(whole)) == _by_name(dataclasses.asdict(trimmed))
    assert pod_problems(pods) == pod_problems(cached)
