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

mpi-operator's counters, for MPIJobs, by its names (no labels, as upstream):
``mpi_operator_jobs_created_total``, ``..._successful_total``, ``..._failed_total``.

Service levels, observed by the status write that makes the transition (so once per job), by
``framework`` (and ``job_namespace`` only where ``METRICS_JOB_NAMESPACE=true``: it multiplies
the series by the namespaces; elsewhere the label is empty, which Prometheus drops):

* ``odh_training_job_queued_seconds``: creation to the start time (the job's admission; a job
  created suspended by a queue waits until it is resumed);
* ``odh_training_job_to_created_seconds``: creation to the Created condition;
* ``odh_training_job_to_running_seconds``: creation to the first Running (restarts excluded);
* ``odh_training_job_run_seconds`` (and ``result``: succeeded or failed): start time to
  completion.
"""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import Counter, Histogram

from functions.core.times import seconds_between
from functions.jobs.core import conditions as c
from functions.jobs.core.frameworks import MPI, Framework
from functions.jobs.core.restarts import RESTARTS_ANNOTATION
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

MPI_CREATED = Counter("mpi_operator_jobs_created", "Counts number of MPI jobs created",
                      registry=None)
MPI_SUCCESSFUL = Counter("mpi_operator_jobs_successful",
                         "Counts number of MPI jobs successful", registry=None)
MPI_FAILED = Counter("mpi_operator_jobs_failed", "Counts number of MPI jobs failed",
                     registry=None)

# Seconds, from a fast start on an idle cluster to a day in a queue.
SLO_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
               7200.0, 21600.0, 86400.0)
SLO_LABELS = ("framework", "job_namespace")
QUEUED = Histogram("odh_training_job_queued_seconds",
                   "Training jobs: creation to start time (admission)", SLO_LABELS,
                   buckets=SLO_BUCKETS, registry=None)
TO_CREATED = Histogram("odh_training_job_to_created_seconds",
                       "Training jobs: creation to the Created condition", SLO_LABELS,
                       buckets=SLO_BUCKETS, registry=None)
TO_RUNNING = Histogram("odh_training_job_to_running_seconds",
                       "Training jobs: creation to the first Running", SLO_LABELS,
                       buckets=SLO_BUCKETS, registry=None)
RUN = Histogram("odh_training_job_run_seconds",
                "Training jobs: start time to completion", (*SLO_LABELS, "result"),
                buckets=SLO_BUCKETS, registry=None)
NAMESPACE_LABEL_ENV = "METRICS_JOB_NAMESPACE"

for _counter in (JOBS_CREATED, JOBS_DELETED, JOBS_SUCCESSFUL, JOBS_FAILED, JOBS_RESTARTED,
                 CREATED_PODS, DELETED_PODS, FAILED_PODS, SERVICES_CREATED,
                 SERVICES_NOT_CREATED, PODGROUPS_CREATED, PODGROUPS_DELETED,
                 MPI_CREATED, MPI_SUCCESSFUL, MPI_FAILED, QUEUED, TO_CREATED, TO_RUNNING, RUN):
    register_process_collector(_counter)


def status_written(fw: Framework, job: Obj, before: Obj, after: Obj) -> None:
    """Count what a successful status write changed (``before``: what it replaced)."""
    meta = job.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    change = status_transitions(before, after)
    _observe_levels(fw, meta, before, after)
    if not change.any:
        return
    labels = (namespace, fw.name)
    for happened, counter in ((change.created, JOBS_CREATED),
                              (change.succeeded, JOBS_SUCCESSFUL),
                              (change.failed, JOBS_FAILED),
                              (change.restarted, JOBS_RESTARTED)):
        if happened:
            counter.labels(*labels).inc()
    if fw.kind == MPI.kind:
        for happened, counter in ((change.created, MPI_CREATED),
                                  (change.succeeded, MPI_SUCCESSFUL),
                                  (change.failed, MPI_FAILED)):
            if happened:
                counter.inc()
    if change.failed_pods:
        FAILED_PODS.inc(change.failed_pods)


def _transition_time(status: Obj, type_: str) -> str | None:
    for cond in status.get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == "True":
            return str(cond.get("lastTransitionTime") or "") or None
    return None


def _has(status: Obj, type_: str) -> bool:
    return any(cond.get("type") == type_ for cond in status.get("conditions") or [])


def _observe_levels(fw: Framework, meta: Obj, before: Obj, after: Obj) -> None:
    """The service-level histograms of what this write made happen."""
    namespace = str(meta.get("namespace") or "") if os.environ.get(
        NAMESPACE_LABEL_ENV, "").lower() in ("1", "true", "yes") else ""
    labels = (fw.name, namespace)
    created = meta.get("creationTimestamp")
    observations: list[tuple[Histogram, tuple[str, ...], float | None]] = []
    if after.get("startTime") and not before.get("startTime"):
        observations.append((QUEUED, labels, seconds_between(created, after["startTime"])))
    if _transition_time(after, c.CREATED) and not _transition_time(before, c.CREATED):
        observations.append((TO_CREATED, labels,
                             seconds_between(created, _transition_time(after, c.CREATED))))
    first_run = not (_has(before, c.RUNNING) or _has(before, c.RESTARTING)
                     or (meta.get("annotations") or {}).get(RESTARTS_ANNOTATION))
    if first_run and _transition_time(after, c.RUNNING):
        observations.append((TO_RUNNING, labels,
                             seconds_between(created, _transition_time(after, c.RUNNING))))
    for result, type_ in (("succeeded", c.SUCCEEDED), ("failed", c.FAILED)):
        if _transition_time(after, type_) and not _transition_time(before, type_):
            end = after.get("completionTime") or _transition_time(after, type_)
            observations.append((RUN, (*labels, result),
                                 seconds_between(after.get("startTime"), end)))
    for histogram, values, seconds in observations:
        if seconds is not None:
            histogram.labels(*values).observe(seconds)


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
