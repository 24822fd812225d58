"""Queue order and admission decisions from plain entries."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from functions.api.core import queue
from functions.api.core.policy import PriorityPolicy
from functions.api.core.queue import Entry, Limits


def entry(name: str, priority: int = 0, at: int = 0, phase: str = "Queued", gpus: int = 0,
          namespace: str = "a") -> Entry:
    return Entry(kind="PyTorchJob", namespace=namespace, name=name, priority=priority,
                 submitted_at=f"2026-01-01T00:00:{at:02d}.000000Z", gpus=gpus,
                 phase=phase, labelled=phase, resource_version="7")  # type: ignore[arg-type]


def names(entries: list[Entry]) -> list[str]:
    return [e.name for e in entries]


@pytest.mark.parametrize(("entries", "limits", "expected"), [
    pytest.param([entry("a", at=1), entry("b", at=2), entry("c", at=3)], Limits(max_running=2),
                 ["a", "b"], id="fifo-up-to-the-limit"),
    pytest.param([entry("a", at=1), entry("b", 5, at=2), entry("c", 5, at=3)],
                 Limits(max_running=2), ["b", "c"], id="priority-first"),
    pytest.param([entry("r", phase="Admitted"), entry("a", at=1), entry("b", at=2)],
                 Limits(max_running=2), ["a"], id="running-jobs-use-capacity"),
    pytest.param([entry("f", phase="Finished"), entry("a", at=1)], Limits(max_running=1),
                 ["a"], id="finished-jobs-free-capacity"),
    pytest.param([entry("a", at=1, gpus=4), entry("b", at=2, gpus=1)], Limits(max_gpus=4),
                 ["a"], id="gpu-limit-strict-order"),
    pytest.param([entry("a", at=1, gpus=8), entry("b", at=2, gpus=1)], Limits(max_gpus=4),
                 ["b"], id="never-fitting-job-passed-over"),
    pytest.param([entry("a1", at=1), entry("a2", at=2), entry("b1", at=3, namespace="b")],
                 Limits(max_running_per_namespace=1), ["a1", "b1"],
                 id="full-namespace-does-not-block-others"),
    pytest.param([entry("a", at=1, gpus=2), entry("b", at=2, gpus=2, namespace="b")],
                 Limits(max_gpus_per_namespace=2, max_gpus=3), ["a"],
                 id="cluster-gpus-bound-across-namespaces"),
    pytest.param([entry("a", at=1)], Limits(max_running=0), [], id="zero-admits-nothing"),
    pytest.param([entry("a", at=2), entry("b", at=1)], Limits(), ["b", "a"],
                 id="unlimited-in-order"),
])
def test_admissions(entries: list[Entry], limits: Limits, expected: list[str]) -> None:
    assert names(queue.admissions(entries, limits)) == expected


def test_positions_per_namespace_in_queue_order() -> None:
    entries = [entry("a", at=1), entry("b", 9, at=2), entry("c", at=3, namespace="x"),
               entry("r", phase="Admitted")]
    assert queue.positions(entries) == {("a", "PyTorchJob", "b"): 1, ("a", "PyTorchJob", "a"): 2,
                                        ("x", "PyTorchJob", "c"): 1}


@pytest.mark.parametrize(("env", "expected"), [
    pytest.param({}, Limits(), id="unset"),
    pytest.param({"TRAINING_QUEUE_MAX_RUNNING": "2", "TRAINING_QUEUE_MAX_GPUS": "-1",
                  "TRAINING_QUEUE_MAX_GPUS_PER_NAMESPACE": " 8 "},
                 Limits(max_running=2, max_gpus_per_namespace=8), id="set"),
])
def test_limits_from_env(env: dict[str, str], expected: Limits) -> None:
    assert queue.limits_from_env(env) == expected


def test_limits_from_env_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="TRAINING_QUEUE_MAX_RUNNING"):
        queue.limits_from_env({"TRAINING_QUEUE_MAX_RUNNING": "two"})


def cr(suspend: bool, conditions: tuple[str, ...] = (), label: str | None = "Queued",
       annotations: dict[str, str] | None = None) -> dict[str, object]:
    labels = {queue.LABEL_QUEUE_STATE: label} if label else {}
    return {"kind": "PyTorchJob",
            "metadata": {"name": "j", "namespace": "n", "labels": labels,
                         "annotations": annotations or {}, "resourceVersion": "5",
                         "creationTimestamp": "2026-01-01T00:00:05Z"},
            "spec": {"runPolicy": {"suspend": suspend}, "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": {"containers": [
                    {"name": "pytorch", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}},
                "Worker": {"replicas": 3, "template": {"spec": {"containers": [
                    {"name": "pytorch", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}}}},
            "status": {"conditions": [{"type": t, "status": "True"} for t in conditions]}}


@pytest.mark.parametrize(("obj", "phase", "priority", "submitted"), [
    pytest.param(cr(True, annotations={queue.ANNOTATION_PRIORITY: "7",
                                       queue.ANNOTATION_SUBMITTED_AT: "2026-01-01T00:00:01.5Z"}),
                 "Queued", 7, "2026-01-01T00:00:01.500000Z", id="queued"),
    pytest.param(cr(False, annotations={queue.ANNOTATION_PRIORITY: "x"}), "Admitted", 0,
                 "2026-01-01T00:00:05.000000Z", id="admitted-bad-priority-creation-time"),
    pytest.param(cr(False, ("Running", "Succeeded")), "Finished", 0,
                 "2026-01-01T00:00:05.000000Z", id="finished"),
])
def test_entry_of(obj: dict[str, object], phase: str, priority: int, submitted: str) -> None:
    found = queue.entry_of(obj)
    assert found is not None
    assert (found.phase, found.priority, found.submitted_at, found.gpus) == (
        phase, priority, submitted, 5)


def test_entry_of_ignores_jobs_outside_the_queue() -> None:
    assert queue.entry_of(cr(True, label=None)) is None


def test_stale_labels_and_patches() -> None:
    done = queue.entry_of(cr(False, ("Succeeded",), label="Admitted"))
    waiting = queue.entry_of(cr(True))
    assert done is not None and waiting is not None
    assert queue.stale_labels([done, waiting]) == [done]
    assert queue.relabel_patch(done) == {"metadata": {
        "labels": {queue.LABEL_QUEUE_STATE: "Finished"}, "resourceVersion": "5"}}
    now = datetime(2026, 1, 1, 1, 2, 3, 4, tzinfo=UTC)
    assert queue.admission_patch(waiting, now) == {
        "metadata": {"labels": {queue.LABEL_QUEUE_STATE: "Admitted"},
                     "annotations": {queue.ANNOTATION_ADMITTED_AT: "2026-01-01T01:02:03.000004Z"},
                     "resourceVersion": "5"},
        "spec": {"runPolicy": {"suspend": False}}}


def test_capped_priorities_order_the_queue_as_the_policy_allows() -> None:
    entries = [entry("early", 0, at=1), entry("jumper", 1000, at=2),
               entry("vip", 50, at=3, namespace="v")]
    policy = PriorityPolicy(0, {"v": 100})
    capped = queue.capped(entries, policy)
    assert [e.priority for e in capped] == [0, 0, 50]
    assert names(queue.admissions(capped, Limits(max_running=2))) == ["vip", "early"]
    assert names(queue.admissions(entries, Limits(max_running=2))) == ["jumper", "vip"]
