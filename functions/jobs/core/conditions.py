"""The job-condition list and its transition rules (upstream ``UpdateJobConditions``).

The order of the list is part of the API: ``kubectl get`` shows the *last* condition as the
job's State, and the Kubeflow SDK and Kueue read the types. Rules: Failed is absorbing; an
unchanged (type, status, reason) is left alone; Running and Restarting replace each other;
Succeeded or Failed flip Running to False.
"""

from __future__ import annotations

from datetime import UTC, datetime

from functions.jobs.core.model import Condition, JobStatus

CREATED = "Created"
RUNNING = "Running"
RESTARTING = "Restarting"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
SUSPENDED = "Suspended"


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def set_condition(status: JobStatus, type_: str, cond_status: str, reason: str, message: str,
                  now: datetime, *, flip_failed: bool = False) -> bool:
    """Apply one condition update in place; ``True`` when the list changed.

    ``flip_failed`` is the mpi-operator variant: Succeeded/Failed also flip an older Failed to
    False (it has no absorbing rule of its own, but callers check :func:`is_failed` first).
    """
    if status.is_true(FAILED):
        return False
    current = status.condition(type_)
    if current is not None and current.status == cond_status and current.reason == reason:
        return False
    stamp = rfc3339(now)
    transition = stamp
    if current is not None and current.status == cond_status:
        transition = current.last_transition_time or stamp
    kept: list[Condition] = []
    for cond in status.conditions:
        if cond.type == type_:
            continue
        if (type_, cond.type) in ((RESTARTING, RUNNING), (RUNNING, RESTARTING)):
            continue
        if type_ in (FAILED, SUCCEEDED) and (
                cond.type == RUNNING or (flip_failed and cond.type == FAILED)):
            cond = cond.model_copy(update={"status": "False"})
        kept.append(cond)
    kept.append(Condition(type=type_, status=cond_status,  # type: ignore[arg-type]
                          reason=reason, message=message,
                          last_update_time=stamp, last_transition_time=transition))
    status.conditions = kept
    return True
