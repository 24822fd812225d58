"""What the job handlers read: the job (parsed once per version) and the children it
controls, from the reader (a watch cache, maybe lagging) or fresh from the API server."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from typing import Any

from functions.core.keys import ObjectKey
from functions.jobs.core import mpi, mpi_v1
from functions.jobs.core.frameworks import LABEL_JOB_NAME, MPI, MPI_V1, Framework
from functions.jobs.core.gang import PLUGINS_API, VOLCANO_API, held_since, podgroup_api_version
from functions.jobs.core.model import Job, Obj, parse_job, reparse_job
from functions.jobs.core.planning import Observed
from functions.jobs.core.pods import controlled_by, uid_of
from functions.jobs.core.settings import KUBECTL_DELIVERY_IMAGE, Settings
from functions.kube import resources
from functions.kube.client import ApiError, KubeClient
from functions.kube.resources import Resource
from functions.runtime.registry import Context, Reader

RESOURCES: dict[str, Resource] = {
    "PyTorchJob": resources.PYTORCHJOBS, "TFJob": resources.TFJOBS,
    "MXJob": resources.MXJOBS, "MPIJob": resources.MPIJOBS,
    "XGBoostJob": resources.XGBOOSTJOBS, "PaddleJob": resources.PADDLEJOBS,
    "JAXJob": resources.JAXJOBS,
}
log = logging.getLogger(__name__)
PODGROUPS = {VOLCANO_API: resources.PODGROUPS_VOLCANO,
             PLUGINS_API: resources.PODGROUPS_SCHEDULER_PLUGINS}


def settings_from_env(environ: dict[str, str] | None = None) -> Settings:
    env = dict(os.environ if environ is None else environ)
    return Settings(
        gang_scheduler=env.get("TRAINING_GANG_SCHEDULER", ""),
        gang_scheduler_name=env.get("TRAINING_GANG_SCHEDULER_NAME",
                                    "scheduler-plugins-scheduler"),
        cluster_domain=env.get("CUSTOM_CLUSTER_DOMAIN", ""),
        init_container_image=env.get("PYTORCH_INIT_CONTAINER_IMAGE", "alpine:3.10"),
        init_container_max_tries=int(env.get("PYTORCH_INIT_CONTAINER_MAX_TRIES", "100")),
        kubectl_delivery_image=env.get("MPI_KUBECTL_DELIVERY_IMAGE", KUBECTL_DELIVERY_IMAGE),
    )


SETTINGS = settings_from_env()
_served: dict[str, tuple[bool, float]] = {}
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass",
                            namespaced=False)
# How long the PriorityClasses read for a PodGroup's minResources are taken as current.
PRIORITIES_TTL_SECONDS = 60.0


def _podgroups_served(kube: KubeClient, api_version: str) -> bool:
    """Whether the PodGroup CRD is installed (cached; a miss is re-checked after a minute)."""
    known = _served.get(api_version)
    if known is not None and (known[0] or time.monotonic() - known[1] < 60):
        return known[0]
    served = any(r.kind == "PodGroup" for r in kube.discover(api_version))
    _served[api_version] = (served, time.monotonic())
    return served


class Priorities:
    """The cluster's PriorityClasses (name -> value) and the ``globalDefault`` one's value,
    read at most once a minute per process: a PodGroup's ``minResources`` orders replica
    types by them (:func:`functions.jobs.core.gang.priority_order`), and they change about
    as often as a cluster's policy does. Unreadable (no RBAC for them): every pod counts as
    priority 0, the order of the framework, and a warning says so once a minute."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read: tuple[float, dict[str, int], int] | None = None

    def get(self, kube: KubeClient) -> tuple[dict[str, int], int]:
        with self._lock:
            read = self._read
        if read is not None and time.monotonic() - read[0] < PRIORITIES_TTL_SECONDS:
            return read[1], read[2]
        values: dict[str, int] = {}
        default = 0
        try:
            for item in kube.list(PRIORITY_CLASSES):
                name = str((item.get("metadata") or {}).get("name") or "")
                values[name] = int(item.get("value") or 0)
                if item.get("globalDefault"):
                    default = values[name]
        except ApiError as exc:
            if exc.status not in (403, 404):
                raise
            log.warning("cannot read PriorityClasses (%s): PodGroups order replica types as "
                        "if every pod had priority 0", exc)
        with self._lock:
            self._read = (time.monotonic(), values, default)
        return values, default


PRIORITIES = Priorities()


