"""MPIJob v2beta1 status (mpi-operator ``updateMPIJobStatus``): the launcher Job decides.

Success and failure are copied from the launcher batch Job's conditions; Running needs a
running launcher pod and every worker running. Worker pods that fail under an ``ExitCode`` or
``OnFailure`` policy are restarted like the v1 kinds' pods.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from functions.jobs.core import conditions as c
from functions.jobs.core.model import Condition, Job, JobStatus, Obj, ReplicaStatus
from functions.jobs.core.objects import Notice
from functions.jobs.core.pods import failed_pods, phase, replica_type_of, uid_of
from functions.jobs.core.restarts import recorded_restarts, restart_message
from functions.jobs.core.status import StatusOutcome
from functions.jobs.core.verdicts import Verdict, judge

EVENT_MESSAGE_LIMIT = 1024


def _set(status: JobStatus, notices: list[Notice], type_: str, cond_status: str, reason: str,
         message: str, now: datetime, event_type: str | None = None) -> bool:
    changed = c.set_condition(status, type_, cond_status, reason, message, now, flip_failed=True)
    if changed and event_type:
        notices.append(Notice(event_type, reason, message))
    return changed


def job_condition(batch_job: Obj | None, type_: str) -> Obj | None:
    for cond in ((batch_job or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == "True":
            return dict(cond)
    return None


def derive_mpi_status(job: Job, workers: Sequence[Obj], launcher: Obj | None,
                      launcher_pods: Sequence[Obj], now: datetime, *,
                      podgroup_since: datetime | None = None) -> StatusOutcome | None:
    """Status of a defaulted MPIJob, or ``None`` when another manager owns it (the guards of
    :mod:`.guards` judge its workers and launcher pods alike)."""
    if job.managed_externally:
        return None
    status = job.status.model_copy(deep=True)
    notices: list[Notice] = []
    who = f"{job.namespace}/{job.name}"
    if not status.conditions:
        _set(status, notices, c.CREATED, "True", "MPIJobCreated", f"MPIJob {who} is created.",
             now, "Normal")
    if job.suspended:
        _set(status, notices, c.SUSPENDED, "True", "MPIJobSuspended", "MPIJob suspended", now,
             "Normal")
    elif status.condition(c.SUSPENDED) is not None and _set(
            status, notices, c.SUSPENDED, "False", "MPIJobResumed", "MPIJob resumed", now,
            "Normal"):
        status.start_time = c.rfc3339(now)
    if status.start_time is None and not job.suspended:
        status.start_time = c.rfc3339(now)
    verdict: Verdict | None = None
    if not job.suspended and not status.finished:
        verdict = judge(job, [*workers, *launcher_pods], now, restarts=recorded_restarts(job),
                        podgroup_since=podgroup_since)
        counted = {uid_of(p) for p in verdict.pods}
        workers = [w for w in workers if uid_of(w) in counted]
        if verdict.failure is not None:
            _complete(status, now)
            _set(status, notices, c.FAILED, "True", f"MPIJob{verdict.failure.suffix}",
                 verdict.failure.message, now, verdict.failure.event_type)
            return StatusOutcome(status, notices)
    whole = verdict is not None and verdict.guards.whole_job
    replica = {"Launcher": ReplicaStatus(), "Worker": ReplicaStatus()}
    if launcher is not None:
        _launcher(job, status, notices, replica["Launcher"], launcher, launcher_pods, now)
    running = 0
    evicted = 0
    for pod in workers:
        ph = phase(pod)
        if ph == "Failed":
            replica["Worker"].failed += 1
            evicted += (pod.get("status") or {}).get("reason") == "Evicted"
        elif ph == "Succeeded":
            replica["Worker"].succeeded += 1
        elif ph == "Running":
            running += 1
            replica["Worker"].active += 1
    status.replica_statuses = replica
    if evicted:
        _set(status, notices, c.FAILED, "True", "MPIJobEvicted",
             f"{evicted}/{len(workers)} workers are evicted", now, "Warning")
    for failed in failed_pods(job, [w for w in workers if replica_type_of(job, w) == "Worker"]):
        if failed.restart and not whole:
            _set(status, notices, c.RESTARTING, "True", "MPIJobRestarting",
                 f"job {job.name} is restarting because Worker replica(s) failed.", now,
                 "Warning")
        elif failed.permanent:
            _complete(status, now)
            _set(status, notices, c.FAILED, "True", "MPIJobFailed",
                 f'job "{job.name}" is failing because "Worker" replica(s) failed.', now,
                 "Warning")
    if job.suspended:
        _set(status, notices, c.RUNNING, "False", "MPIJobSuspended",
             f"MPIJob {who} is suspended.", now)
    elif launcher is not None and replica["Launcher"].active >= 1 and running == len(workers):
        _set(status, notices, c.RUNNING, "True", "MPIJobRunning", f"MPIJob {who} is running.",
             now, "Normal")
    if verdict is None:
        return StatusOutcome(status, notices)
    if verdict.restart is not None and not status.finished:
        _hold_restarting(job, status, notices, restart_message(job, verdict.restart), now)
    return StatusOutcome(status, notices, None if status.finished
                         else verdict.requeue_after(now))


def _hold_restarting(job: Job, status: JobStatus, notices: list[Notice], message: str,
                     now: datetime) -> None:
    """A whole-job restart is due: Restarting until the pods are back (as
    :func:`functions.jobs.core.status._hold_restarting`), kept as persisted when it was."""
    before = job.status.condition(c.RESTARTING)
    if before is not None and before.status == "True":
        status.conditions = [x for x in status.conditions
                             if x.type not in (c.RUNNING, c.RESTARTING)] + [before]
        return
    _set(status, notices, c.RESTARTING, "True", "MPIJobRestarting", message, now, "Warning")


def _running_never_set(job: Job, status: JobStatus, now: datetime) -> None:
    """A launcher that finished before Running was seen leaves Running=False before the end."""
    if status.condition(c.RUNNING) is None and not status.finished:
        status.conditions.append(Condition(
            type=c.RUNNING, status="False", reason="MPIJobRunning",
            message=f"MPIJob {job.namespace}/{job.name} is finished but Running condition was "
                    "never set.",
            last_update_time=c.rfc3339(now), last_transition_time=c.rfc3339(now)))


def _complete(status: JobStatus, now: datetime, when: str | None = None) -> None:
    if status.completion_time is None:
        status.completion_time = when or c.rfc3339(now)


def _launcher(job: Job, status: JobStatus, notices: list[Notice], launcher_status: ReplicaStatus,
              launcher: Obj, launcher_pods: Sequence[Obj], now: datetime) -> None:
    who = f"{job.namespace}/{job.name}"
    batch = launcher.get("status") or {}
    launcher_status.failed = int(batch.get("failed") or 0)
    if job_condition(launcher, "Complete") is not None:
        launcher_status.succeeded = 1
        _running_never_set(job, status, now)
        _complete(status, now, batch.get("completionTime"))
        _set(status, notices, c.SUCCEEDED, "True", "MPIJobSucceeded",
             f"MPIJob {who} successfully completed.", now, "Normal")
        return
    failed = job_condition(launcher, "Failed")
    if failed is None:
        launcher_status.active = sum(1 for p in launcher_pods if phase(p) == "Running")
        return
    reason = str(failed.get("reason") or "") or "MPIJobFailed"
    message = str(failed.get("message") or "") or f"MPIJob {who} has failed"
    if reason == "BackoffLimitExceeded":
        failed_launchers = [p for p in launcher_pods if phase(p) == "Failed"]
        if failed_launchers:
            last = max(failed_launchers, key=lambda p: str(
                (p.get("metadata") or {}).get("creationTimestamp") or ""))
            reason += "/" + str((last.get("status") or {}).get("reason") or "")
            message += ": " + str((last.get("status") or {}).get("message") or "")
            message = message[:EVENT_MESSAGE_LIMIT]
    _running_never_set(job, status, now)
    _complete(status, now)
    _set(status, notices, c.FAILED, "True", reason, message, now, "Warning")
