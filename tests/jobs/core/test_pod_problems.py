from __future__ import annotations

from typing import Any

import pytest

from functions.jobs.core.pod_problems import PodProblem, pod_problems

Obj = dict[str, Any]


def stuck_pod(*, phase: str = "Pending", waiting: str | None = None, message: str = "",
              init: bool = False, scheduled: str | None = None, deleting: bool = False,
              last_exit: int | None = None, restarts: int = 0) -> Obj:
    status: Obj = {"phase": phase}
    if waiting is not None:
        cs: Obj = {"name": "pytorch", "image": "registry.invalid/x:1", "restartCount": restarts,
                   "state": {"waiting": {"reason": waiting, "message": message}}}
        if last_exit is not None:
            cs["lastState"] = {"terminated": {"exitCode": last_exit}}
        status["initContainerStatuses" if init else "containerStatuses"] = [cs]
    if scheduled is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": scheduled,
                                 "message": message}]
    meta: Obj = {"name": "mnist-worker-0", "uid": "u-1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-03-01T12:00:00Z"
    return {"metadata": meta, "spec": {"containers": [{"name": "pytorch"}]}, "status": status}


@pytest.mark.parametrize(("pod", "expected"), [
    pytest.param(stuck_pod(waiting="ImagePullBackOff", message='Back-off pulling image "x"'),
                 [PodProblem("u-1", "image/pytorch", "ImagePullBackOff",
                             'Pod mnist-worker-0: container "pytorch" cannot pull image '
                             '"registry.invalid/x:1": Back-off pulling image "x"')],
                 id="image-pull-back-off"),
    pytest.param(stuck_pod(waiting="ErrImagePull"),
                 [PodProblem("u-1", "image/pytorch", "ErrImagePull",
                             'Pod mnist-worker-0: container "pytorch" cannot pull image '
                             '"registry.invalid/x:1"')], id="err-image-pull-same-cause"),
    pytest.param(stuck_pod(waiting="ErrImagePull", init=True),
                 [PodProblem("u-1", "image/pytorch", "ErrImagePull",
                             'Pod mnist-worker-0: container "pytorch" cannot pull image '
                             '"registry.invalid/x:1"')], id="init-container"),
    pytest.param(stuck_pod(phase="Running", waiting="CrashLoopBackOff", last_exit=1,
                           restarts=4),
                 [PodProblem("u-1", "crash/pytorch", "CrashLoopBackOff",
                             'Pod mnist-worker-0: container "pytorch" keeps crashing '
                             "(last exit code 1), restarted 4 times")], id="crash-loop"),
    pytest.param(stuck_pod(scheduled="Unschedulable",
                           message="0/4 nodes are available: 4 Insufficient nvidia.com/gpu."),
                 [PodProblem("u-1", "unschedulable", "Unschedulable",
                             "Pod mnist-worker-0 cannot be scheduled: 0/4 nodes are available: "
                             "4 Insufficient nvidia.com/gpu.")], id="unschedulable"),
    pytest.param(stuck_pod(scheduled="SchedulingGated"), [], id="gated-is-not-stuck"),
    pytest.param(stuck_pod(waiting="ContainerCreating"), [], id="creating-is-not-stuck"),
    pytest.param(stuck_pod(waiting="ImagePullBackOff", deleting=True), [],
                 id="terminating-pod"),
    pytest.param(stuck_pod(phase="Failed", waiting="CrashLoopBackOff"), [], id="ended-pod"),
    pytest.param(stuck_pod(phase="Running"), [], id="healthy"),
])
def test_pod_problems(pod: Obj, expected: list[PodProblem]) -> None:
    assert pod_problems([pod]) == expected


def test_image_pull_reasons_are_one_cause() -> None:
    first = pod_problems([stuck_pod(waiting="ErrImagePull", message="not found")])
    then = pod_problems([stuck_pod(waiting="ImagePullBackOff", message="Back-off")])
    assert [p.key for p in first] == [p.key for p in then] == [("u-1", "image/pytorch")]
