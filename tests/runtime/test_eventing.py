"""Reading the eventing manifests for local runs (router and receive adapter)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from functions.jobs.core.frameworks import FRAMEWORKS
from functions.runtime.eventing import (
    adapter_environment,
    guess_plural,
    label_selector_string,
    load_manifests,
    schedule_period,
)

EVENTING = Path(__file__).resolve().parents[2] / "eventing"


@pytest.mark.parametrize(("schedule", "seconds"), [
    pytest.param("*/5 * * * *", 300.0, id="every-5-minutes"),
    pytest.param("* * * * *", 60.0, id="every-minute"),
    pytest.param("@every 30s", 30.0, id="every-30s"),
    pytest.param("@every 1m30s", 90.0, id="every-1m30s"),
    pytest.param("@every 250ms", 0.25, id="every-250ms"),
    pytest.param("@hourly", 3600.0, id="hourly"),
    pytest.param("CRON_TZ=Europe/Paris */2 * * * *", 120.0, id="with-timezone"),
])
def test_schedule_period(schedule: str, seconds: float) -> None:
    assert schedule_period(schedule) == pytest.approx(seconds)


@pytest.mark.parametrize("schedule", ["0 3 * * *", "@every soon", "*/x * * * *"])
def test_unsupported_schedules_are_refused(schedule: str) -> None:
    with pytest.raises(ValueError, match=r"schedule|duration"):
        schedule_period(schedule)


@pytest.mark.parametrize(("kind", "plural"), [
    pytest.param("PyTorchJob", "pytorchjobs", id="job"),
    pytest.param("Trainer", "trainers", id="trainer"),
    pytest.param("Ingress", "ingresses", id="s-ending"),
    pytest.param("NetworkPolicy", "networkpolicies", id="y-ending"),
])
def test_guess_plural(kind: str, plural: str) -> None:
    assert guess_plural(kind) == plural


@pytest.mark.parametrize(("selector", "text"), [
    pytest.param(None, "", id="none"),
    pytest.param({"matchLabels": {"b": "2", "a": "1"}}, "a=1,b=2", id="labels"),
    pytest.param({"matchExpressions": [{"key": "k", "operator": "Exists"},
                                       {"key": "n", "operator": "DoesNotExist"},
                                       {"key": "t", "operator": "In", "values": ["x", "y"]}]},
                 "k,!n,t in (x,y)", id="expressions"),
])
def test_label_selector_string(selector: dict[str, Any] | None, text: str) -> None:
    assert label_selector_string(selector) == text


def test_repository_manifests_load() -> None:
    manifests = load_manifests(EVENTING)
    assert sorted(t["metadata"]["name"] for t in manifests.triggers) == [
        "odh-training-gc", "odh-training-reconcile", "odh-training-status"]
    assert [b["metadata"]["name"] for b in manifests.brokers] == ["odh-training"]
    assert len(manifests.ping_sources) == 1
    assert schedule_period(manifests.ping_sources[0]["spec"]["schedule"]) == 1800.0


def test_adapter_environment_of_the_main_source() -> None:
    source = next(s for s in load_manifests(EVENTING).apiserver_sources
                  if s["metadata"]["name"] == "odh-training-objects")
    env = adapter_environment(source, "http://127.0.0.1:8081/")
    config = json.loads(env["K_SOURCE_CONFIG"])
    assert env["K_SINK"] == "http://127.0.0.1:8081/"
    assert (config["mode"], config["allNamespaces"]) == ("Resource", True)
    resources = {r["gvr"]["Resource"]: r for r in config["resources"]}
    assert set(resources) == {"pods", "services", *(fw.plural for fw in FRAMEWORKS
                                                     if fw.api_version == "kubeflow.org/v1")}
    # The pods in two watches of their own (tests/jobs/test_registration.py).
    assert [r["selector"] for r in config["resources"] if r["gvr"]["Resource"] == "pods"] == [
        "training.kubeflow.org/job-name,training.kubeflow.org/job-role",
        "training.kubeflow.org/job-name,!training.kubeflow.org/job-role"]
    assert json.loads(env["K_CE_OVERRIDES"]) == {"extensions": {"controller": "odh-training"}}
    assert env["NAMESPACE"] == "opendatahub"


# Group versions every cluster serves: a source may add them to its one optional group version.
BUILT_IN = {"v1", "apps/v1", "batch/v1", "rbac.authorization.k8s.io/v1",
            "admissionregistration.k8s.io/v1", "apiextensions.k8s.io/v1"}


def test_one_optional_group_version_per_source() -> None:
    """A kind the cluster does not serve stops only its own source's adapter."""
    sources = load_manifests(EVENTING).apiserver_sources
    optional = {s["metadata"]["name"]: {r["apiVersion"] for r in s["spec"]["resources"]}
                - BUILT_IN for s in sources}
    assert all(len(versions) <= 1 for versions in optional.values()), optional
    assert set().union(*optional.values()) == {
        "kubeflow.org/v1", "kubeflow.org/v2beta1", "components.platform.opendatahub.io/v1alpha1"}


@pytest.mark.parametrize(("name", "kinds", "all_namespaces"), [
    pytest.param("odh-training-mpijobs", {"mpijobs", "jobs"}, True, id="mpijobs"),
    pytest.param("odh-training-trainer", {"trainers", "deployments"}, False, id="trainer"),
])
def test_split_sources(name: str, kinds: set[str], all_namespaces: bool) -> None:
    source = next(s for s in load_manifests(EVENTING).apiserver_sources
                  if s["metadata"]["name"] == name)
    config = json.loads(adapter_environment(source, "http://x/")["K_SOURCE_CONFIG"])
    resources = {r["gvr"]["Resource"]: r for r in config["resources"]}
    assert set(resources) == kinds
    assert config["allNamespaces"] is all_namespaces
    selectors = {r.get("selector") for r in resources.values()} - {None}
    assert selectors <= {"training.kubeflow.org/job-name",
                         "platform.opendatahub.io/part-of=trainer"}


def test_platform_config_source_watches_its_own_namespace() -> None:
    source = next(s for s in load_manifests(EVENTING).apiserver_sources
                  if s["metadata"]["name"] == "odh-training-platform-config")
    config = json.loads(adapter_environment(source, "http://x/")["K_SOURCE_CONFIG"])
    assert (config["allNamespaces"], config["namespaces"]) == (False, ["opendatahub"])