class ParsedJobs:
    """Parsed jobs by kind, uid and resourceVersion (a version names one content): a burst
    runs many passes over an unchanged job, and parsing and defaulting it dominates a pass.
    A new version of the same generation (a status or metadata write) reuses the spec parts
    of the last version parsed (:func:`~functions.jobs.core.model.reparse_job`)."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._jobs: OrderedDict[tuple[str, str, str], Job] = OrderedDict()
        self._specs: OrderedDict[tuple[str, str, int], Job] = OrderedDict()
        self._lock = threading.Lock()

    def parse(self, obj: Obj) -> Job:
        meta = obj.get("metadata") or {}
        kind, uid = str(obj.get("kind")), str(meta.get("uid") or "")
        key = (kind, uid, str(meta.get("resourceVersion") or ""))
        if not key[1] or not key[2]:
            return parse_job(obj)
        generation = meta.get("generation")
        spec_key = (kind, uid, generation) if isinstance(generation, int) else None
        with self._lock:
            job = self._jobs.get(key)
            if job is not None:
                self._jobs.move_to_end(key)
                return job
            earlier = self._specs.get(spec_key) if spec_key is not None else None
        job = parse_job(obj) if earlier is None else reparse_job(earlier, obj)
        with self._lock:
            self._jobs[key] = job
            _bounded(self._jobs, self.size)
            if spec_key is not None:
                self._specs[spec_key] = job
                self._specs.move_to_end(spec_key)
                _bounded(self._specs, self.size)
        return job


def _bounded(entries: OrderedDict[Any, Job], size: int) -> None:
    while len(entries) > size:
        entries.popitem(last=False)


PARSED = ParsedJobs()


def get_job(ctx: Context, fw: Framework, key: ObjectKey, *,
             fresh: bool = False) -> tuple[Obj, Job] | None:
    """The job as the reader (maybe a watch cache) has it, or from the API server when
    ``fresh``; the returned object is shared with the cache and must not be modified."""
    reader: Reader = ctx.kube if fresh else ctx.read
    obj = reader.get(RESOURCES[fw.kind], key.name, key.namespace)
    if obj is None:
        return None
    if "apiVersion" not in obj or "kind" not in obj:
        obj = {"apiVersion": fw.api_version, "kind": fw.kind, **obj}
    return obj, PARSED.parse(obj)


def get_active_job(ctx: Context, fw: Framework, key: ObjectKey, *,
                    fresh: bool = False) -> tuple[Obj, Job] | None:
    """The job, unless it is gone, managed by another controller or being deleted."""
    found = get_job(ctx, fw, key, fresh=fresh)
    if found is None or found[1].managed_externally or found[1].deleting:
        return None
    return found


def _observe_launcher_rbac(kube: Reader, job: Job, observed: Observed) -> None:
    # The ServiceAccount may be the user's own (the launcher template names it): it counts
    # whoever made it, and is never taken over. The Role and RoleBinding must be the job's.
    observed.service_account = kube.get(resources.SERVICEACCOUNTS,
                                        mpi_v1.launcher_service_account(job), job.namespace)
    name = mpi.launcher_name(job)
    observed.role = _owned(kube.get(resources.ROLES, name, job.namespace), job.uid)
    observed.role_binding = _owned(kube.get(resources.ROLEBINDINGS, name, job.namespace),
                                   job.uid)


def _owned(obj: Obj | None, uid: str) -> Obj | None:
    return obj if obj is not None and controlled_by(obj, uid) else None


def observe(ctx: Context, job: Job, *, services: bool = True, fresh: bool = False,
            launcher_rbac: bool = False, priorities: bool = False) -> Observed:
    """The children a job controls, from the reader (maybe a watch cache), or from the API
    server when ``fresh``. Pods and Services are listed by the job-name label. An MPIJob v1's
    launcher ServiceAccount, Role and RoleBinding are read only for ``launcher_rbac`` (the
    reconcile function, which makes them; the others never need them); the PriorityClasses
    (for the PodGroup, with gang scheduling) only for ``priorities`` (reconcile too)."""
    kube: Reader = ctx.kube if fresh else ctx.read
    selector = f"{LABEL_JOB_NAME}={job.name}"
    pods = kube.list(resources.PODS, job.namespace, label_selector=selector)
    observed = Observed(job=job)
    if job.framework == MPI_V1:
        observed.pods = [p for p in pods if controlled_by(p, job.uid)]
        if services:
            observed.config_map = _owned(kube.get(resources.CONFIGMAPS,
                                                  mpi_v1.config_name(job), job.namespace),
                                         job.uid)
        if launcher_rbac:
            _observe_launcher_rbac(kube, job, observed)
    elif job.framework == MPI:
        observed.launcher = _owned(kube.get(resources.JOBS, mpi.launcher_name(job),
                                            job.namespace), job.uid)
        launcher_uid = uid_of(observed.launcher) if observed.launcher else "-"
        observed.pods = [p for p in pods if controlled_by(p, job.uid)
                         or controlled_by(p, launcher_uid)]
        if services:
            svc = _owned(kube.get(resources.SERVICES, job.name, job.namespace), job.uid)
            observed.services = [svc] if svc else []
            observed.config_map = _owned(kube.get(resources.CONFIGMAPS, mpi.config_name(job),
                                                  job.namespace), job.uid)
            observed.secret = _owned(kube.get(resources.SECRETS, mpi.secret_name(job),
                                              job.namespace), job.uid)
    else:
        observed.pods = [p for p in pods if controlled_by(p, job.uid)]
        if services:
            observed.services = [s for s in kube.list(resources.SERVICES, job.namespace,
                                                      label_selector=selector)
                                 if controlled_by(s, job.uid)]
        if job.framework.kind == "PyTorchJob" and job.spec.elastic_policy is not None:
            observed.hpa = _owned(kube.get(resources.HPAS, job.name, job.namespace), job.uid)
    if SETTINGS.gang_scheduler:
        api_version = podgroup_api_version(SETTINGS)
        observed.podgroup_supported = _podgroups_served(ctx.kube, api_version)
        if observed.podgroup_supported:
            observed.podgroup = _owned(kube.get(PODGROUPS[api_version], job.name,
                                                job.namespace), job.uid)
            observed.held_since = held_since(SETTINGS, observed.podgroup)
            if priorities:
                observed.priorities, observed.default_priority = PRIORITIES.get(ctx.kube)
    return observed
