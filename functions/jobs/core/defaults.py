"""Upstream defaulting, applied to an in-memory copy and never written back to the CR.

Validation (CEL / admission policies) sees the object as the user wrote it, exactly like the
upstream webhooks; every rule that builds pods or status sees the defaulted copy.
"""

from __future__ import annotations

import copy

from functions.jobs.core.frameworks import MPI, MPI_V1, PYTORCH, TENSORFLOW, Framework
from functions.jobs.core.model import Job, Obj, ReplicaSpec

DEFAULT_SSH_AUTH_MOUNT_PATH = "/root/.ssh"


def with_defaults(job: Job) -> Job:
    """A defaulted deep copy of ``job``, made once per job: a parsed job is never modified,
    so the copy is remembered on it (each pass of reconcile and status asks several times),
    and a defaulted job is its own defaulted form."""
    if job._is_defaulted:
        return job
    if job._defaulted is None:
        job._defaulted = _defaulted(job)
    return job._defaulted


def _defaulted(job: Job) -> Job:
    out = job.model_copy(deep=True)
    out._is_defaulted = True
    fw = out.framework
    specs: dict[str, ReplicaSpec] = {}
    for key, spec in out.replica_specs.items():
        rtype = fw.canonical_type(key)
        if spec.replicas is None:
            spec.replicas = fw.default_replicas_for(rtype)
        if not spec.restart_policy:
            spec.restart_policy = fw.restart_policy_for(rtype)
        if fw not in (MPI, MPI_V1):  # neither MPI operator adds a port
            spec.template = with_default_port(spec.template, fw)
        specs[rtype] = spec
    out.replica_specs = specs
    policy = out.spec.run_policy
    if fw == MPI_V1 and not policy.clean_pod_policy:
        # The deprecated top-level field counts when runPolicy leaves it unset.
        policy.clean_pod_policy = out.spec.clean_pod_policy
    if not policy.clean_pod_policy:
        policy.clean_pod_policy = "None"
    if policy.suspend is None:
        policy.suspend = False
    if fw == PYTORCH:
        _pytorch_defaults(out)
    elif fw == TENSORFLOW and out.spec.success_policy is None:
        out.spec.success_policy = ""
    elif fw == MPI_V1:
        out.spec.clean_pod_policy = policy.clean_pod_policy
        out.spec.slots_per_worker = out.spec.slots_per_worker or 1
    elif fw == MPI:
        out.spec.slots_per_worker = out.spec.slots_per_worker or 1
        out.spec.ssh_auth_mount_path = out.spec.ssh_auth_mount_path or DEFAULT_SSH_AUTH_MOUNT_PATH
        out.spec.launcher_creation_policy = out.spec.launcher_creation_policy or "AtStartup"
        out.spec.mpi_implementation = out.spec.mpi_implementation or "OpenMPI"
    return out


def _pytorch_defaults(job: Job) -> None:
    elastic = job.spec.elastic_policy
    if job.spec.nproc_per_node is None and (elastic is None or elastic.n_proc_per_node is None):
        job.spec.nproc_per_node = "auto"
    if elastic is not None:
        workers = job.replicas("Worker")
        if elastic.min_replicas is None and elastic.max_replicas is None:
            elastic.min_replicas = elastic.max_replicas = workers
        elif elastic.min_replicas is None:
            elastic.min_replicas = elastic.max_replicas
        elif elastic.max_replicas is None:
            elastic.max_replicas = elastic.min_replicas


def with_default_port(template: Obj, fw: Framework) -> Obj:
    """Add the framework port to its default container (or container 0) unless already named."""
    out = copy.deepcopy(template)
    containers = (out.get("spec") or {}).get("containers") or []
    if not containers:
        return out
    target = next((c for c in containers if c.get("name") == fw.default_container), containers[0])
    ports = target.setdefault("ports", [])
    if not any(p.get("name") == fw.port_name for p in ports):
        ports.append({"name": fw.port_name, "containerPort": fw.port})
    return out


def named_container(template: Obj, name: str) -> Obj | None:
    for container in (template.get("spec") or {}).get("containers") or []:
        if container.get("name") == name:
            return dict(container)
    return None


def port_of(job: Job, replica_type: str) -> int:
    """The framework port of a replica type's default container (framework port as fallback)."""
    fw = job.framework
    spec = job.replica_specs.get(replica_type)
    if spec is None:
        return fw.port
    container = named_container(spec.template, fw.default_container)
    for port in (container or {}).get("ports") or []:
        if port.get("name") == fw.port_name:
            return int(port.get("containerPort", fw.port))
    return fw.port
