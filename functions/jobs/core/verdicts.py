"""What a job's guards (:mod:`.guards`, :mod:`.restarts`) make of its observed pods, for the
status rules of both shapes (the ``kubeflow.org/v1`` kinds and MPIJob ``v2beta1``), so that
the status, reconcile and gc functions, which all derive the status, agree on it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from functions.jobs.core.guards import (
    FAIL,
    PENDING_TIMEOUT_SUFFIX,
    RESTART_LIMIT_SUFFIX,
    Guards,
    PendingCheck,
    guards_of,
    pending_check,
    timeout_message,
)
from functions.jobs.core.model import Job, Obj
from functions.jobs.core.restarts import (
    WholeRestart,
    backoff_total,
    past_type_limit,
    whole_restart,
    without_restarted,
)

BACKOFF_MESSAGE = "Job {name} has failed because it has reached the specified backoff limit"


@dataclass(frozen=True, slots=True)
class Failure:
    """The job fails: its condition's reason suffix (``<Kind><suffix>``), message, and the
    type of the Event that reports it."""

    suffix: str
    message: str
    event_type: str


@dataclass(frozen=True, slots=True)
class Verdict:
    guards: Guards
    pods: list[Obj]                   # the pods that count (a whole-job restart's left out)
    restart: WholeRestart | None      # a whole-job restart is due
    failure: Failure | None           # a guard fails the job
    pending: PendingCheck | None      # the pending timeout, when something waits

    def requeue_after(self, now: datetime) -> float | None:
        """When the status must be looked at again for the pending timeout to fail the job."""
        if (self.failure is not None or self.pending is None or self.pending.expired
                or self.guards.pending_action != FAIL):
            return None
        return (self.pending.due - now).total_seconds()


def backoff_reached(limit: int, total: int) -> bool:
    """training-operator's rule: a job fails once its restarts reach ``backoffLimit`` (any
    restart at all when it is 0)."""
    return total > 0 if limit == 0 else total >= limit


def judge(job: Job, pods: Sequence[Obj], now: datetime, *, restarts: int,
          podgroup_since: datetime | None = None) -> Verdict:
    """The guards' verdict on a defaulted job that is neither finished nor suspended.

    In whole-job mode ``backoffLimit`` is judged here (a whole restart counts once); the
    per-pod rule stays the status rules' own.
    """
    guards = guards_of(job)
    if not guards.any:
        return Verdict(guards, list(pods), None, None, None)
    counted = without_restarted(job, pods) if guards.whole_job else list(pods)
    restart = whole_restart(job, counted) if guards.whole_job else None
    failure: Failure | None = None
    limit = job.run_policy.backoff_limit
    if guards.whole_job and limit is not None and backoff_reached(
            limit, backoff_total(restarts, restart)):
        failure = Failure("Failed", BACKOFF_MESSAGE.format(name=job.name), "Normal")
    type_limit = past_type_limit(job, guards, counted, restart)
    if failure is None and type_limit is not None:
        failure = Failure(RESTART_LIMIT_SUFFIX, type_limit, "Warning")
    check = pending_check(job, guards, counted, now, podgroup_since)
    if failure is None and check is not None and check.expired and (
            guards.pending_action == FAIL):
        failure = Failure(PENDING_TIMEOUT_SUFFIX, timeout_message(job, guards, check, FAIL),
                          "Warning")
    return Verdict(guards, counted, restart, failure, check)
