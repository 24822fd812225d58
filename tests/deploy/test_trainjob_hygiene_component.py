"""config/components/trainjob-hygiene: with ../trainjobs (which it includes), every TrainJob
is sent to the Broker once, and a Trigger of the gc function's own takes the additions and
changes of TrainJobs, with the gc function's audience and label (its delivery check)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from functions.api.core.queue import LABEL_QUEUE_STATE
from functions.core.triggers import compile_trigger_filter
from tests.deploy.support import build, find

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def objs(bin_dir: Path) -> list[Obj]:
    return build(bin_dir / "kustomize", "config/components/trainjob-hygiene")


@pytest.fixture(scope="module")
def eventing(bin_dir: Path) -> list[Obj]:
    return build(bin_dir / "kustomize", "eventing")


def test_the_two_sources_send_every_trainjob_once(objs: list[Obj]) -> None:
    selectors = []
    for name in ("odh-training-trainjobs", "odh-training-trainjobs-unqueued"):
        [watched] = find(objs, "ApiServerSource", name)["spec"]["resources"]
        assert (watched["apiVersion"], watched["kind"]) == ("trainer.kubeflow.org/v1alpha1",
                                                            "TrainJob")
        [expression] = watched["selector"]["matchExpressions"]
        assert expression["key"] == LABEL_QUEUE_STATE
        selectors.append(expression["operator"])
    assert sorted(selectors) == ["DoesNotExist", "Exists"]


@pytest.mark.parametrize(("kind", "operation", "taken"), [
    pytest.param("TrainJob", "add", True, id="trainjob-added"),
    pytest.param("TrainJob", "update", True, id="trainjob-changed"),
    pytest.param("TrainJob", "delete", False, id="trainjob-gone"),
    pytest.param("PyTorchJob", "update", False, id="other-kind"),
])
def test_the_gc_trigger_takes_trainjob_changes(objs: list[Obj], eventing: list[Obj], kind: str,
                                               operation: str, taken: bool) -> None:
    trigger = find(objs, "Trigger", "odh-training-gc-trainjobs")
    event = {"type": f"dev.knative.apiserver.resource.{operation}", "kind": kind,
             "name": "t", "namespace": "team-a", "controller": "odh-training"}
    assert compile_trigger_filter(trigger["spec"]).matches(event) is taken
    reference = find(eventing, "Trigger", "odh-training-gc")
    assert trigger["metadata"]["labels"] == reference["metadata"]["labels"]
    for key in ("broker", "subscriber"):
        assert trigger["spec"][key] == reference["spec"][key], key
    assert trigger["metadata"]["namespace"] == reference["metadata"]["namespace"]
