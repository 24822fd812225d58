"""Typed views of training-job custom resources (the boundary between raw dicts and rules).

The API server hands us plain dicts; rules want named, typed fields. These pydantic models read
the fields the controllers use and ignore the rest, so a CR written by any client (kubectl, the
Kubeflow SDK, Kueue) parses. Pod templates stay plain dicts: they are copied, not interpreted.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr
from pydantic.alias_generators import to_camel

from functions.jobs.core.flavour import framework_of
from functions.jobs.core.frameworks import Framework

Obj = dict[str, Any]


class _View(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class ReplicaSpec(_View):
    replicas: int | None = None
    restart_policy: str | None = None
    template: Obj = Field(default_factory=dict)

    @property
    def containers(self) -> list[Obj]:
        return list((self.template.get("spec") or {}).get("containers") or [])


class SchedulingPolicy(_View):
    min_available: int | None = None
    queue: str | None = None
    min_resources: dict[str, Any] | None = None
    priority_class: str | None = None
    schedule_timeout_seconds: int | None = None


class RunPolicy(_View):
    clean_pod_policy: str | None = None
    ttl_seconds_after_finished: int | None = None
    active_deadline_seconds: int | None = None
    backoff_limit: int | None = None
    scheduling_policy: SchedulingPolicy | None = None
    suspend: bool | None = None
    managed_by: str | None = None


class RdzvConf(_View):
    key: str = ""
    value: str = ""


class ElasticPolicy(_View):
    min_replicas: int | None = None
    max_replicas: int | None = None
    rdzv_backend: str | None = None
    rdzv_port: int | None = None
    rdzv_host: str | None = None
    rdzv_id: str | None = None
    rdzv_conf: list[RdzvConf] = Field(default_factory=list)
    standalone: bool | None = None
    n_proc_per_node: int | None = None
    max_restarts: int | None = None
    metrics: list[Obj] = Field(default_factory=list)


class JobSpec(_View):
    """Union of the four kinds' spec fields; each kind reads only its own."""

    run_policy: RunPolicy = Field(default_factory=RunPolicy)
    # PyTorchJob
    nproc_per_node: str | None = None
    elastic_policy: ElasticPolicy | None = None
    # TFJob
    success_policy: str | None = None
    enable_dynamic_worker: bool = False
    # MXJob
    job_mode: str | None = None
    # MPIJob (both versions)
    slots_per_worker: int | None = None
    # MPIJob v1
    main_container: str | None = None
    clean_pod_policy: str | None = None   # deprecated; runPolicy.cleanPodPolicy wins
    # MPIJob v2beta1
    run_launcher_as_worker: bool = False
    ssh_auth_mount_path: str | None = None
    launcher_creation_policy: str | None = None
    mpi_implementation: str | None = None


class Condition(_View):
    type: str
    status: Literal["True", "False", "Unknown"] = "True"
    reason: str = ""
    message: str = ""
    last_update_time: str | None = None
    last_transition_time: str | None = None


class ReplicaStatus(_View):
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    selector: str | None = None


class JobStatus(_View):
    conditions: list[Condition] = Field(default_factory=list)
    replica_statuses: dict[str, ReplicaStatus] = Field(default_factory=dict)
    start_time: str | None = None
    completion_time: str | None = None
    last_reconcile_time: str | None = None

    def condition(self, type_: str) -> Condition | None:
        for cond in self.conditions:
            if cond.type == type_:
                return cond
        return None

    def is_true(self, type_: str) -> bool:
        cond = self.condition(type_)
        return cond is not None and cond.status == "True"

    @property
    def finished(self) -> bool:
        return self.is_true("Succeeded") or self.is_true("Failed")

    def to_dict(self) -> Obj:
        """The wire form: camelCase keys, unset optional fields left out."""
        out: Obj = {
            "conditions": [c.model_dump(by_alias=True, exclude_none=True)
                           for c in self.conditions],
            "replicaStatuses": {k: v.model_dump(by_alias=True, exclude_none=True)
                                for k, v in self.replica_statuses.items()},
        }
        for key, value in (("startTime", self.start_time),
                           ("completionTime", self.completion_time),
                           ("lastReconcileTime", self.last_reconcile_time)):
            if value is not None:
                out[key] = value
        return out


