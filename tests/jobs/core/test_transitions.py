from __future__ import annotations

from typing import Any

import pytest

from functions.jobs.core.transitions import StatusTransitions, status_transitions

Obj = dict[str, Any]


def status(*true: str, false: tuple[str, ...] = (), **failed: int) -> Obj:
    conditions = [{"type": t, "status": "True"} for t in true]
    conditions += [{"type": t, "status": "False"} for t in false]
    return {"conditions": conditions,
            "replicaStatuses": {rtype: {"active": 1, "failed": n} for rtype, n in failed.items()}}


@pytest.mark.parametrize(("before", "after", "expected"), [
    pytest.param({}, status("Created"), StatusTransitions(created=True), id="first-status"),
    pytest.param({}, status("Created", "Suspended"), StatusTransitions(created=True),
                 id="created-suspended"),
    pytest.param(status("Created"), status("Created", "Running"), StatusTransitions(),
                 id="running-is-not-counted"),
    pytest.param(status("Created", "Running"), status("Created", "Succeeded", false=("Running",)),
                 StatusTransitions(succeeded=True), id="succeeded"),
    pytest.param({}, status("Created", "Succeeded"),
                 StatusTransitions(created=True, succeeded=True), id="fast-job-counts-both"),
    pytest.param(status("Created", "Running", Worker=0),
                 status("Created", "Restarting", Worker=1),
                 StatusTransitions(restarted=True, failed_pods=1), id="restart-begins"),
    pytest.param(status("Created", "Restarting", Worker=1),
                 status("Created", "Restarting", Worker=2),
                 StatusTransitions(failed_pods=1), id="still-restarting-counts-no-restart"),
    pytest.param(status("Created", "Restarting", Worker=1), status("Created", "Running", Worker=0),
                 StatusTransitions(), id="failed-pod-replaced"),
    pytest.param(status("Created", "Running", Master=0, Worker=1),
                 status("Created", "Failed", false=("Running",), Master=2, Worker=0),
                 StatusTransitions(failed=True, failed_pods=2), id="per-type-growth"),
    pytest.param(status("Created", "Failed"), status("Created", "Failed"), StatusTransitions(),
                 id="rewrite-counts-nothing"),
    pytest.param(status("Created", "Restarting"),
                 status("Created", "Running", "Restarting"), StatusTransitions(),
                 id="already-true"),
])
def test_status_transitions(before: Obj, after: Obj, expected: StatusTransitions) -> None:
    assert status_transitions(before, after) == expected
    assert status_transitions(before, after).any is (expected != StatusTransitions())
