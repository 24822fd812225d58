"""The Kubeflow training-operator's metrics, by its names and labels, next to our own.

Dashboards and alerts written for training-operator 1.9 read these series, so the names, the
``_total`` suffix and the labels (``job_namespace``, ``framework`` = the framework table's
``name``: pytorch, tensorflow, mxnet, mpi, xgboost, paddle, jax) are upstream's. What each one
counts is ours: a transition is counted by the write that makes it, and a write that makes a
transition succeeds once however often the decision was reached, so retried passes, coalesced
deliveries and replicas racing on the same job count it once. Each series is per process; a
query sums the function replicas (``sum by (job_namespace, framework)``). A write whose answer
was lost is retried, meets its own result and counts nothing: the counters may miss such a
transition, never count one twice (deletes excepted, see ``deleted_pods_total``).

* ``training_operator_jobs_created_total``: jobs given their first status (the Created
  condition) by the status function; a job another manager runs (``managedBy``) is not ours.
* ``training_operator_jobs_successful_total`` / ``_failed_total``: status writes that made
  Succeeded / Failed True.
* ``training_operator_jobs_restarted_total``: status writes that made Restarting True (a job
  entering a restart; pods failing again while it is still Restarting add nothing).
* ``training_operator_jobs_deleted_total``: jobs deleted by gc when ``ttlSecondsAfterFinished``
  expired (the only deletion upstream counts), by a DELETE with the job's uid as precondition.
* ``failed_pods_total``: pods newly counted as failed in a written status.
* ``created_pods_total``, ``succeeded_service_creation_total``, ``created_pod_groups_total``:
  creates the API server accepted (201); ``failed_service_creation_total``: Service creates it
  refused, a name taken by an object the job does not control included (a name taken by the
  job's own Service, from a retried or another replica's create, is not a failure).
* ``deleted_pods_total``, ``deleted_pod_groups_total``: deletes the API server accepted, with
  the object's uid as precondition. A pod that is still terminating accepts a second DELETE,
  so a pass that read it before its deletion showed counts it again; passes never plan the
  deletion of a pod they see terminating.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter

from functions.jobs.core.frameworks import Framework
from functions.jobs.core.transitions import status_transitions
from functions.runtime.metrics import register_process_collector

Obj = dict[str, Any]
LABELS = ("job_namespace", "framework")

JOBS_CREATED = Counter("training_operator_jobs_created",
                       "Jobs given their first status (Created)", LABELS,
                       registry=None)
JOBS_DELETED = Counter("training_operator_jobs_deleted",
                       "Jobs deleted when their ttlSecondsAfterFinished expired",
                       LABELS, registry=None)
JOBS_SUCCESSFUL = Counter("training_operator_jobs_successful",
                          "Status writes that made a job Succeeded", LABELS,
                          registry=None)
JOBS_FAILED = Counter("training_operator_jobs_failed",
                      "Status writes that made a job Failed", LABELS,
                      registry=None)
JOBS_RESTARTED = Counter("training_operator_jobs_restarted",
                         "Status writes that made a job Restarting", LABELS,
                         registry=None)
CREATED_PODS = Counter("created_pods", "Job pods created", registry=None)
DELETED_PODS = Counter("deleted_pods", "Job pods deleted", registry=None)
FAILED_PODS = Counter("failed_pods", "Job pods newly counted failed by a status write",
                      registry=None)
SERVICES_CREATED = Counter("succeeded_service_creation",
                           "Job Services created", registry=None)
SERVICES_NOT_CREATED = Counter("failed_service_creation",
                               "Job Service creates refused", registry=None)
PODGROUPS_CREATED = Counter("created_pod_groups", "PodGroups created",
                            registry=None)
PODGROUPS_DELETED = Counter("deleted_pod_groups", "PodGroups deleted",
                            registry=None)

for _counter in (JOBS_CREATED, JOBS_DELETED, JOBS_SUCCESSFUL, JOBS_FAILED, JOBS_RESTARTED,
                 CREATED_PODS, DELETED_PODS, FAILED_PODS, SERVICES_CREATED,
                 SERVICES_NOT_CREATED, PODGROUPS_CREATED, PODGROUPS_DELETED):
    register_process_collector(_counter)


def status_written(fw: Framework, namespace: str, before: Obj, after: Obj) -> None:
    """Count what a successful status write changed (``before``: what it replaced)."""
    change = status_transitions(before, after)
    if not change.any:
        return
    labels = (namespace, fw.name)
    for happened, counter in ((change.created, JOBS_CREATED),
                              (change.succeeded, JOBS_SUCCESSFUL),
                              (change.failed, JOBS_FAILED),
                              (change.restarted, JOBS_RESTARTED)):
        if happened:
            counter.labels(*labels).inc()
    if change.failed_pods:
        FAILED_PODS.inc(change.failed_pods)


def job_deleted(fw: Framework, namespace: str) -> None:
    JOBS_DELETED.labels(namespace, fw.name).inc()


def _kind(obj: Obj) -> str:
    return str(obj.get("kind") or "")


def created(obj: Obj) -> None:
    """A child create the API server accepted."""
    counter = {"Pod": CREATED_PODS, "Service": SERVICES_CREATED,
               "PodGroup": PODGROUPS_CREATED}.get(_kind(obj))
    if counter is not None:
        counter.inc()


def not_created(obj: Obj) -> None:
    """A child create that failed (a name taken by the job's own child does not)."""
    if _kind(obj) == "Service":
        SERVICES_NOT_CREATED.inc()


def deleted(obj: Obj) -> None:
    """A child delete the API server accepted."""
    counter = {"Pod": DELETED_PODS, "PodGroup": PODGROUPS_DELETED}.get(_kind(obj))
    if counter is not None:
        counter.inc()
