"""Reconcile plan of an MPIJob v2beta1: service, hostfile, SSH secret, workers, launcher Job."""

from __future__ import annotations

from datetime import datetime

from functions.jobs.core import mpi
from functions.jobs.core.gang import desired_podgroup, podgroup_waiting
from functions.jobs.core.guards import guards_of, timed_out
from functions.jobs.core.model import Job, Obj
from functions.jobs.core.mpi_status import derive_mpi_status
from functions.jobs.core.planning import (
    Observed,
    Plan,
    apply_if_changed,
    count_restarts,
    forget_deadline,
    pending_timeout,
    restarts_due,
    sort_pods,
    workers_of,
)
from functions.jobs.core.pods import (
    index_of,
    name_of,
    phase,
    terminating,
)
from functions.jobs.core.settings import Settings


def _ready(pod: Obj) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _worker_index(job: Job, pod: Obj) -> int | None:
    index = index_of(pod)
    if index is not None and job.spec.run_launcher_as_worker:
        index -= 1
    return index


def mpi_reconcile_plan(job: Job, observed: Observed, now: datetime, settings: Settings,
                       ssh_keys: object) -> Plan:
    plan = Plan()
    workers, launcher_pods = workers_of(observed)
    outcome = derive_mpi_status(job, workers, observed.launcher, launcher_pods, now,
                                podgroup_since=observed.held_since)
    if job.status.finished or (outcome is not None and outcome.status.finished):
        forget_deadline(plan, job)
        ended = job.status if job.status.finished else outcome.status if outcome else None
        if timed_out(ended) and observed.launcher is not None and not (
                observed.launcher.get("spec") or {}).get("suspend"):
            # Its pods never ran either: suspended, the launcher Job lets them go (and keeps
            # no log worth keeping).
            plan.applies.append(_suspend_patch(job, True))
        return plan
    if job.suspended:
        forget_deadline(plan, job)
        keep_finished = job.run_policy.clean_pod_policy == "Running"
        plan.deletes += [w for w in workers if not terminating(w) and not (
            keep_finished and phase(w) in ("Succeeded", "Failed"))]
        if observed.podgroup is not None:
            plan.deletes.append(observed.podgroup)
        # As mpi-operator: a job created suspended still gets its launcher Job, suspended.
        if observed.launcher is None:
            plan.creates.append(mpi.launcher_job(job, settings))
        elif not (observed.launcher.get("spec") or {}).get("suspend"):
            plan.applies.append(_suspend_patch(job, True))
        return plan
    if settings.gang_scheduler and observed.podgroup_supported:
        apply_if_changed(plan, observed.podgroup,
                         desired_podgroup(job, settings, observed.podgroup,
                                          observed.priorities, observed.default_priority))
        if podgroup_waiting(settings, observed.podgroup):
            pending_timeout(plan, job, observed.pods, now, observed.held_since)
            return plan
    if not any(name_of(s) == job.name for s in observed.services):
        plan.creates.append(mpi.service(job))
    running = [name_of(w) for w in workers if phase(w) == "Running" and not terminating(w)]
    config = mpi.config_map(job, running, settings.cluster_domain)
    if observed.config_map is None:
        plan.creates.append(config)
    elif (observed.config_map.get("data") or {}) != config["data"]:
        plan.applies.append(config)
    if observed.secret is None and isinstance(ssh_keys, mpi.SSHKeys):
        plan.creates.append(mpi.ssh_secret(job, ssh_keys))
    whole = guards_of(job).whole_job
    _workers(plan, job, workers, restarts_due(job, observed.pods if whole else workers),
             settings)
    if whole and plan.restarts:
        # The whole job restarts (functions.jobs.core.restarts): the launcher Job goes with
        # the workers, its pods with it, and is made again once they are back.
        if observed.launcher is not None:
            plan.deletes.append(observed.launcher)
        count_restarts(plan, job, observed.pods, going=launcher_pods)
    elif whole and any(terminating(w) for w in workers) and observed.launcher is None:
        plan.look_again(WORKERS_READY_RECHECK_SECONDS)
    else:
        count_restarts(plan, job, observed.pods)
        _launcher(plan, job, observed, workers, settings)
    pending_timeout(plan, job, observed.pods, now, observed.held_since)
    return plan


def _workers(plan: Plan, job: Job, workers: list[Obj], restart: set[str],
             settings: Settings) -> None:
    replicas = job.replicas("Worker")
    present = sort_pods(plan, workers, replicas, restart, lambda pod: _worker_index(job, pod))
    plan.creates += [mpi.worker_pod(job, i, settings) for i in range(replicas)
                     if i not in present]


# Reconcile hears of a worker's phase through the job's status (its replica counts), but not
# of its readiness: no status field counts it, and reconcile is sent no pod updates. While a
# launcher waits for every worker to be ready, reconcile looks again this often (seconds).
WORKERS_READY_RECHECK_SECONDS = 2.0


def _launcher(plan: Plan, job: Job, observed: Observed, workers: list[Obj],
              settings: Settings) -> None:
    launcher = observed.launcher
    if launcher is None:
        all_ready = len(workers) == job.replicas("Worker") and all(_ready(w) for w in workers)
        if job.spec.launcher_creation_policy != "WaitForWorkersReady" or all_ready:
            plan.creates.append(mpi.launcher_job(job, settings))
        else:
            plan.look_again(WORKERS_READY_RECHECK_SECONDS)
        return
    if (launcher.get("spec") or {}).get("suspend"):
        plan.applies.append(_resume_patch(job, settings))


def _suspend_patch(job: Job, suspend: bool) -> Obj:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": mpi.launcher_name(job), "namespace": job.namespace},
            "spec": {"suspend": suspend}}


# What of a suspended launcher Job's pod template may change (Kubernetes allows these on a
# suspended Job that has not started) and what mpi-operator copies from the MPIJob on resume.
SCHEDULING_DIRECTIVES = ("nodeSelector", "tolerations", "schedulingGates")


def _resume_patch(job: Job, settings: Settings) -> Obj:
    """Un-suspend the launcher Job with the scheduling directives, labels and annotations of
    the MPIJob's launcher template as they are now: a queue such as Kueue sets them on the
    MPIJob while admitting it, after the launcher Job was made."""
    desired = mpi.launcher_job(job, settings)["spec"]["template"]
    meta = desired["metadata"]
    template: Obj = {
        "metadata": {k: meta[k] for k in ("labels", "annotations") if meta.get(k)},
        "spec": {k: desired["spec"][k] for k in SCHEDULING_DIRECTIVES if k in desired["spec"]}}
    patch = _suspend_patch(job, False)
    patch["spec"]["template"] = template
    return patch
