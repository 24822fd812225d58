"""The memo of the platform's conflicts: read at most once per TTL, what cannot be read is
nothing there, and a failed read keeps the last answer."""

from __future__ import annotations

from typing import Any

import pytest

from functions.core.errors import TemporaryError
from functions.kube.client import ApiError, KubeClient
from functions.platform import coexistence
from functions.platform.core.coexistence import (
    Platform,
    Scope,
    Workload,
)
from functions.platform.memo import ConflictMemo
from tests.trainer.scripted import FORBIDDEN, Answer, items, scripted

DEPLOYMENTS = "/apis/apps/v1/deployments"
DSC_V2 = "/apis/datasciencecluster.opendatahub.io/v2/datascienceclusters"
DSC_V1 = "/apis/datasciencecluster.opendatahub.io/v1/datascienceclusters"
MPIJOBS_CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/mpijobs.kubeflow.org"
OPERATOR = Platform(training_operators=(Workload(namespace="odh", name="training-operator"),))
SERVER_ERROR: Answer = (500, {"kind": "Status", "message": "etcd is down"})


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Script:
    """An observe function answering from a list: a Platform, or an exception to raise."""

    def __init__(self, *answers: Platform | Exception) -> None:
        self.answers = list(answers)
        self.reads = 0

    def __call__(self, kube: KubeClient) -> Platform:
        answer = self.answers[min(self.reads, len(self.answers) - 1)]
        self.reads += 1
        if isinstance(answer, Exception):
            raise answer
        return answer


def memo(script: Script, clock: Clock, ttl: float = 30.0) -> ConflictMemo:
    return ConflictMemo(Scope.JOBS, script, ttl, retry=5.0, clock=clock)


KUBE, _ = scripted({})


@pytest.mark.parametrize(("ttl", "times", "reads"), [
    pytest.param(30.0, [0.0, 1.0, 29.9], 1, id="within-ttl-one-read"),
    pytest.param(30.0, [0.0, 30.0, 30.5], 2, id="read-again-at-ttl"),
    pytest.param(30.0, [0.0, 31.0, 62.0], 3, id="each-ttl-one-read"),
    pytest.param(0.0, [0.0, 0.0, 0.0], 3, id="ttl-zero-reads-every-time"),
])
def test_reads_at_most_once_per_ttl(ttl: float, times: list[float], reads: int) -> None:
    script, clock = Script(OPERATOR), Clock()
    conflicts = memo(script, clock, ttl)
    for at in times:
        clock.now = at
        assert [c.reason for c in conflicts.conflicts(KUBE)] == ["TrainingOperator"]
    assert script.reads == reads


def test_the_answer_follows_the_platform_after_the_ttl() -> None:
    script, clock = Script(OPERATOR, Platform()), Clock()
    conflicts = memo(script, clock)
    assert conflicts.conflicts(KUBE)
    clock.now = 10.0
    assert conflicts.conflicts(KUBE)  # removed meanwhile, not seen yet
    clock.now = 30.0
    assert conflicts.conflicts(KUBE) == ()


def test_only_conflicts_of_the_scope_count() -> None:
    trainer_only = Platform(trainer_operators=(Workload(namespace="odh", name="t"),))
    assert memo(Script(trainer_only), Clock()).conflicts(KUBE) == ()


def test_a_shorter_ttl_applies_to_the_answer_in_memory() -> None:
    script, clock = Script(OPERATOR, Platform()), Clock()
    conflicts = memo(script, clock)
    assert conflicts.conflicts(KUBE)
    clock.now = 1.0
    conflicts.ttl = 0.5
    assert conflicts.conflicts(KUBE) == ()


def test_forget_reads_on_the_next_call() -> None:
    script, clock = Script(OPERATOR, Platform()), Clock()
    conflicts = memo(script, clock)
    assert conflicts.conflicts(KUBE)
    conflicts.forget()
    assert conflicts.conflicts(KUBE) == ()
    assert script.reads == 2


