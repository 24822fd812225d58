"""The vocabulary of planning, shared by the plans of every kind (:mod:`.plan` for the
``kubeflow.org/v1`` kinds, :mod:`.mpi_plan` for MPIJob): what a handler observed, the writes a
plan asks for, and the steps both make (create or apply a child, restarts, surplus pods)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from functions.jobs.core import conditions as c
from functions.jobs.core.guards import (
    PENDING_DEADLINE,
    SUSPEND,
    guards_of,
    pending_check,
    timeout_message,
)
from functions.jobs.core.model import Job, Obj
from functions.jobs.core.objects import Notice
from functions.jobs.core.pods import failed_pods, index_of, role_of, terminating, uid_of
from functions.jobs.core.restarts import RESTARTED_PODS_ANNOTATION as RESTARTED_PODS_ANNOTATION
from functions.jobs.core.restarts import RESTARTS_ANNOTATION as RESTARTS_ANNOTATION
from functions.jobs.core.restarts import (
    WholeRestart,
    counted_types,
    restarted_uids,
    whole_restart,
    without_restarted,
)

# A recorded pending deadline within this of the one computed is left as it is: pods'
# creation times have whole seconds, and a pass must not rewrite it for that.
DEADLINE_SLACK_SECONDS = 5.0
PENDING_TIMEOUT_REASON = "PendingTimeout"


@dataclass
class Observed:
    """What a handler read: the job and the children it controls (by ownerReference)."""

    job: Job
    pods: list[Obj] = field(default_factory=list)
    services: list[Obj] = field(default_factory=list)
    hpa: Obj | None = None
    podgroup: Obj | None = None
    podgroup_supported: bool = False
    # MPIJob only
    config_map: Obj | None = None
    secret: Obj | None = None           # v2beta1
    launcher: Obj | None = None         # v2beta1: the launcher batch Job
    service_account: Obj | None = None  # v1: the launcher's identity and its RBAC
    role: Obj | None = None
    role_binding: Obj | None = None
    # Since when a gang scheduler has held the job's pods back (Volcano's PodGroup not
    # admitted), for the pending timeout; the PriorityClasses' values, for a PodGroup's
    # minResources (``None``: not read).
    held_since: datetime | None = None
    priorities: Mapping[str, int] | None = None
    default_priority: int = 0

    @property
    def restarts(self) -> int:
        try:
            return int(self.job.annotations.get(RESTARTS_ANNOTATION, "0"))
        except ValueError:
            return 0


@dataclass
class Plan:
    """Writes to make, in order: deletes, then applies (create-or-update), then creates."""

    creates: list[Obj] = field(default_factory=list)
    applies: list[Obj] = field(default_factory=list)
    deletes: list[Obj] = field(default_factory=list)
    restarts: list[Obj] = field(default_factory=list)      # pods deleted to be recreated
    delete_job: bool = False
    notices: list[Notice] = field(default_factory=list)
    requeue_after: float | None = None
    restart_batch: RestartBatch | None = None   # how ``restarts`` are counted
    suspend: Notice | None = None               # suspend the job (pending timeout), this Event
    annotations: dict[str, str | None] = field(default_factory=dict)  # merge patch of the job's

    @property
    def empty(self) -> bool:
        return not (self.creates or self.applies or self.deletes or self.restarts
                    or self.delete_job or self.suspend or self.annotations)

    def look_again(self, seconds: float) -> None:
        self.requeue_after = (seconds if self.requeue_after is None
                              else min(self.requeue_after, seconds))


@dataclass(frozen=True, slots=True)
class RestartBatch:
    """How the restart of a plan's ``restarts`` is recorded on the job before they are
    deleted (:mod:`functions.jobs.writes`): per pod, or once for the whole job."""

    types: Mapping[str, str]               # uid -> replica type of each pod restarted
    whole: WholeRestart | None = None      # the whole job restarts, counted once
    also: tuple[str, ...] = ()             # uids listed beside them (an earlier whole
                                           # restart's pods still there, pods going with
                                           # their owner)


def workers_of(observed: Observed) -> tuple[list[Obj], list[Obj]]:
    """MPIJob pods split into (workers, launcher pods) by their role label."""
    workers: list[Obj] = []
    launchers: list[Obj] = []
    for pod in observed.pods:
        (launchers if role_of(pod) == "launcher" else workers).append(pod)
    return workers, launchers


def covers(observed: object, desired: object) -> bool:
    """Every field of ``desired`` is present with the same value in ``observed``."""
    if isinstance(desired, dict):
        return isinstance(observed, dict) and all(
            covers(observed.get(k), v) for k, v in desired.items())
    if isinstance(desired, list):
        return (isinstance(observed, list) and len(observed) == len(desired)
                and all(covers(a, b) for a, b in zip(observed, desired, strict=True)))
    return observed == desired


def apply_if_changed(plan: Plan, observed: Obj | None, desired: Obj,
                     keys: Sequence[str] = ("spec",)) -> None:
    """Create ``desired`` when absent, apply it when a field under ``keys`` differs."""
    if observed is None:
        plan.creates.append(desired)
    elif not all(covers(observed.get(k), desired.get(k)) for k in keys):
        plan.applies.append(desired)


def restarts_due(job: Job, pods: Sequence[Obj]) -> set[str]:
    """UIDs of pods to delete for a restart, once the persisted status says Restarting: the
    failed pods, or in whole-job mode (:mod:`.restarts`) every pod when one is a cause."""
    if not job.status.is_true(c.RESTARTING):
        return set()
    if guards_of(job).whole_job:
        counted = without_restarted(job, pods)
        if whole_restart(job, counted) is None:
            return set()
        return {uid_of(p) for p in counted if not terminating(p)}
    return {uid_of(f.pod) for f in failed_pods(job, pods) if f.restart}


def count_restarts(plan: Plan, job: Job, pods: Sequence[Obj],
                   going: Sequence[Obj] = ()) -> None:
    """Describe how ``plan.restarts`` is counted (``going``: pods deleted with their owner,
    which the status must not count either)."""
    if not plan.restarts:
        return
    whole: WholeRestart | None = None
    also: set[str] = {uid_of(p) for p in going}
    if guards_of(job).whole_job:
        whole = whole_restart(job, without_restarted(job, pods))
        also |= restarted_uids(job) & {uid_of(p) for p in pods}
    plan.restart_batch = RestartBatch(counted_types(job, plan.restarts), whole,
                                      tuple(sorted(also)))


def forget_deadline(plan: Plan, job: Job) -> None:
    """A job that waits for nothing any more (ended, suspended) keeps no pending deadline."""
    if PENDING_DEADLINE in job.annotations:
        plan.annotations[PENDING_DEADLINE] = None


def pending_timeout(plan: Plan, job: Job, pods: Sequence[Obj], now: datetime,
                    held_since: datetime | None = None) -> None:
    """The reconcile side of a pending timeout (:mod:`.guards`): at its due moment a job
    whose action is ``Suspend`` is suspended (nothing more is created); until then reconcile
    looks again at that moment, and the moment is recorded on the job
    (:data:`~.guards.PENDING_DEADLINE`), counting the pods this plan creates as waiting
    from now. Called with the plan otherwise complete."""
    guards = guards_of(job)
    if guards.pending_timeout is None or job.suspended or job.status.finished:
        forget_deadline(plan, job)
        return
    recorded = c.parse_time(job.annotations.get(PENDING_DEADLINE))
    check = pending_check(job, guards, without_restarted(job, pods), now, held_since)
    if check is not None and check.expired and guards.pending_action == SUSPEND:
        plan.creates = []
        plan.suspend = Notice("Warning", PENDING_TIMEOUT_REASON,
                              timeout_message(job, guards, check, SUSPEND))
        return
    due = check.due if check is not None and not check.expired else None
    if any(obj.get("kind") in ("Pod", "Job") for obj in plan.creates):
        fresh = now + timedelta(seconds=guards.pending_timeout)
        due = fresh if due is None else min(due, fresh)
    if due is not None:
        plan.look_again((due - now).total_seconds())
    if due is None:
        forget_deadline(plan, job)
    elif recorded is None or abs((recorded - due).total_seconds()) > DEADLINE_SLACK_SECONDS:
        plan.annotations[PENDING_DEADLINE] = c.rfc3339(due)


def sort_pods(plan: Plan, pods: Sequence[Obj], replicas: int, restart: set[str],
              index: Callable[[Obj], int | None] = index_of) -> set[int]:
    """Queue the deletion of pods past ``replicas`` and the restart of those in ``restart``.

    Returns the indices present (-1 for a pod without one), terminating pods included, so
    the caller creates only what is missing.
    """
    present: set[int] = set()
    for pod in pods:
        position = index(pod)
        present.add(position if position is not None else -1)
        if terminating(pod):
            continue
        if position is None or position >= replicas:
            plan.deletes.append(pod)
        elif uid_of(pod) in restart:
            plan.restarts.append(pod)
    return present
