"""The jobs-by-state gauges: the state of a job, the levels counted from the caches, and that
only the Lease's holder reports them."""

from __future__ import annotations

from typing import Any

import pytest

from functions.jobs import gauges
from functions.jobs.core.frameworks import MPI, PYTORCH

Obj = dict[str, Any]


def job(name: str, *true: str, labels: dict[str, str] | None = None,
        suspend: bool = False, kind: str = "PyTorchJob") -> Obj:
    return {"kind": kind, "metadata": {"name": name, "namespace": "team-a",
                                       "labels": labels or {}},
            "spec": {"runPolicy": {"suspend": suspend}},
            "status": {"conditions": [{"type": t, "status": "True"} for t in true]}}


@pytest.mark.parametrize(("obj", "state"), [
    pytest.param(job("new"), "Pending", id="no-status"),
    pytest.param(job("made", "Created"), "Created", id="created"),
    pytest.param(job("run", "Created", "Running"), "Running", id="running"),
    pytest.param(job("done", "Created", "Succeeded"), "Succeeded", id="succeeded"),
    pytest.param(job("held", "Created", "Suspended"), "Suspended", id="suspended"),
    pytest.param({"status": {"conditions": [{"type": "Created", "status": "True"},
                                            {"type": "Running", "status": "False"}]}},
                 "Created", id="false-conditions-do-not-count"),
])
def test_state_is_the_last_true_condition(obj: Obj, state: str) -> None:
    assert gauges.state_of(obj) == state


def test_levels_count_states_queues_and_launchers() -> None:
    queued = {"training.opendatahub.io/queue-state": "Queued",
              "training.opendatahub.io/queue": "gpu"}
    states, depth, launchers = gauges.levels({
        PYTORCH.name: [job("a", "Created", "Running"), job("b", "Created", "Running"),
                       job("c", labels=queued, suspend=True),
                       job("d", "Created", labels=queued)],  # admitted: not queued
        MPI.name: [job("pi", "Created", kind="MPIJob")],
    })
    assert states == {("pytorch", "Running"): 2, ("pytorch", "Pending"): 1,
                      ("pytorch", "Created"): 1, ("mpi", "Created"): 1}
    assert depth == {"gpu": 1}
    assert launchers == [("pi-launcher", "team-a")]


class FakeStore:
    def __init__(self, objs: list[Obj]) -> None:
        self.objs = objs

    def values(self) -> list[Obj]:
        return self.objs


class FakeInformer:
    def __init__(self, objs: list[Obj]) -> None:
        self.store = FakeStore(objs)


class FakeKube:
    """Lists one TrainJob the queue holds, in queue ``gpu``."""

    def __init__(self) -> None:
        self.selectors: list[str | None] = []

    def list(self, res: Any, namespace: str | None = None, *,
             label_selector: str | None = None) -> list[Obj]:
        self.selectors.append(label_selector)
        return [{"kind": "TrainJob", "spec": {"suspend": True},
                 "metadata": {"name": "llm", "namespace": "team-a", "labels": {
                     "training.opendatahub.io/queue-state": "Queued",
                     "training.opendatahub.io/queue": "gpu"}}}]


class FakeCache:
    def __init__(self, jobs: dict[str, list[Obj]]) -> None:
        self.jobs = jobs

    def ready(self, res: Any) -> FakeInformer | None:
        found = self.jobs.get(res.kind)
        return FakeInformer(found) if found is not None else None


@pytest.mark.parametrize(("holder", "function", "reported"), [
    pytest.param(True, "status", True, id="holder-reports"),
    pytest.param(False, "status", False, id="another-replica-holds-the-lease"),
    pytest.param(True, "reconcile", False, id="no-status-caches-in-this-process"),
])
def test_only_the_lease_holder_reports(monkeypatch: pytest.MonkeyPatch, holder: bool,
                                       function: str, reported: bool) -> None:
    asked: list[str] = []

    def try_acquire(kube: Any, name: str, **_: Any) -> bool:
        asked.append(name)
        return holder

    monkeypatch.setattr("functions.runtime.lease.try_acquire", try_acquire)
    collector = gauges.JobGauges(clock=lambda: 100.0)
    kube = FakeKube()
    collector.attach(function, FakeCache({"PyTorchJob": [job("a", "Created")]}),
                     kube)  # type: ignore[arg-type]
    families = {f.name: f for f in collector.collect()}
    assert bool(families) == reported
    if reported:
        samples = {(s.labels["framework"], s.labels["state"]): s.value
                   for s in families["odh_training_jobs"].samples}
        assert samples[("pytorch", "Created")] == 1 and samples[("pytorch", "Running")] == 0
        assert {s.labels["queue"]: s.value
                for s in families["odh_training_queue_depth"].samples} == {"default": 0,
                                                                           "gpu": 1}
        assert kube.selectors == ["training.opendatahub.io/queue-state=Queued"]
    list(collector.collect())  # asked again within HOLDER_SECONDS: the answer is kept
    assert asked == ([gauges.LEASE] if function == "status" else [])
