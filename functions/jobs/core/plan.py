"""Observed state + now -> the writes each function should make (reconcile, status, gc).

The three functions may run at the same time on the same job, so each owns distinct writes:

* **status** writes only the ``status`` subresource, derived from the persisted status and the
  observed children (its own SSA field manager, only when the result differs);
* **reconcile** creates and deletes children of a running job (pods, services, HPA, PodGroup,
  MPI objects) and never writes status;
* **gc** cleans up after a finished job (cleanPodPolicy, PodGroup, TTL) and children whose job
  is gone.

Destroying evidence waits for the conclusion drawn from it to be persisted: a failed pod is
deleted for a restart only once the persisted status says Restarting, and cleanPodPolicy runs
only once the persisted status says Succeeded or Failed. Otherwise a pod could vanish before
the status function counted it. Decisions that only *stop* work (no more creates once the
derived status is finished) use the derived status at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from functions.jobs.core import conditions as c
from functions.jobs.core import objects as o
from functions.jobs.core.defaults import with_defaults
from functions.jobs.core.frameworks import MPI, MPI_V1, PYTORCH
from functions.jobs.core.gang import desired_podgroup, podgroup_waiting
from functions.jobs.core.guards import timed_out
from functions.jobs.core.model import Job, Obj
from functions.jobs.core.mpi_plan import mpi_reconcile_plan
from functions.jobs.core.mpi_status import derive_mpi_status
from functions.jobs.core.mpi_v1_plan import mpi_v1_reconcile_plan
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
from functions.jobs.core.pods import by_type, index_of, name_of, phase, terminating
from functions.jobs.core.settings import Settings
from functions.jobs.core.status import StatusOutcome, derive_status


def status_of(observed: Observed, now: datetime) -> StatusOutcome | None:
    """What the status subresource should say (``None``: write nothing, not even Created)."""
    job = with_defaults(observed.job)
    if job.deleting:
        return None
    if job.framework == MPI:
        workers, launchers = workers_of(observed)
        return derive_mpi_status(job, workers, observed.launcher, launchers, now,
                                 podgroup_since=observed.held_since)
    return derive_status(job, observed.pods, now, restarts=observed.restarts,
                         podgroup_since=observed.held_since)


def _needs_hpa(job: Job) -> bool:
    return (job.framework == PYTORCH and job.spec.elastic_policy is not None
            and bool(job.spec.elastic_policy.metrics))


def desired_hpa(job: Job) -> Obj:
    elastic = job.spec.elastic_policy
    assert elastic is not None
    return {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": job.name, "namespace": job.namespace,
                     "ownerReferences": [o.owner_reference(job)]},
        "spec": {"scaleTargetRef": {"apiVersion": job.api_version, "kind": job.kind,
                                    "name": job.name},
                 "minReplicas": elastic.min_replicas, "maxReplicas": elastic.max_replicas,
                 "metrics": elastic.metrics},
    }


def reconcile_plan(observed: Observed, now: datetime, settings: Settings,
                   ssh_keys: object = None) -> Plan:
    """Children to create and delete for a job that is neither finished nor foreign."""
    job = with_defaults(observed.job)
    plan = Plan()
    if job.managed_externally or job.deleting:
        return plan
    if job.framework == MPI:
        return mpi_reconcile_plan(job, observed, now, settings, ssh_keys)
    if job.framework == MPI_V1:
        return mpi_v1_reconcile_plan(job, observed, now, settings)
    outcome = derive_status(job, observed.pods, now, restarts=observed.restarts,
                            podgroup_since=observed.held_since)
    if outcome is None or job.status.finished or outcome.status.finished:
        forget_deadline(plan, job)
        return plan
    if job.suspended:
        plan.deletes += [p for p in observed.pods if not terminating(p)]
        plan.deletes += observed.services
        plan.deletes += [x for x in (observed.hpa, observed.podgroup) if x is not None]
        forget_deadline(plan, job)
        return plan
    plan.requeue_after = outcome.requeue_after
    if _needs_hpa(job):
        apply_if_changed(plan, observed.hpa, desired_hpa(job))
    elif observed.hpa is not None:
        plan.deletes.append(observed.hpa)
    if not (settings.gang_scheduler and observed.podgroup_supported and _podgroup(
            plan, job, observed, settings)):
        _replicas(plan, job, observed, settings)
        count_restarts(plan, job, observed.pods)
    pending_timeout(plan, job, observed.pods, now, observed.held_since)
    return plan


def _podgroup(plan: Plan, job: Job, observed: Observed, settings: Settings) -> bool:
    """Keep the job's PodGroup as desired; whether it holds the pods back (Volcano)."""
    desired = desired_podgroup(job, settings, observed.podgroup, observed.priorities,
                               observed.default_priority)
    apply_if_changed(plan, observed.podgroup, desired)
    return podgroup_waiting(settings, observed.podgroup)