class Job(BaseModel):
    """One training job: identity, replica specs keyed by canonical type, spec, status."""

    model_config = ConfigDict(extra="ignore")

    framework: Framework
    name: str
    namespace: str
    uid: str
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    deleting: bool = False
    replica_specs: dict[str, ReplicaSpec] = Field(default_factory=dict)
    spec: JobSpec = Field(default_factory=JobSpec)
    status: JobStatus = Field(default_factory=JobStatus)
    # Set by functions.jobs.core.defaults.with_defaults: this job's defaulted copy (jobs are
    # never modified once parsed, so it is made once), and whether this job is one.
    _defaulted: Job | None = PrivateAttr(default=None)
    _is_defaulted: bool = PrivateAttr(default=False)

    @property
    def kind(self) -> str:
        return self.framework.kind

    @property
    def api_version(self) -> str:
        return self.framework.api_version

    @property
    def run_policy(self) -> RunPolicy:
        return self.spec.run_policy

    @property
    def suspended(self) -> bool:
        return bool(self.run_policy.suspend)

    def replicas(self, replica_type: str) -> int:
        spec = self.replica_specs.get(replica_type)
        if spec is None:
            return 0
        return spec.replicas if spec.replicas is not None else 1

    @property
    def total_replicas(self) -> int:
        return sum(self.replicas(t) for t in self.replica_specs)

    def ordered_types(self) -> list[str]:
        """Replica types present, in the framework's evaluation order, unknown ones last."""
        known = [t for t in self.framework.replica_types if t in self.replica_specs]
        return known + sorted(t for t in self.replica_specs if t not in known)

    @property
    def managed_externally(self) -> bool:
        manager = self.run_policy.managed_by
        return bool(manager) and manager != self.framework.own_manager


def reparse_job(earlier: Job, obj: Obj) -> Job:
    """``obj`` parsed, given ``earlier``, parsed from a version of the same object with the
    same spec (its ``metadata.generation``): the spec parts are shared with ``earlier``
    (parsed jobs are never modified) and only the metadata and the status are read. Defaulting
    reads and writes nothing but the spec parts, so a defaulted copy made of ``earlier`` is
    carried over the same way. Status writes change a job's version many times per
    generation; this spares each of them a spec parse and a defaulting deep copy."""
    meta = obj.get("metadata") or {}
    fresh = {
        "name": str(meta.get("name", "")),
        "namespace": str(meta.get("namespace") or ""),
        "uid": str(meta.get("uid", "")),
        "labels": dict(meta.get("labels") or {}),
        "annotations": dict(meta.get("annotations") or {}),
        "deleting": bool(meta.get("deletionTimestamp")),
        "status": JobStatus.model_validate(obj.get("status") or {}),
    }
    out = earlier.model_copy(update=fresh)
    out._defaulted = None
    out._is_defaulted = earlier._is_defaulted
    if earlier._defaulted is not None:
        defaulted = earlier._defaulted.model_copy(update=fresh)
        defaulted._defaulted = None
        defaulted._is_defaulted = True
        out._defaulted = defaulted
    return out


def parse_job(obj: Obj) -> Job:
    """Read a job CR (any kind, any flavour) into a :class:`Job`; keys keep the user's case."""
    framework = framework_of(obj)
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    raw_specs = spec.get(framework.specs_field) or {}
    return Job(
        framework=framework,
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace") or ""),
        uid=str(meta.get("uid", "")),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        deleting=bool(meta.get("deletionTimestamp")),
        replica_specs={str(k): ReplicaSpec.model_validate(copy.deepcopy(v or {}))
                       for k, v in raw_specs.items()},
        spec=JobSpec.model_validate(spec),
        status=JobStatus.model_validate(obj.get("status") or {}),
    )
