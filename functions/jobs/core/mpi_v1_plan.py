"""Reconcile plan of an MPIJob ``kubeflow.org/v1``: the launcher's ConfigMap and RBAC, the
workers, then the launcher pod (upstream ``ReconcilePods`` of the MPI controller).

The launcher is created only once everything it needs exists: a pod naming a ServiceAccount
that is not there yet is refused by admission, and a launcher started before its workers
would exec into pods that do not exist. Creates of one plan run in parallel, so the launcher
waits for a later pass that has seen them (``requeue_after`` asks for one at once).
"""

from __future__ import annotations

from datetime import datetime

from functions.jobs.core import mpi, mpi_v1
from functions.jobs.core.gang import desired_podgroup, podgroup_waiting
from functions.jobs.core.guards import guards_of
from functions.jobs.core.model import Job, Obj
from functions.jobs.core.planning import (
    Observed,
    Plan,
    apply_if_changed,
    count_restarts,
    forget_deadline,
    pending_timeout,
    restarts_due,
    sort_pods,
)
from functions.jobs.core.pods import name_of, phase, terminating, uid_of
from functions.jobs.core.settings import Settings
from functions.jobs.core.status import derive_status

# How soon to look again when the launcher waits for what it needs.
LAUNCHER_WAIT_SECONDS = 1.0


def mpi_v1_reconcile_plan(job: Job, observed: Observed, now: datetime,
                          settings: Settings) -> Plan:
    plan = Plan()
    outcome = derive_status(job, observed.pods, now, restarts=observed.restarts,
                            podgroup_since=observed.held_since)
    if outcome is None or job.status.finished or outcome.status.finished:
        forget_deadline(plan, job)
        return plan
    if job.suspended:
        plan.deletes += [p for p in observed.pods if not terminating(p)]
        if observed.podgroup is not None:
            plan.deletes.append(observed.podgroup)
        forget_deadline(plan, job)
        return plan
    plan.requeue_after = outcome.requeue_after
    if settings.gang_scheduler and observed.podgroup_supported:
        apply_if_changed(plan, observed.podgroup,
                         desired_podgroup(job, settings, observed.podgroup,
                                          observed.priorities, observed.default_priority))
        if podgroup_waiting(settings, observed.podgroup):
            pending_timeout(plan, job, observed.pods, now, observed.held_since)
            return plan
    _pods(plan, job, observed, settings)
    count_restarts(plan, job, observed.pods)
    pending_timeout(plan, job, observed.pods, now, observed.held_since)
    return plan


def _pods(plan: Plan, job: Job, observed: Observed, settings: Settings) -> None:
    launchers = [p for p in observed.pods if name_of(p) == mpi.launcher_name(job)]
    workers = [p for p in observed.pods if p not in launchers]
    ready = _auxiliary(plan, job, observed, workers)
    replicas = job.replicas("Worker")
    restart = restarts_due(job, observed.pods)
    present = sort_pods(plan, workers, replicas, restart)
    for index in range(replicas):
        if index not in present:
            pod, notices = mpi_v1.worker_pod(job, index, settings)
            plan.creates.append(pod)
            plan.notices.extend(notices)
    # A finished launcher is never replaced (upstream neither): its end is the job's; but a
    # whole-job restart (functions.jobs.core.restarts) takes it with the workers.
    if launchers:
        if guards_of(job).whole_job:
            plan.restarts += [p for p in launchers
                              if uid_of(p) in restart and not terminating(p)]
        return
    settled = not plan.restarts and not any(terminating(w) for w in workers)
    if ready and settled and all(i in present for i in range(replicas)):
        pod, notices = mpi_v1.launcher_pod(job, settings)
        plan.creates.append(pod)
        plan.notices.extend(notices)
    else:
        plan.look_again(LAUNCHER_WAIT_SECONDS)


def _auxiliary(plan: Plan, job: Job, observed: Observed, workers: list[Obj]) -> bool:
    """Queue the ConfigMap, ServiceAccount, Role and RoleBinding that are missing or out of
    date; whether all of them already existed."""
    running = [name_of(w) for w in workers if phase(w) == "Running" and not terminating(w)]
    config = mpi_v1.config_map(job, running)
    if observed.config_map is None:
        plan.creates.append(config)
    elif (observed.config_map.get("data") or {}) != config["data"]:
        plan.applies.append(config)
    if observed.service_account is None:
        plan.creates.append(mpi_v1.service_account(job))
    apply_if_changed(plan, observed.role, mpi_v1.role(job), keys=("rules",))
    apply_if_changed(plan, observed.role_binding, mpi_v1.role_binding(job),
                     keys=("subjects", "roleRef"))
    return all(x is not None for x in (observed.config_map, observed.service_account,
                                       observed.role, observed.role_binding))
