from __future__ import annotations

import pytest

from functions.jobs.core.conditions import set_condition
from functions.jobs.core.model import JobStatus
from tests.jobs.fixtures import NOW, condition, stamp, summary

CREATED = condition("Created", reason="XCreated")
RUNNING = condition("Running", reason="XRunning")
RESTARTING = condition("Restarting", reason="XRestarting")
FAILED = condition("Failed", reason="XFailed")
SUSPENDED = condition("Suspended", reason="XSuspended")


@pytest.mark.parametrize(("before", "update", "after", "changed"), [
    pytest.param([], ("Created", "True", "XCreated"), [("Created", "True", "XCreated")], True,
                 id="first-condition"),
    pytest.param([CREATED], ("Running", "True", "XRunning"),
                 [("Created", "True", "XCreated"), ("Running", "True", "XRunning")], True,
                 id="append"),
    pytest.param([CREATED, RUNNING], ("Running", "True", "XRunning"),
                 [("Created", "True", "XCreated"), ("Running", "True", "XRunning")], False,
                 id="same-type-status-reason-is-no-change"),
    pytest.param([CREATED, RUNNING], ("Restarting", "True", "XRestarting"),
                 [("Created", "True", "XCreated"), ("Restarting", "True", "XRestarting")], True,
                 id="restarting-replaces-running"),
    pytest.param([CREATED, RESTARTING], ("Running", "True", "XRunning"),
                 [("Created", "True", "XCreated"), ("Running", "True", "XRunning")], True,
                 id="running-replaces-restarting"),
    pytest.param([CREATED, RUNNING], ("Succeeded", "True", "XSucceeded"),
                 [("Created", "True", "XCreated"), ("Running", "False", "XRunning"),
                  ("Succeeded", "True", "XSucceeded")], True,
                 id="succeeded-flips-running-false"),
    pytest.param([CREATED, RUNNING], ("Failed", "True", "XFailed"),
                 [("Created", "True", "XCreated"), ("Running", "False", "XRunning"),
                  ("Failed", "True", "XFailed")], True, id="failed-flips-running-false"),
    pytest.param([CREATED, FAILED], ("Succeeded", "True", "XSucceeded"),
                 [("Created", "True", "XCreated"), ("Failed", "True", "XFailed")], False,
                 id="failed-is-absorbing"),
    pytest.param([CREATED, SUSPENDED, RUNNING], ("Suspended", "False", "XResumed"),
                 [("Created", "True", "XCreated"), ("Running", "True", "XRunning"),
                  ("Suspended", "False", "XResumed")], True, id="moved-to-the-end"),
])
def test_set_condition(before: list[dict[str, str]], update: tuple[str, str, str],
                       after: list[tuple[str, str, str]], changed: bool) -> None:
    status = JobStatus.model_validate({"conditions": before})
    assert set_condition(status, *update, "msg", NOW) is changed
    assert summary(status.conditions) == after


def test_same_status_new_reason_keeps_transition_time() -> None:
    status = JobStatus.model_validate({"conditions": [RUNNING]})
    set_condition(status, "Running", "True", "OtherReason", "msg", NOW)
    assert status.conditions[0].last_transition_time == stamp(-60)
    assert status.conditions[0].last_update_time == stamp()


def test_status_change_sets_transition_time() -> None:
    status = JobStatus.model_validate({"conditions": [SUSPENDED]})
    set_condition(status, "Suspended", "False", "XResumed", "msg", NOW)
    assert status.conditions[0].last_transition_time == stamp()


def test_mpi_variant_flips_older_failed() -> None:
    status = JobStatus.model_validate({"conditions": [
        CREATED, condition("Failed", "False", "Old")]})
    set_condition(status, "Succeeded", "True", "S", "m", NOW, flip_failed=True)
    assert summary(status.conditions)[-1] == ("Succeeded", "True", "S")
