"""Gauges of the training jobs as they are now, from the status function's watch caches, sent
by one replica only.

* ``odh_training_jobs{framework, state}``: jobs by the state ``kubectl get`` shows (the last
  condition that is true: Created, Running, Restarting, Suspended, Succeeded, Failed;
  ``Pending`` before any);
* ``odh_training_queue_depth{queue}``: jobs and TrainJobs the training queue holds (created
  suspended with the queue-state label, not yet admitted), by queue; the TrainJobs are listed
  by that label (the status function keeps no cache of them), at most every
  :data:`HOLDER_SECONDS`;
* ``mpi_operator_job_info{launcher, namespace}``: 1 per MPIJob, by its launcher's name, as
  mpi-operator exposes it.

A gauge is a level, not a count of what a replica did, so two replicas reporting it would
double every sum: only the holder of the ``odh-training-metrics`` Lease reports them (asked at
most every :data:`HOLDER_SECONDS`, at scrape time), the others report none. Counted at scrape
from the caches, with no API request but the Lease's.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from functions.api.core.queue import DEFAULT_QUEUE, LABEL_QUEUE, LABEL_QUEUE_STATE, entry_of
from functions.core.errors import TemporaryError
from functions.jobs.core import conditions as c
from functions.jobs.core.frameworks import FRAMEWORKS, MPI
from functions.jobs.reads import RESOURCES
from functions.kube import resources
from functions.kube.client import ApiError, KubeClient
from functions.runtime import lease
from functions.runtime.metrics import on_cache, register_process_collector

Obj = dict[str, Any]
LEASE = "odh-training-metrics"
LEASE_SECONDS = 60
HOLDER_SECONDS = 15.0
STATES = ("Pending", c.CREATED, c.RUNNING, c.RESTARTING, c.SUSPENDED, c.SUCCEEDED, c.FAILED)
# The functions whose process keeps the job caches these gauges read.
READERS = ("status", "all")


def state_of(job: Obj) -> str:
    """The job's state as ``kubectl get`` shows it: its last true condition."""
    true = [cond.get("type") for cond in (job.get("status") or {}).get("conditions") or []
            if cond.get("status") == "True" and cond.get("type") in STATES]
    return str(true[-1]) if true else "Pending"


def queued_by_queue(objs: list[Obj]) -> Counter[str]:
    """The objects the training queue holds, by queue."""
    queued: Counter[str] = Counter()
    for obj in objs:
        entry = entry_of(obj)
        if entry is not None and entry.phase == "Queued":
            labels = (obj.get("metadata") or {}).get("labels") or {}
            queued[str(labels.get(LABEL_QUEUE) or DEFAULT_QUEUE)] += 1
    return queued


def levels(jobs: dict[str, list[Obj]]) -> tuple[Counter[tuple[str, str]], Counter[str],
                                                  list[tuple[str, str]]]:
    """Jobs by (framework, state), queued jobs by queue, and MPIJob launchers, from the jobs
    of each framework (by name)."""
    states: Counter[tuple[str, str]] = Counter()
    queued: Counter[str] = Counter()
    launchers: list[tuple[str, str]] = []
    for framework, found in jobs.items():
        queued += queued_by_queue(found)
        for job in found:
            states[(framework, state_of(job))] += 1
            if framework == MPI.name:
                meta = job.get("metadata") or {}
                launchers.append((f"{meta.get('name')}-launcher", str(meta.get("namespace"))))
    return states, queued, launchers


class JobGauges:
    """The collector; :meth:`attach` gives it the caches and client of the process."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._cache: Any = None
        self._kube: KubeClient | None = None
        self._checked = float("-inf")
        self._holder = False
        self._trainjobs: Counter[str] = Counter()
        self._lock = threading.Lock()

    def attach(self, function: str, cache: Any, kube: KubeClient) -> None:
        if function in READERS:
            with self._lock:
                self._cache, self._kube = cache, kube

    def holder(self) -> bool:
        """Whether this process holds the Lease (taken or renewed here)."""
        with self._lock:
            kube = self._kube
            if kube is None:
                return False
            if self.clock() - self._checked >= HOLDER_SECONDS:
                self._checked = self.clock()
                self._holder = lease.try_acquire(kube, LEASE, duration_seconds=LEASE_SECONDS)
                if self._holder:
                    self._trainjobs = _queued_trainjobs(kube)
            return self._holder

    def describe(self) -> Iterator[Any]:
        return iter(())

    def collect(self) -> Iterator[Any]:
        cache = self._cache
        if cache is None or not self.holder():
            return
        jobs: dict[str, list[Obj]] = {}
        for fw in FRAMEWORKS:
            informer = cache.ready(RESOURCES[fw.kind])
            if informer is not None:
                jobs[fw.name] = informer.store.values()
        states, queued, launchers = levels(jobs)
        queued += self._trainjobs
        by_state = GaugeMetricFamily("odh_training_jobs", "Training jobs by state",
                                     labels=["framework", "state"])
        for framework in jobs:
            for state in STATES:
                by_state.add_metric([framework, state], states[(framework, state)])
        depth = GaugeMetricFamily("odh_training_queue_depth",
                                  "Training jobs waiting in the training queue",
                                  labels=["queue"])
        for queue in sorted(queued.keys() | {DEFAULT_QUEUE}):
            depth.add_metric([queue], queued[queue])
        info = GaugeMetricFamily("mpi_operator_job_info", "Information about MPIJob",
                                 labels=["launcher", "namespace"])
        for launcher, namespace in launchers:
            info.add_metric([launcher, namespace], 1)
        yield from (by_state, depth, info)


def _queued_trainjobs(kube: KubeClient) -> Counter[str]:
    """The TrainJobs the queue holds (none where the TrainJob CRD is not installed)."""
    try:
        return queued_by_queue(kube.list(resources.TRAINJOBS,
                                         label_selector=f"{LABEL_QUEUE_STATE}=Queued"))
    except (ApiError, TemporaryError):  # 404: no TrainJobs here; anything else: next scrape
        return Counter()


GAUGES = JobGauges()
register_process_collector(GAUGES)
on_cache(GAUGES.attach)
