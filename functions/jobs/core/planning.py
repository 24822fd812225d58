"""The vocabulary of planning, shared by the plans of every kind (:mod:`.plan` for the
``kubeflow.org/v1`` kinds, :mod:`.mpi_plan` for MPIJob): what a handler observed, the writes a
plan asks for, and the steps both make (create or apply a child, restarts, surplus pods)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from functions.jobs.core import conditions as c
from functions.jobs.core.model import Job, Obj
from functions.jobs.core.objects import Notice
from functions.jobs.core.pods import failed_pods, index_of, role_of, terminating, uid_of

RESTARTS_ANNOTATION = "training.opendatahub.io/restarts"
# The uids of the pods counted by the last update of RESTARTS_ANNOTATION (comma-separated).
RESTARTED_PODS_ANNOTATION = "training.opendatahub.io/restarted-pods"


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

    @property
    def empty(self) -> bool:
        return not (self.creates or self.applies or self.deletes or self.restarts
                    or self.delete_job)


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
    """UIDs of failed pods to delete for a restart, once the persisted status says Restarting."""
    if not job.status.is_true(c.RESTARTING):
        return set()
    return {uid_of(f.pod) for f in failed_pods(job, pods) if f.restart}


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
