"""The TrainJobs' event source (config/components/trainjobs), applied on its own where the
Trainer is Managed: it builds, sends queue-managed TrainJobs to the Broker of eventing/ as the
other sources do, and lets the adapters' ServiceAccount read TrainJobs and nothing more."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from functions.api.core.queue import LABEL_QUEUE_STATE
from tests.deploy.support import build, find, uncovered

Obj = dict[str, Any]
READ = ["get", "list", "watch"]


@pytest.fixture(scope="module")
def objs(bin_dir: Path) -> list[Obj]:
    return build(bin_dir / "kustomize", "config/components/trainjobs")


@pytest.fixture(scope="module")
def eventing(bin_dir: Path) -> list[Obj]:
    return build(bin_dir / "kustomize", "eventing")


def test_it_adds_one_source_of_queue_managed_trainjobs(objs: list[Obj],
                                                       eventing: list[Obj]) -> None:
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objs) == [
        ("ApiServerSource", "odh-training-trainjobs"),
        ("ClusterRole", "odh-training-events-trainjobs"),
        ("ClusterRoleBinding", "odh-training-events-trainjobs")]
    source = find(objs, "ApiServerSource", "odh-training-trainjobs")
    [watched] = source["spec"]["resources"]
    assert (watched["apiVersion"], watched["kind"]) == ("trainer.kubeflow.org/v1alpha1",
                                                        "TrainJob")
    assert watched["selector"]["matchExpressions"] == [
        {"key": LABEL_QUEUE_STATE, "operator": "Exists"}]
    reference = find(eventing, "ApiServerSource", "odh-training-objects")
    for name in ("sink", "serviceAccountName", "mode", "ceOverrides", "namespaceSelector"):
        assert source["spec"][name] == reference["spec"][name], name
    assert source["metadata"]["namespace"] == reference["metadata"]["namespace"]


@pytest.mark.parametrize(("rule", "granted"), [
    pytest.param({"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"],
                  "verbs": READ}, True, id="read-trainjobs"),
    pytest.param({"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"],
                  "verbs": ["update"]}, False, id="no-writes"),
    pytest.param({"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainingruntimes"],
                  "verbs": ["list"]}, False, id="no-other-kind"),
    pytest.param({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}, False,
                 id="no-secrets"),
])
def test_the_adapters_account_may_read_trainjobs_only(objs: list[Obj],
                                                      rule: Obj, granted: bool) -> None:
    binding = find(objs, "ClusterRoleBinding", "odh-training-events-trainjobs")
    [subject] = binding["subjects"]
    source = find(objs, "ApiServerSource", "odh-training-trainjobs")
    assert (subject["kind"], subject["name"], subject["namespace"]) == (
        "ServiceAccount", source["spec"]["serviceAccountName"], source["metadata"]["namespace"])
    role = find(objs, "ClusterRole", binding["roleRef"]["name"])
    assert (uncovered([rule], role["rules"]) == []) is granted