def _replicas(plan: Plan, job: Job, observed: Observed, settings: Settings) -> None:
    restart = restarts_due(job, observed.pods)
    services = by_type(job, observed.services)
    for rtype, pods in by_type(job, observed.pods).items():
        replicas = job.replicas(rtype)
        present = sort_pods(plan, pods, replicas, restart)
        for index in range(replicas):
            if index not in present:
                pod, notices = o.desired_pod(job, rtype, index, settings)
                plan.creates.append(pod)
                plan.notices.extend(notices)
        have = {index_of(s) for s in services[rtype]}
        for svc in services[rtype]:
            position = index_of(svc)
            if position is None or position >= replicas:
                plan.deletes.append(svc)
        plan.creates += [o.desired_service(job, rtype, i) for i in range(replicas)
                         if i not in have]


def gc_may_act(job: Job, gang_scheduling: bool) -> bool:
    """Whether :func:`gc_plan` can find work for this finished job (else skip reading it).

    Only cleanPodPolicy, ttlSecondsAfterFinished, a gang scheduler's PodGroup and the pods
    still Pending when a pending timeout failed the job give gc something to delete once the
    job is finished.
    """
    policy = with_defaults(job).run_policy  # MPIJob v1: the top-level cleanPodPolicy counts
    return (policy.clean_pod_policy not in (None, "", "None")
            or policy.ttl_seconds_after_finished is not None or gang_scheduling
            or timed_out(job.status))


def gc_plan(observed: Observed | None, orphans: Sequence[Obj], now: datetime) -> Plan:
    """Clean up after a finished job; ``observed`` is ``None`` when the job is gone."""
    plan = Plan()
    if observed is None:
        plan.deletes += [x for x in orphans if not terminating(x)]
        return plan
    job = with_defaults(observed.job)
    if job.managed_externally or job.deleting or not job.status.finished:
        return plan
    policy = job.run_policy.clean_pod_policy
    # mpi-operator cleans up workers only: the launcher pod, and with it the training log,
    # stays until its Job's TTL.
    pods = workers_of(observed)[0] if job.framework == MPI else observed.pods
    doomed: list[Obj] = []
    if policy == "All":
        doomed = list(pods)
    elif policy == "Running":
        doomed = [p for p in pods if phase(p) in ("Running", "Pending")]
    if timed_out(job.status):
        # They never ran (no log to keep) and would hold a queue's or a node's capacity.
        doomed += [p for p in pods if phase(p) in ("", "Pending") and p not in doomed]
    doomed_names = {name_of(p) for p in doomed}
    plan.deletes += [p for p in doomed if not terminating(p)]
    if job.framework != MPI:
        plan.deletes += [s for s in observed.services if name_of(s) in doomed_names]
    if observed.podgroup is not None:
        plan.deletes.append(observed.podgroup)
    ttl = job.run_policy.ttl_seconds_after_finished
    if ttl is None or job.suspended or job.framework == MPI:
        return plan
    completed = c.parse_time(job.status.completion_time)
    if completed is None:
        plan.notices.append(o.Notice("Warning", "TTLCleanupFailed",
                                     "job completion time is nil, cannot cleanup"))
        return plan
    expires = completed + timedelta(seconds=ttl)
    if now >= expires:
        plan.delete_job = True
    else:
        plan.requeue_after = (expires - now).total_seconds()
    return plan
