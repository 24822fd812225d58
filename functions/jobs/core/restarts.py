"""Restarts under the guards of :mod:`.guards`: what restarts a whole job, how restarts are
counted per replica type, and when a limit fails the job.

**Whole-job restart.** A collective job (NCCL, MPI, JAX) whose member dies hangs: the
survivors wait for it forever, and a lone replacement cannot rejoin their communicator. With
``restart-scope: Job`` a failure that restarts a pod under the replica's restart policy (a
Failed pod under ``OnFailure``, ``Always`` or a retryable ``ExitCode``; a container the kubelet
restarted in place under ``OnFailure`` or ``Always``; a pod deleted under the job) restarts
every pod of the job instead. The restart policy still decides *whether* a failure restarts;
a failure it makes permanent fails the job as before.

The pods deleted for a restart are listed by uid on the job
(:data:`~.planning.RESTARTED_PODS_ANNOTATION`, written before they are deleted) and, in this
mode, no longer count: not as failed replicas, not as causes of another restart, not for
``backoffLimit`` (their in-place restarts were the restart just counted). A whole-job restart
counts once against ``backoffLimit``; the failure that would bring the count to the limit
fails the job rather than restarting it (training-operator fails a job once its restarts reach
``backoffLimit``; this leaves the evidence of the last failure in place).

**Limits per replica type** (``restart-limits: Worker=3``): a replica type's restarts are the
ones recorded for it (:data:`RESTARTS_BY_TYPE`, written with the job-wide counter), plus the
in-place restarts of its live pods and its Failed pods waiting for their restart; the
failure past a type's limit fails the job (``<Kind>RestartLimitExceeded``). A whole-job
restart counts once for each type whose failure caused it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from functions.jobs.core.guards import RESTART_LIMITS, Guards
from functions.jobs.core.model import Job, Obj
from functions.jobs.core.pods import (
    failed_pods,
    index_of,
    name_of,
    phase,
    replica_type_of,
    uid_of,
)

# The job-wide count of restarts (what backoffLimit counts), the uids of the pods the last
# update of it counted (comma-separated), and the count per replica type ("Worker=2").
RESTARTS_ANNOTATION = "training.opendatahub.io/restarts"
RESTARTED_PODS_ANNOTATION = "training.opendatahub.io/restarted-pods"
RESTARTS_BY_TYPE = "training.opendatahub.io/restarts-by-type"
IN_PLACE_POLICIES = ("OnFailure", "Always")


def recorded_restarts(job: Job) -> int:
    """The job-wide count of restarts recorded on the job."""
    try:
        return int(job.annotations.get(RESTARTS_ANNOTATION, "0"))
    except ValueError:
        return 0


def restarted_uids(job: Job) -> frozenset[str]:
    """The pods counted by the last recorded restart (deleted, or about to be)."""
    value = job.annotations.get(RESTARTED_PODS_ANNOTATION, "")
    return frozenset(u for u in value.split(",") if u)


def recorded_by_type(annotations: Mapping[str, str]) -> dict[str, int]:
    """``"Worker=2,Master=1"`` -> ``{"Worker": 2, "Master": 1}`` (malformed pairs skipped)."""
    out: dict[str, int] = {}
    for pair in str(annotations.get(RESTARTS_BY_TYPE, "")).split(","):
        name, _, count = pair.partition("=")
        if name and count.isdigit():
            out[name] = int(count)
    return out


def format_by_type(counts: Mapping[str, int]) -> str:
    return ",".join(f"{k}={counts[k]}" for k in sorted(counts))


def without_restarted(job: Job, pods: Sequence[Obj]) -> list[Obj]:
    """``pods`` less those a whole-job restart deleted (they no longer count)."""
    gone = restarted_uids(job)
    return [p for p in pods if uid_of(p) not in gone] if gone else list(pods)


def in_place(pod: Obj) -> int:
    """How often the kubelet restarted the pod's containers (init containers included)."""
    status = pod.get("status") or {}
    return sum(int(cs.get("restartCount") or 0)
               for cs in [*(status.get("initContainerStatuses") or []),
                          *(status.get("containerStatuses") or [])])


