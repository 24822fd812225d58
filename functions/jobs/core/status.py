"""The status of a ``kubeflow.org/v1`` job, derived from the persisted status and the observed
pods (upstream ``ReconcileJobs`` + per-framework ``UpdateJobStatus``).

The status function writes what this returns; the reconcile and gc functions call it too, to
decide (for instance) that a job has failed before the status function has written it, so the
three functions always agree on what the observed state means.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from functions.jobs.core import conditions as c
from functions.jobs.core.frameworks import (
    JAX,
    LABEL_REPLICA_TYPE,
    MPI_V1,
    MXNET,
    PADDLE,
    PYTORCH,
    TENSORFLOW,
    XGBOOST,
    Framework,
)
from functions.jobs.core.model import Condition, Job, JobStatus, Obj, ReplicaStatus
from functions.jobs.core.objects import Notice, base_labels, selector
from functions.jobs.core.pods import (
    by_type,
    exit_code,
    exit_container_name,
    failed_pods,
    name_of,
    phase,
    restart_count_of_running,
    terminating,
)
from functions.jobs.core.restarts import WholeRestart, restart_message
from functions.jobs.core.transitions import regresses as regresses
from functions.jobs.core.verdicts import BACKOFF_MESSAGE, backoff_reached, judge

DEADLINE_MESSAGE = "Job {name} has failed because it was active longer than specified deadline"


@dataclass
class StatusOutcome:
    """The derived status, the Events that go with its changes, and when to look again."""

    status: JobStatus
    notices: list[Notice] = field(default_factory=list)
    requeue_after: float | None = None


def count_replicas(job: Job, pods: Sequence[Obj]) -> dict[str, ReplicaStatus]:
    """active / succeeded / failed per replica type (a terminating Running pod is a failure)."""
    counts: dict[str, ReplicaStatus] = {}
    for rtype, group in by_type(job, pods).items():
        status = ReplicaStatus()
        for pod in group:
            ph = phase(pod)
            if ph == "Running":
                if terminating(pod):
                    status.failed += 1
                else:
                    status.active += 1
            elif ph == "Succeeded":
                status.succeeded += 1
            elif ph == "Failed":
                status.failed += 1
        if job.framework.scale_selector:
            labels = base_labels(job)
            labels[LABEL_REPLICA_TYPE] = rtype.lower()
            status.selector = selector(labels)
        counts[rtype] = status
    return counts


class _Builder:
    """One status computation: the mutable status plus the notices its changes produce."""

    def __init__(self, job: Job, now: datetime) -> None:
        self.job = job
        self.now = now
        self.status = job.status.model_copy(deep=True)
        self.notices: list[Notice] = []

    def set(self, type_: str, status: str, suffix: str, message: str,
            event_type: str | None = None) -> bool:
        changed = c.set_condition(self.status, type_, status, self.job.framework.reason(suffix),
                                  message, self.now)
        if changed and event_type:
            self.notices.append(Notice(event_type, self.job.framework.reason(suffix), message))
        return changed

    def complete(self) -> None:
        if self.status.completion_time is None:
            self.status.completion_time = c.rfc3339(self.now)

    def finish(self, type_: str, suffix: str, message: str, event_type: str) -> None:
        """Succeeded or Failed: the completion time first, then the condition."""
        self.complete()
        self.set(type_, "True", suffix, message, event_type)

    def replicas_failed(self, kind: str, rtype: str, failed: int, restart: bool) -> None:
        """Restarting when the replica type restarts its pods, else the job has failed."""
        because = f"because {failed} {rtype} replica(s) failed."
        if restart:
            self.set(c.RESTARTING, "True", "Restarting",
                     f"{kind} {self.job.name} is restarting {because}", "Warning")
        else:
            self.finish(c.FAILED, "Failed", f"{kind} {self.job.name} is failed {because}",
                        "Normal")


def derive_status(job: Job, pods: Sequence[Obj], now: datetime, *, restarts: int = 0,
                  podgroup_since: datetime | None = None) -> StatusOutcome | None:
    """Status of a defaulted v1 job, or ``None`` when another manager owns it (no status).

    ``restarts`` is the persisted count of pods the controller deleted for a restart;
    ``podgroup_since``: since when a gang scheduler has held the job's pods back (its
    pending timeout counts that too: :mod:`.guards`).
    """
    if job.managed_externally:
        return None
    b = _Builder(job, now)
    fw = job.framework
    name = job.name
    if not b.status.conditions:
        # The condition alone: training-operator records no Event for it (mpi-operator does,
        # functions.jobs.core.mpi_status), and a burst would pay one more write per job.
        b.set(c.CREATED, "True", "Created", f"{fw.kind} {name} is created.")
    if b.status.finished:
        if b.status.is_true(c.SUCCEEDED):
            for rs in b.status.replica_statuses.values():
                rs.succeeded += rs.active
                rs.active = 0
        return StatusOutcome(b.status, b.notices)
    if job.suspended:
        for rs in b.status.replica_statuses.values():
            rs.active = 0
        message = f"{fw.kind} {name} is suspended."
        if b.status.is_true(c.RUNNING):
            b.set(c.RUNNING, "False", "Suspended", message)
        if not b.status.is_true(c.SUSPENDED):
            b.set(c.SUSPENDED, "True", "Suspended", message, "Normal")
        return StatusOutcome(b.status, b.notices)
    if b.status.is_true(c.SUSPENDED):
        b.set(c.SUSPENDED, "False", "Resumed", f"{fw.kind} {name} is resumed.", "Normal")
        b.status.start_time = c.rfc3339(now)
    verdict = judge(job, pods, now, restarts=restarts, podgroup_since=podgroup_since)
    pods = verdict.pods
    limit_message = _past_limits(job, b.status, pods, now, restarts, verdict.guards.whole_job)
    if limit_message is not None:
        b.finish(c.FAILED, "Failed", limit_message, "Normal")
        return StatusOutcome(b.status, b.notices)
    if verdict.failure is not None:
        failure = verdict.failure
        b.finish(c.FAILED, failure.suffix, failure.message, failure.event_type)
        return StatusOutcome(b.status, b.notices)
    _pod_failures(b, pods, whole=verdict.guards.whole_job)
    b.status.replica_statuses = count_replicas(job, pods)
    restarting_before = b.status.condition(c.RESTARTING)
    if fw == TENSORFLOW:
        _tensorflow_rules(b, pods, restarting_before)
    else:
        rules = RULES.get(fw)
        if rules is not None:
            rules(b)
    if verdict.restart is not None:
        _hold_restarting(b, verdict.restart)
    if b.status.start_time is None:
        b.status.start_time = c.rfc3339(now)
    requeues = [x for x in (_deadline_requeue(job, b.status, now),
                            None if b.status.finished else verdict.requeue_after(now))
                if x is not None]
    return StatusOutcome(b.status, b.notices, min(requeues) if requeues else None)


def _hold_restarting(b: _Builder, restart: WholeRestart) -> None:
    """A whole-job restart is due: the job says Restarting until its pods are back, whatever
    the survivors' phases make of it (a Running the rules set is taken back), unless it has
    ended. Restarting already persisted is kept as it was, so a pass over the same state
    writes nothing."""
    if b.status.finished:
        return
    # The rules may have said Restarting of one replica type: this is the whole job's.
    reason = b.job.framework.reason("Restarting")
    b.notices = [n for n in b.notices if n.reason != reason]
    before = b.job.status.condition(c.RESTARTING)
    if before is not None and before.status == "True":
        b.status.conditions = [x for x in b.status.conditions
                               if x.type not in (c.RUNNING, c.RESTARTING)] + [before]
        return
    b.status.conditions = [x for x in b.status.conditions if x.type != c.RESTARTING]
    b.set(c.RESTARTING, "True", "Restarting", restart_message(b.job, restart), "Warning")


def _past_limits(job: Job, status: JobStatus, pods: Sequence[Obj], now: datetime,
                 restarts: int, whole: bool) -> str | None:
    """backoffLimit (per pod: whole-job restarts are :func:`~.verdicts.judge`'s) and
    activeDeadlineSeconds."""
    policy = job.run_policy
    if policy.backoff_limit is not None and not whole:
        total = restarts + restart_count_of_running(job, pods)
        if backoff_reached(policy.backoff_limit, total):
            return BACKOFF_MESSAGE.format(name=job.name)
    started = c.parse_time(status.start_time)
    ads = policy.active_deadline_seconds
    if ads is not None and started is not None and (now - started).total_seconds() >= ads:
        return DEADLINE_MESSAGE.format(name=job.name)
    return None


def _deadline_requeue(job: Job, status: JobStatus, now: datetime) -> float | None:
    started = c.parse_time(status.start_time)
    ads = job.run_policy.active_deadline_seconds
    if ads is None or started is None or status.finished:
        return None
    return max(0.0, ads - (now - started).total_seconds())


def _pod_failures(b: _Builder, pods: Sequence[Obj], *, whole: bool = False) -> None:
    """Restart-policy verdicts on Failed pods, and an Event per terminated default container
    (``whole``: a restart is the whole job's, :func:`_hold_restarting`)."""
    job = b.job
    for rtype, group in by_type(job, pods).items():
        container = exit_container_name(job, rtype)
        for pod in group:
            code = exit_code(pod, container)
            if code is not None:
                b.notices.append(Notice("Normal", "ExitedWithCode",
                                        f"Pod: {job.namespace}.{name_of(pod)} exited with "
                                        f"code {code}"))
    for failed in failed_pods(job, pods):
        if failed.restart and not whole:
            b.set(c.RESTARTING, "True", "Restarting",
                  f"job {job.name} is restarting because {failed.replica_type} replica(s) "
                  "failed.", "Warning")
        elif failed.permanent:
            b.finish(c.FAILED, "Failed",
                     f'job "{job.name}" is failing because "{failed.replica_type}" replica(s) '
                     "failed.", "Warning")


def _master_or_workers_rules(b: _Builder) -> None:
    """PyTorchJob, PaddleJob and JAXJob: the Master drives Running and Succeeded when there is
    one, else the Workers (all succeeded; an elastic PyTorchJob: any); a failed replica
    restarts unless its restartPolicy is Never, which fails the job."""
    job = b.job
    kind = job.kind
    has_master = "Master" in job.replica_specs
    elastic = job.framework == PYTORCH and job.spec.elastic_policy is not None
    who = job.name if has_master else f"{job.namespace}/{job.name}"
    for rtype in job.ordered_types():
        rs = b.status.replica_statuses[rtype]
        replicas = job.replicas(rtype)
        expected = replicas - rs.succeeded
        drives = rtype == "Master" if has_master else rtype == "Worker"
        if drives:
            done = expected == 0 or (not has_master and elastic and rs.succeeded > 0)
            if has_master and rs.active > 0:
                b.set(c.RUNNING, "True", "Running", f"{kind} {who} is running.")
            if done:
                text = (f"{kind} {who} is successfully completed." if has_master
                        else f"{kind} {who} successfully completed.")
                b.finish(c.SUCCEEDED, "Succeeded", text, "Normal")
                return
            if not has_master and rs.active > 0:
                b.set(c.RUNNING, "True", "Running", f"{kind} {who} is running.")
        if rs.failed > 0 and replicas > rs.succeeded + rs.active:
            b.replicas_failed(kind, rtype, rs.failed,
                              restart=job.replica_specs[rtype].restart_policy != "Never")


def _worker0_completed(job: Job, pods: Sequence[Obj]) -> bool:
    if "Worker" not in job.replica_specs:
        return True
    for pod in by_type(job, pods)["Worker"]:
        if name_of(pod) == f"{job.name}-worker-0" and phase(pod) == "Succeeded":
            return exit_code(pod, job.framework.default_container) == 0
    return False


def _tensorflow_rules(b: _Builder, pods: Sequence[Obj],
                      restarting_before: Condition | None) -> None:
    job = b.job
    who = f"{job.namespace}/{job.name}"
    chief_like = "Chief" in job.replica_specs or "Master" in job.replica_specs
    worker0_done = _worker0_completed(job, pods)
    for rtype in job.ordered_types():
        rs = b.status.replica_statuses[rtype]
        expected = job.replicas(rtype) - rs.succeeded
        running = rs.active
        if chief_like and rtype in ("Chief", "Master"):
            if running > 0:
                b.set(c.RUNNING, "True", "Running", f"TFJob {who} is running.")
            if expected == 0:
                b.finish(c.SUCCEEDED, "Succeeded", f"TFJob {who} successfully completed.",
                         "Normal")
        elif not chief_like and rtype == "Worker":
            if expected == 0 or (worker0_done and job.spec.success_policy != "AllWorkers"):
                b.finish(c.SUCCEEDED, "Succeeded", f"TFJob {who} successfully completed.",
                         "Normal")
            elif running > 0:
                b.set(c.RUNNING, "True", "Running", f"TFJob {who} is running.")
        if rs.failed > 0:
            if restarting_before is not None:
                c.set_condition(b.status, c.RESTARTING, "True", restarting_before.reason,
                                restarting_before.message, b.now)
                continue
            if job.spec.enable_dynamic_worker and rtype == "Worker":
                continue
            b.finish(c.FAILED, "Failed",
                     f"TFJob {who} has failed because {rs.failed} {rtype} replica(s) failed.",
                     "Normal")


def _mxnet_rules(b: _Builder) -> None:
    job = b.job
    single = set(job.replica_specs) == {"Worker"} and job.replicas("Worker") == 1
    for rtype in job.ordered_types():
        rs = b.status.replica_statuses[rtype]
        expected = job.replicas(rtype) - rs.succeeded
        if rtype == "Scheduler" or single:
            if rs.active > 0:
                b.set(c.RUNNING, "True", "Running", f"MXJob {job.name} is running.")
            if expected == 0:
                b.finish(c.SUCCEEDED, "Succeeded",
                         f"MXJob {job.name} is successfully completed.", "Normal")
                return
        if rs.failed > 0:
            b.replicas_failed("mxjob", rtype, rs.failed,
                              restart=job.replica_specs[rtype].restart_policy == "ExitCode")


def _xgboost_rules(b: _Builder) -> None:
    """The Master drives Running and Succeeded; any failed replica fails the job unless its
    restartPolicy is ExitCode (then it restarts). Upstream marks the job Running before either
    verdict, so a finished XGBoostJob always lists a Running condition (then False)."""
    job = b.job
    running = f"XGBoostJob {job.name} is running."
    for rtype in job.ordered_types():
        rs = b.status.replica_statuses[rtype]
        if rtype == "Master":
            if rs.active > 0:
                b.set(c.RUNNING, "True", "Running", running)
            if job.replicas(rtype) - rs.succeeded == 0:
                b.set(c.RUNNING, "True", "Running", running)
                b.finish(c.SUCCEEDED, "Succeeded",
                         f"XGBoostJob {job.name} is successfully completed.", "Normal")
                return
        if rs.failed > 0:
            b.set(c.RUNNING, "True", "Running", running)
            b.replicas_failed("XGBoostJob", rtype, rs.failed,
                              restart=job.replica_specs[rtype].restart_policy == "ExitCode")


def _mpi_v1_rules(b: _Builder) -> None:
    """MPIJob v1: the launcher pod drives Running and Succeeded; a failed replica fails the
    job unless its restartPolicy is ExitCode (then Restarting). The Failed reason is
    upstream's double prefix, ``MPIJobMPIJobFailed``. Once the launcher has ended, the workers
    are no longer counted (upstream stops listing them)."""
    job = b.job
    launcher = b.status.replica_statuses.get("Launcher")
    if launcher is not None and (launcher.succeeded or launcher.failed) and (
            "Worker" in b.status.replica_statuses):
        b.status.replica_statuses["Worker"] = ReplicaStatus()
    for rtype in job.ordered_types():
        rs = b.status.replica_statuses[rtype]
        if rtype == "Launcher":
            if rs.active > 0:
                b.set(c.RUNNING, "True", "Running", f"MPIJob {job.name} is running.")
            if job.replicas(rtype) - rs.succeeded == 0:
                b.finish(c.SUCCEEDED, "Succeeded",
                         f"MPIJob {job.name} is successfully completed.", "Normal")
                return
        if rs.failed > 0:
            because = f"because {rs.failed} {rtype} replica(s) failed."
            if job.replica_specs[rtype].restart_policy == "ExitCode":
                b.set(c.RESTARTING, "True", "Restarting",
                      f"MPIJob {job.name} is restarting {because}", "Warning")
            else:
                b.finish(c.FAILED, "MPIJobFailed", f"MPIJob {job.name} is failed {because}",
                         "Warning")


# Each flavour's success, running and failure rule (TFJob's needs the pods: it is called
# apart).
RULES: dict[Framework, Callable[[_Builder], None]] = {
    PYTORCH: _master_or_workers_rules, PADDLE: _master_or_workers_rules,
    JAX: _master_or_workers_rules, MXNET: _mxnet_rules, XGBOOST: _xgboost_rules,
    MPI_V1: _mpi_v1_rules,
}
