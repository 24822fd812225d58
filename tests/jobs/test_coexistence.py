"""The job controllers' view of another controller of the same jobs: what is read, how often,
and the one Event per job that says why nothing happens."""

from __future__ import annotations

from typing import Any

import pytest

from functions.jobs import coexistence
from functions.jobs.coexistence import Warned, conflict, ttl_from_env, warn
from functions.jobs.core.frameworks import FRAMEWORKS
from functions.kube.client import KubeClient
from functions.platform.core.coexistence import Platform, Scope, Workload
from functions.platform.memo import ConflictMemo
from functions.runtime.recorder import EventRecorder
from functions.runtime.registry import Context
from tests.trainer.scripted import ScriptedTransport, scripted

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
EVENTS = "/api/v1/namespaces/team-a/events"
OPERATOR = Platform(training_operators=(Workload(namespace="odh", name="training-operator"),))


@pytest.mark.parametrize(("environ", "ttl"), [
    pytest.param({}, 30.0, id="default"),
    pytest.param({"TRAINING_COEXISTENCE_TTL_SECONDS": "2.5"}, 2.5, id="set"),
    pytest.param({"TRAINING_COEXISTENCE_TTL_SECONDS": ""}, 30.0, id="empty-is-default"),
])
def test_ttl_from_env(environ: dict[str, str], ttl: float) -> None:
    assert ttl_from_env(environ) == ttl


def test_reads_what_conflicts_with_the_jobs_and_nothing_of_the_trainer() -> None:
    kube, transport = scripted({})
    assert coexistence.observe(kube) == Platform()
    assert sorted(path for _, path in transport.seen) == sorted([
        "/apis/apps/v1/deployments",
        "/apis/datasciencecluster.opendatahub.io/v2/datascienceclusters",
        "/apis/datasciencecluster.opendatahub.io/v1/datascienceclusters",
        *(CRDS + f"{fw.plural}.kubeflow.org" for fw in FRAMEWORKS)])


class Answers:
    """An observe function whose answer the test changes."""

    def __init__(self, platform: Platform) -> None:
        self.platform = platform

    def __call__(self, kube: KubeClient) -> Platform:
        return self.platform


@pytest.fixture
def platform(monkeypatch: pytest.MonkeyPatch) -> Answers:
    answers = Answers(OPERATOR)
    monkeypatch.setattr(coexistence, "CONFLICTS", ConflictMemo(Scope.JOBS, answers, ttl=0.0))
    monkeypatch.setattr(coexistence, "WARNED", Warned())
    return answers


@pytest.fixture
def ctx() -> tuple[Context, ScriptedTransport]:
    kube, transport = scripted({("POST", EVENTS): (201, {})})
    return Context(kube, EventRecorder(kube, "training-jobs"), "reconcile"), transport


def job(name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "team-a", "uid": uid}}


def events(transport: ScriptedTransport) -> int:
    return transport.seen.count(("POST", EVENTS))


def test_a_burst_records_one_event_per_job(platform: Answers,
                                           ctx: tuple[Context, ScriptedTransport]) -> None:
    context, transport = ctx
    for _ in range(5):
        found = conflict(context)
        assert found is not None and "Deployment odh/training-operator" in found
        assert "trainingoperator.managementState: Removed" in found
        warn(context, job("a", "uid-a"), found)
    assert events(transport) == 1
    warn(context, job("b", "uid-b"), "the same conflict")
    assert events(transport) == 2


def test_a_conflict_that_comes_back_is_reported_again(
        platform: Answers, ctx: tuple[Context, ScriptedTransport]) -> None:
    context, transport = ctx
    found = conflict(context)
    assert found is not None
    warn(context, job("a", "uid-a"), found)
    platform.platform = Platform()
    assert conflict(context) is None
    platform.platform = OPERATOR
    found = conflict(context)
    assert found is not None
    warn(context, job("a", "uid-a"), found)
    assert events(transport) == 2


@pytest.mark.parametrize(("seen", "again", "first"), [
    pytest.param([("u1", "m")], ("u1", "m"), False, id="same-pair"),
    pytest.param([("u1", "m")], ("u2", "m"), True, id="other-job"),
    pytest.param([("u1", "m")], ("u1", "other"), True, id="other-message"),
    pytest.param([("u1", "m"), ("u2", "m"), ("u3", "m")], ("u1", "m"), True,
                 id="oldest-forgotten-beyond-size"),
])
def test_warned_remembers_pairs_up_to_its_size(seen: list[tuple[str, str]],
                                               again: tuple[str, str], first: bool) -> None:
    warned = Warned(size=2)
    assert all(warned.first(*pair) for pair in seen)
    assert warned.first(*again) is first