def _live(pod: Obj) -> bool:
    return phase(pod) not in ("Succeeded", "Failed")


def _wanted(job: Job, rtype: str, pod: Obj) -> bool:
    """A pod the job still has a place for (not one a scale-down removes)."""
    index = index_of(pod)
    return index is not None and index < job.replicas(rtype)


@dataclass(frozen=True, slots=True)
class WholeRestart:
    """Why the whole job restarts: the pods that caused it and their replica types."""

    causes: tuple[str, ...]       # "mnist-worker-1 failed (exit code 137)"
    types: tuple[str, ...]

    def describe(self, limit: int = 3) -> str:
        shown = ", ".join(self.causes[:limit])
        more = len(self.causes) - limit
        return shown + (f" and {more} more" if more > 0 else "")


def whole_restart(job: Job, pods: Sequence[Obj]) -> WholeRestart | None:
    """What restarts the whole job among ``pods`` (those a restart deleted already left out),
    or ``None``. Only failures its restart policy would restart count."""
    causes: list[tuple[str, str]] = []
    for failed in failed_pods(job, pods):
        if failed.restart:
            causes.append((f"{name_of(failed.pod)} failed (exit code {failed.exit_code})",
                           failed.replica_type))
    for pod in pods:
        rtype = replica_type_of(job, pod)
        if rtype is None or not _live(pod):
            continue
        policy = job.replica_specs[rtype].restart_policy
        if (pod.get("metadata") or {}).get("deletionTimestamp") and _wanted(job, rtype, pod):
            causes.append((f"{name_of(pod)} was deleted", rtype))
        elif policy in IN_PLACE_POLICIES and in_place(pod) > 0:
            causes.append((f"{name_of(pod)} restarted in place", rtype))
    if not causes:
        return None
    return WholeRestart(tuple(c for c, _ in causes),
                        tuple(sorted({t for _, t in causes})))


def backoff_total(restarts: int, restart: WholeRestart | None) -> int:
    """Whole-job mode: the restarts counted against ``backoffLimit``, the one ``restart``
    would make included."""
    return restarts + (1 if restart is not None else 0)


def type_totals(job: Job, pods: Sequence[Obj], whole: bool,
                restart: WholeRestart | None) -> dict[str, int]:
    """Restarts of each replica type, the pending ones included (module docstring)."""
    totals = dict.fromkeys(job.replica_specs, 0)
    for rtype, count in recorded_by_type(job.annotations).items():
        if rtype in totals:
            totals[rtype] += count
    if whole:
        for rtype in (restart.types if restart is not None else ()):
            totals[rtype] += 1
        return totals
    counted = restarted_uids(job)
    for failed in failed_pods(job, pods):
        if failed.restart and uid_of(failed.pod) not in counted:
            totals[failed.replica_type] += 1
    for pod in pods:
        live_type = replica_type_of(job, pod)
        if live_type is not None and _live(pod):
            totals[live_type] += in_place(pod)
    return totals


def past_type_limit(job: Job, guards: Guards, pods: Sequence[Obj],
                    restart: WholeRestart | None) -> str | None:
    """The Failed message when a replica type is past its restart limit, else ``None``."""
    if not guards.restart_limits:
        return None
    totals = type_totals(job, pods, guards.whole_job, restart)
    for rtype, limit in guards.restart_limits.items():
        if totals.get(rtype, 0) > limit:
            return (f"{job.kind} {job.name} has failed because its {rtype} replicas needed "
                    f"more than {limit} restart(s) ({RESTART_LIMITS})")
    return None


def counted_types(job: Job, pods: Iterable[Obj]) -> dict[str, str]:
    """uid -> replica type of each pod (what a restart's record counts per type)."""
    out: dict[str, str] = {}
    for pod in pods:
        rtype = replica_type_of(job, pod)
        if rtype is not None:
            out[uid_of(pod)] = rtype
    return out


def restart_message(job: Job, restart: WholeRestart) -> str:
    return (f"{job.kind} {job.name} is restarting as a whole: {restart.describe()}")[:1024]