@pytest.mark.parametrize("failure", [
    pytest.param(ApiError(500, "Deployment", "etcd is down"), id="api-error"),
    pytest.param(TemporaryError("API server unreachable"), id="temporary-error"),
])
def test_a_failed_read_keeps_the_last_answer_and_is_retried(failure: Exception) -> None:
    script, clock = Script(OPERATOR, failure, Platform()), Clock()
    conflicts = memo(script, clock)
    assert conflicts.conflicts(KUBE)
    clock.now = 30.0
    assert conflicts.conflicts(KUBE)  # the read failed: the last answer stands
    clock.now = 34.9
    assert conflicts.conflicts(KUBE)
    assert script.reads == 2
    clock.now = 35.0  # retried after `retry`, not after a whole TTL
    assert conflicts.conflicts(KUBE) == ()
    assert script.reads == 3


def test_a_failed_first_read_is_a_temporary_error() -> None:
    script = Script(ApiError(500, "Deployment", "etcd is down"), Platform())
    conflicts = memo(script, Clock())
    with pytest.raises(TemporaryError):
        conflicts.conflicts(KUBE)
    assert conflicts.conflicts(KUBE) == ()  # nothing was remembered: read again
    assert script.reads == 2


def operator(replicas: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": "kubeflow-training-operator", "namespace": "opendatahub"},
            "spec": {"replicas": replicas}}


def jobs_observe(kube: KubeClient) -> Platform:
    return coexistence.observe(kube, trainer=False, jobs=True,
                               crd_names=("mpijobs.kubeflow.org",))


@pytest.mark.parametrize(("answers", "reasons"), [
    pytest.param({}, [], id="nothing-served"),
    pytest.param({("GET", DEPLOYMENTS): FORBIDDEN, ("GET", DSC_V2): FORBIDDEN,
                  ("GET", DSC_V1): FORBIDDEN, ("GET", MPIJOBS_CRD): FORBIDDEN},
                 [], id="forbidden-reads-nothing"),
    pytest.param({("GET", DEPLOYMENTS): (405, {}), ("GET", DSC_V2): (404, {}),
                  ("GET", DSC_V1): (404, {}), ("GET", MPIJOBS_CRD): (404, {})},
                 [], id="not-served-reads-nothing"),
    pytest.param({("GET", DEPLOYMENTS): (200, items(operator()))}, ["TrainingOperator"],
                 id="training-operator"),
    pytest.param({("GET", DEPLOYMENTS): (200, items(operator(replicas=0)))}, [],
                 id="training-operator-scaled-to-zero"),
    pytest.param({("GET", DSC_V1): (200, items({
        "metadata": {"name": "default-dsc"},
        "spec": {"components": {"trainingoperator": {"managementState": "Managed"}}}}))},
                 ["PlatformComponentManaged"], id="dsc-trainingoperator-managed"),
    pytest.param({("GET", MPIJOBS_CRD): (200, {
        "metadata": {"name": "mpijobs.kubeflow.org"},
        "spec": {"versions": [{"name": "v1", "served": True}]}})},
                 ["CRDVersionNotServed"], id="mpijobs-v1-only"),
])
def test_the_cluster_as_read(answers: dict[tuple[str, str], Answer],
                             reasons: list[str]) -> None:
    kube, transport = scripted(answers)
    conflicts = ConflictMemo(Scope.JOBS, jobs_observe, 30.0)
    assert [c.reason for c in conflicts.conflicts(kube)] == reasons
    seen = len(transport.seen)
    assert [c.reason for c in conflicts.conflicts(kube)] == reasons
    assert len(transport.seen) == seen  # answered from memory


def test_a_server_error_is_not_nothing_there() -> None:
    kube, _ = scripted({("GET", DEPLOYMENTS): SERVER_ERROR})
    with pytest.raises(TemporaryError):
        ConflictMemo(Scope.JOBS, jobs_observe, 30.0).conflicts(kube)

