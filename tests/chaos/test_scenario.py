"""The chaos suites' comparison: what it keeps of an object and what it drops as history or
timing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chaos.scenario import describe, leave_out_cleanup_races


def job(*conditions: tuple[str, str]) -> dict[str, Any]:
    return {"kind": "TFJob", "metadata": {"name": "tf"}, "spec": {},
            "status": {"conditions": [{"type": t, "status": s, "reason": f"TFJob{t}"}
                                      for t, s in conditions]}}


@pytest.mark.parametrize(("conditions", "kept"), [
    pytest.param([("Created", "True"), ("Running", "False"), ("Succeeded", "True")],
                 [("Created", "True"), ("Succeeded", "True")], id="finished-drops-running-false"),
    pytest.param([("Created", "True"), ("Running", "False"), ("Failed", "True")],
                 [("Created", "True"), ("Failed", "True")], id="failed-drops-running-false"),
    pytest.param([("Created", "True"), ("Running", "False"), ("Restarting", "True")],
                 [("Created", "True"), ("Restarting", "True"), ("Running", "False")],
                 id="unfinished-keeps-running-false"),
    pytest.param([("Created", "True"), ("Running", "True")],
                 [("Created", "True"), ("Running", "True")], id="running-kept"),
])
def test_conditions_compared(conditions: list[tuple[str, str]],
                             kept: list[tuple[str, str]]) -> None:
    assert [(t, s) for t, s, _ in describe(job(*conditions))["conditions"]] == kept


def finished_tf_job(clean_pod_policy: str) -> dict[str, Any]:
    return {"owners": [], "conditions": [["Created", "True", ""], ["Succeeded", "True", ""]],
            "spec": {"runPolicy": {"cleanPodPolicy": clean_pod_policy}}}


def pod(phase: str) -> dict[str, Any]:
    return {"owners": ["TFJob/tf"], "phase": phase, "conditions": []}


SERVICE: dict[str, Any] = {"owners": ["TFJob/tf"], "conditions": [], "spec": {}}


@pytest.mark.parametrize(("policy", "phase", "left"), [
    pytest.param("Running", "Succeeded", {"TFJob tf"}, id="finished-pod-and-service-left-out"),
    pytest.param("Running", "Running", {"TFJob tf", "Pod tf-worker-1", "Service tf-worker-1"},
                 id="running-pod-compared"),
    pytest.param("None", "Succeeded", {"TFJob tf", "Pod tf-worker-1", "Service tf-worker-1"},
                 id="kept-by-policy-compared"),
])
def test_pods_a_finished_job_may_clean_up_or_keep_are_left_out(
        policy: str, phase: str, left: set[str]) -> None:
    state = {"TFJob tf": finished_tf_job(policy), "Pod tf-worker-1": pod(phase),
             "Service tf-worker-1": SERVICE}
    assert set(leave_out_cleanup_races(state)) == left


def test_pods_of_an_unfinished_job_are_compared() -> None:
    job = finished_tf_job("Running") | {"conditions": [["Running", "True", ""]]}
    state = {"TFJob tf": job, "Pod tf-worker-1": pod("Succeeded"), "Service tf-worker-1": SERVICE}
    assert set(leave_out_cleanup_races(state)) == set(state)
