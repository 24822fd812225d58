"""The guards a job opts into by annotation: their values, the pending timeout (status and
reconcile sides) and the deadline recorded on the job."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import yaml

from functions.jobs.core import guards as g
from functions.jobs.core.defaults import with_defaults
from functions.jobs.core.model import Job, parse_job
from functions.jobs.core.plan import gc_may_act, gc_plan, reconcile_plan, status_of
from functions.jobs.core.planning import Observed
from functions.jobs.core.pods import name_of
from functions.jobs.core.settings import Settings
from functions.jobs.core.status import derive_status
from tests.jobs.fixtures import NOW, condition, job, pod, stamp, summary
from tests.support import REPO

PT = "pytorch-master-workers.yaml"
MPI = "mpijob-pi.yaml"
MPI_V1 = "mpijob-v1-pi.yaml"
RUNNING_STATUS = {"conditions": [condition("Created", reason="PyTorchJobCreated")],
                  "startTime": stamp(-900)}


@pytest.mark.parametrize(("text", "seconds"), [
    pytest.param("10m", 600.0, id="minutes"),
    pytest.param("1h30m", 5400.0, id="hours-minutes"),
    pytest.param("90s", 90.0, id="seconds"),
    pytest.param("2h0m5s", 7205.0, id="three-units"),
    pytest.param("0s", None, id="zero"),
    pytest.param("10", None, id="no-unit"),
    pytest.param("10min", None, id="unknown-unit"),
    pytest.param("1.5h", None, id="fraction"),
    pytest.param("-5m", None, id="negative"),
    pytest.param("", None, id="empty"),
    pytest.param("1h1m1s1h", None, id="four-units"),
])
def test_parse_duration(text: str, seconds: float | None) -> None:
    assert g.parse_duration(text) == seconds


@pytest.mark.parametrize(("text", "limits"), [
    pytest.param("Worker=3", {"worker": 3}, id="one"),
    pytest.param("Worker=3,master=0", {"worker": 3, "master": 0}, id="two-any-case"),
    pytest.param("Worker=-1", None, id="negative"),
    pytest.param("Worker:3", None, id="colon"),
    pytest.param("Worker=3,", None, id="trailing-comma"),
    pytest.param("=3", None, id="no-type"),
    pytest.param("Worker=12345", None, id="too-large"),
])
def test_parse_limits(text: str, limits: dict[str, int] | None) -> None:
    assert g.parse_limits(text) == limits


@pytest.mark.parametrize(("annotations", "expected"), [
    pytest.param({}, g.NONE, id="none"),
    pytest.param({g.PENDING_TIMEOUT: "10m"}, g.Guards(pending_timeout=600.0), id="timeout"),
    pytest.param({g.PENDING_TIMEOUT: "10m", g.PENDING_TIMEOUT_ACTION: "Suspend"},
                 g.Guards(pending_timeout=600.0, pending_action="Suspend"), id="suspend"),
    pytest.param({g.PENDING_TIMEOUT: "10m", g.PENDING_TIMEOUT_ACTION: "Requeue"},
                 g.Guards(pending_timeout=600.0), id="unknown-action-fails"),
    pytest.param({g.PENDING_TIMEOUT: "soon"}, g.NONE, id="malformed-timeout-ignored"),
    pytest.param({g.RESTART_SCOPE: "Job"}, g.Guards(whole_job=True), id="whole-job"),
    pytest.param({g.RESTART_SCOPE: "Pod"}, g.NONE, id="pod-scope"),
    pytest.param({g.RESTART_LIMITS: "worker=2,MASTER=0"},
                 g.Guards(restart_limits={"Master": 0, "Worker": 2}), id="limits-canonical"),
    pytest.param({g.RESTART_LIMITS: "Chief=2"}, g.NONE, id="limit-of-absent-type-ignored"),
])
def test_guards_of(annotations: dict[str, str], expected: g.Guards) -> None:
    assert g.guards_of(job(PT, annotations=annotations)) == expected


def pending(owner: Job, rtype: str, index: int, age: float, *, why: str = "",
            phase: str = "Pending") -> dict[str, Any]:
    """A pod of ``owner`` created ``age`` seconds before NOW, unscheduled when ``why``."""
    out = pod(owner, rtype, index, phase)
    out["metadata"]["creationTimestamp"] = stamp(-age)
    out["status"].pop("containerStatuses", None)
    if why:
        out["status"]["conditions"] = [{"type": "PodScheduled", "status": "False",
                                        "reason": "Unschedulable", "message": why}]
    return out


def guarded(file: str = PT, **annotations: str) -> Job:
    return with_defaults(job(file, status=RUNNING_STATUS, annotations=annotations))


UNSCHEDULABLE = "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector."


@pytest.mark.parametrize(("ages", "annotations", "failed", "requeue"), [
    pytest.param((601, 30, 30), {g.PENDING_TIMEOUT: "10m"}, True, None, id="oldest-past"),
    pytest.param((590, 30, 30), {g.PENDING_TIMEOUT: "10m"}, False, 10.0, id="not-yet"),
    pytest.param((601, 30, 30), {}, False, None, id="not-opted-in"),
    pytest.param((601, 30, 30), {g.PENDING_TIMEOUT: "10m",
                                 g.PENDING_TIMEOUT_ACTION: "Suspend"}, False, None,
                 id="suspend-is-reconciles"),
])
def test_pending_timeout_fails_the_job(ages: tuple[int, ...], annotations: dict[str, str],
                                       failed: bool, requeue: float | None) -> None:
    j = guarded(**annotations)
    pods = [pending(j, rtype, i, age, why=UNSCHEDULABLE)
            for (rtype, i), age in zip((("Master", 0), ("Worker", 0), ("Worker", 1)), ages,
                                       strict=True)]
    outcome = derive_status(j, pods, NOW)
    assert outcome is not None
    assert outcome.status.finished is failed
    assert outcome.requeue_after == requeue
    if failed:
        assert summary(outcome.status.conditions)[-1] == (
            "Failed", "True", "PyTorchJobPendingTimeout")
        assert outcome.status.conditions[-1].message == (
            "PyTorchJob mnist has failed: pod mnist-master-0 waited longer than its pending "
            f"timeout of 10m (training.opendatahub.io/pending-timeout) (Unschedulable "
            f"{UNSCHEDULABLE})")
        assert [(n.type, n.reason) for n in outcome.notices] == [
            ("Warning", "PyTorchJobPendingTimeout")]
        assert outcome.status.completion_time is not None


@pytest.mark.parametrize("phase", [
    pytest.param("Running", id="running"), pytest.param("Succeeded", id="succeeded"),
    pytest.param("Failed", id="failed")])
def test_only_pending_pods_wait(phase: str) -> None:
    j = guarded(**{g.PENDING_TIMEOUT: "1m"})
    pods = [pending(j, "Master", 0, 3600, phase=phase)]
    assert g.waiting(pods) == []


def test_a_pod_going_away_does_not_wait() -> None:
    j = guarded(**{g.PENDING_TIMEOUT: "1m"})
    gone = pending(j, "Master", 0, 3600)
    gone["metadata"]["deletionTimestamp"] = stamp()
    assert g.waiting([gone]) == []


def test_a_podgroup_volcano_holds_counts_as_waiting() -> None:
    j = guarded(**{g.PENDING_TIMEOUT: "5m"})
    outcome = derive_status(j, [], NOW, podgroup_since=NOW - timedelta(minutes=6))
    assert outcome is not None
    assert summary(outcome.status.conditions)[-1] == (
        "Failed", "True", "PyTorchJobPendingTimeout")
    assert "the PodGroup (not admitted by the gang scheduler)" in (
        outcome.status.conditions[-1].message)


def test_a_suspended_job_has_no_pending_timeout() -> None:
    j = with_defaults(job(PT, spec={"runPolicy": {"suspend": True}}, status=RUNNING_STATUS,
                          annotations={g.PENDING_TIMEOUT: "1m"}))
    assert g.pending_check(j, g.guards_of(j), [pending(j, "Master", 0, 3600)], NOW) is None


@pytest.mark.parametrize("file", [pytest.param(MPI, id="mpijob-v2beta1"),
                                  pytest.param(MPI_V1, id="mpijob-v1")])
def test_mpijobs_time_out_too(file: str) -> None:
    j = job(file, status={"conditions": [condition("Created", reason="MPIJobCreated")],
                          "startTime": stamp(-900)},
            annotations={g.PENDING_TIMEOUT: "2m"})
    d = with_defaults(j)
    worker = pending(d, "Worker", 0, 200, why=UNSCHEDULABLE)
    worker["metadata"]["labels"]["training.kubeflow.org/job-role"] = "worker"
    outcome = status_of(Observed(job=j, pods=[worker]), NOW)
    assert outcome is not None
    assert summary(outcome.status.conditions)[-1] == ("Failed", "True", "MPIJobPendingTimeout")


# -- the reconcile side: suspension and the recorded deadline ----------------------------------

def observed(j: Job, pods: list[dict[str, Any]]) -> Observed:
    return Observed(job=j, pods=pods)


def test_suspend_action_suspends_and_creates_nothing() -> None:
    raw = job(PT, status=RUNNING_STATUS, annotations={g.PENDING_TIMEOUT: "10m",
                                                       g.PENDING_TIMEOUT_ACTION: "Suspend"})
    d = with_defaults(raw)
    plan = reconcile_plan(observed(raw, [pending(d, "Master", 0, 700, why=UNSCHEDULABLE)]),
                          NOW, Settings())
    assert plan.suspend is not None
    assert (plan.suspend.type, plan.suspend.reason) == ("Warning", "PendingTimeout")
    assert plan.suspend.message.startswith(
        "PyTorchJob mnist is suspended and handed back to its queue: pod mnist-master-0 "
        "waited longer than its pending timeout of 10m")
    assert [o for o in plan.creates if o["kind"] == "Pod"] == []


@pytest.mark.parametrize(("annotations", "pods", "deadline", "requeue"), [
    pytest.param({g.PENDING_TIMEOUT: "10m"}, [], {g.PENDING_DEADLINE: stamp(600)}, 600.0,
                 id="first-pods-wait-from-now"),
    pytest.param({g.PENDING_TIMEOUT: "10m"}, [("Master", 0, 100)],
                 {g.PENDING_DEADLINE: stamp(500)}, 500.0, id="oldest-pending-pod"),
    pytest.param({g.PENDING_TIMEOUT: "10m", g.PENDING_DEADLINE: stamp(502)},
                 [("Master", 0, 100)], {}, 500.0, id="within-slack-left-alone"),
    pytest.param({g.PENDING_TIMEOUT: "10m", g.PENDING_DEADLINE: stamp(-5)}, [],
                 {g.PENDING_DEADLINE: stamp(600)}, 600.0, id="stale-replaced"),
    pytest.param({g.PENDING_DEADLINE: stamp(-5)}, [], {g.PENDING_DEADLINE: None}, None,
                 id="annotation-removed-forgotten"),
    pytest.param({}, [], {}, None, id="not-opted-in"),
])
def test_the_deadline_recorded_on_the_job(annotations: dict[str, str],
                                          pods: list[tuple[str, int, int]],
                                          deadline: dict[str, str | None],
                                          requeue: float | None) -> None:
    raw = job(PT, status=RUNNING_STATUS, annotations=annotations)
    d = with_defaults(raw)
    plan = reconcile_plan(observed(raw, [pending(d, *p) for p in pods]), NOW, Settings())
    assert plan.annotations == deadline
    assert plan.requeue_after == requeue


def test_a_finished_job_forgets_its_deadline() -> None:
    raw = job(PT, status={**RUNNING_STATUS, "conditions": [
        condition("Failed", reason="PyTorchJobPendingTimeout")]},
        annotations={g.PENDING_TIMEOUT: "10m", g.PENDING_DEADLINE: stamp(-1)})
    assert reconcile_plan(observed(raw, []), NOW, Settings()).annotations == {
        g.PENDING_DEADLINE: None}


@pytest.mark.parametrize(("persisted", "derived", "confirm"), [
    pytest.param({}, {"conditions": [{"type": "Failed", "status": "True",
                                      "reason": "TFJobPendingTimeout"}]}, True, id="new"),
    pytest.param({"conditions": [{"type": "Failed", "status": "True",
                                  "reason": "TFJobPendingTimeout"}]},
                 {"conditions": [{"type": "Failed", "status": "True",
                                  "reason": "TFJobPendingTimeout"}]}, False, id="persisted"),
    pytest.param({}, {"conditions": [{"type": "Failed", "status": "True",
                                      "reason": "TFJobFailed"}]}, False, id="other-failure"),
])
def test_a_timeout_is_confirmed_on_fresh_state(persisted: dict[str, Any],
                                               derived: dict[str, Any], confirm: bool) -> None:
    assert g.newly_timed_out(persisted, derived) is confirm


def test_gc_deletes_the_pods_a_pending_timeout_left_waiting() -> None:
    raw = job(PT, spec={"runPolicy": {"cleanPodPolicy": "None"}},
              annotations={g.PENDING_TIMEOUT: "10m"},
              status={"conditions": [condition("Failed", reason="PyTorchJobPendingTimeout")],
                      "completionTime": stamp(-1)})
    d = with_defaults(raw)
    pods = [pending(d, "Master", 0, 700), pending(d, "Worker", 0, 700, phase="Running")]
    assert gc_may_act(raw, gang_scheduling=False)
    assert [name_of(p) for p in gc_plan(observed(raw, pods), [], NOW).deletes] == [
        "mnist-master-0"]


def test_the_annotated_sample_asks_for_every_guard() -> None:
    sample = yaml.safe_load((REPO / "config" / "samples" / "pytorchjob-guards.yaml").read_text())
    assert g.guards_of(parse_job(sample)) == g.Guards(
        pending_timeout=900.0, pending_action="Suspend", whole_job=True,
        restart_limits={"Worker": 3, "Master": 0})
