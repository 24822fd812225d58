"""MPIJob ``kubeflow.org/v2beta1`` (mpi-operator): SSH-connected workers and a launcher Job.

Objects: a headless Service ``<job>``, the hostfile ConfigMap ``<job>-config``, the SSH Secret
``<job>-ssh``, worker pods ``<job>-worker-<i>`` and a batch Job ``<job>-launcher`` whose
completion is the MPIJob's. Key material is an input: generating it is the adapter's business.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Sequence
from dataclasses import dataclass

from functions.jobs.core.frameworks import LABEL_JOB_NAME, LABEL_JOB_ROLE, LABEL_OPERATOR
from functions.jobs.core.frameworks import LABEL_REPLICA_INDEX as LABEL_INDEX
from functions.jobs.core.model import Job, Obj
from functions.jobs.core.objects import (
    PLUGINS_POD_GROUP_LABEL,
    VOLCANO_GROUP_ANNOTATION,
    owner_reference,
    pod_restart_policy,
)
from functions.jobs.core.settings import VOLCANO, Settings

CONFIG_MOUNT = "/etc/mpi"
SSH_VOLUME = "ssh-auth"
CONFIG_VOLUME = "mpi-job-config"
WORKER_COMMAND = ["/usr/sbin/sshd", "-De"]
CONNECT_ARGS = "-o ConnectionAttempts=10"


@dataclass(frozen=True, slots=True)
class SSHKeys:
    """An SSH identity: the private key as PEM and the public key in authorized_keys form."""

    private_pem: bytes
    public_openssh: bytes


def config_name(job: Job) -> str:
    return f"{job.name}-config"


def secret_name(job: Job) -> str:
    return f"{job.name}-ssh"


def launcher_name(job: Job) -> str:
    return f"{job.name}-launcher"


def worker_name(job: Job, index: int) -> str:
    return f"{job.name}-worker-{index}"


def role_labels(job: Job, role: str = "") -> dict[str, str]:
    labels = {LABEL_OPERATOR: job.framework.operator_name, LABEL_JOB_NAME: job.name}
    if role:
        labels[LABEL_JOB_ROLE] = role
    return labels


def _meta(job: Job, name: str) -> Obj:
    return {"name": name, "namespace": job.namespace, "labels": {"app": job.name},
            "ownerReferences": [owner_reference(job)]}


def service(job: Job) -> Obj:
    meta = _meta(job, job.name)
    # The job-name label makes its deletion reach the functions: the ApiServerSource selects
    # Services by it (eventing/apiserversource.yaml).
    meta["labels"] = {**meta["labels"], **role_labels(job)}
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta,
            "spec": {"clusterIP": "None", "selector": role_labels(job),
                     "publishNotReadyAddresses": job.spec.run_launcher_as_worker}}


def _host(job: Job, pod_name: str, cluster_domain: str) -> str:
    suffix = f".{cluster_domain}" if cluster_domain else ""
    return f"{pod_name}.{job.name}.{job.namespace}.svc{suffix}"


def hostfile(job: Job, cluster_domain: str = "") -> str:
    slots = job.spec.slots_per_worker or 1
    names = [launcher_name(job)] if job.spec.run_launcher_as_worker else []
    names += [worker_name(job, i) for i in range(job.replicas("Worker"))]
    if job.spec.mpi_implementation in ("Intel", "MPICH"):
        return "".join(f"{_host(job, n, cluster_domain)}:{slots}\n" for n in names)
    return "".join(f"{_host(job, n, cluster_domain)} slots={slots}\n" for n in names)


def discover_hosts(job: Job, running_workers: Sequence[str]) -> str:
    lines = ["#!/bin/sh\n"]
    if job.spec.run_launcher_as_worker:
        lines.append(f"echo {launcher_name(job)}.{job.name}.{job.namespace}.svc\n")
    lines += [f"echo {n}.{job.name}.{job.namespace}.svc\n" for n in sorted(running_workers)]
    return "".join(lines)


def config_map(job: Job, running_workers: Sequence[str], cluster_domain: str = "") -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(job, config_name(job)),
            "data": {"hostfile": hostfile(job, cluster_domain),
                     "discover_hosts.sh": discover_hosts(job, running_workers)}}


def ssh_secret(job: Job, keys: SSHKeys) -> Obj:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": _meta(job, secret_name(job)),
            "type": "kubernetes.io/ssh-auth",
            "data": {"ssh-privatekey": base64.b64encode(keys.private_pem).decode(),
                     "ssh-publickey": base64.b64encode(keys.public_openssh).decode()}}


def _ssh_volume(job: Job, pod_spec: Obj) -> None:
    source: Obj = {"secretName": secret_name(job),
                   "items": [{"key": "ssh-privatekey", "path": "id_rsa"},
                             {"key": "ssh-publickey", "path": "id_rsa.pub"},
                             {"key": "ssh-publickey", "path": "authorized_keys"}]}
    if job.spec.ssh_auth_mount_path == "/root/.ssh":
        source["defaultMode"] = 0o600
    pod_spec["volumes"] = [*(pod_spec.get("volumes") or []),
                           {"name": SSH_VOLUME, "secret": source}]
    main = pod_spec["containers"][0]
    main["volumeMounts"] = [*(main.get("volumeMounts") or []),
                            {"name": SSH_VOLUME, "mountPath": job.spec.ssh_auth_mount_path}]


def _gang(job: Job, template: Obj, settings: Settings) -> None:
    """mpi-operator's decoration for a gang scheduler: its schedulerName (set over the
    template's), and the PodGroup named by annotation (Volcano) or label (scheduler-plugins)."""
    if not settings.gang_scheduler:
        return
    meta = template["metadata"]
    if settings.gang_scheduler == VOLCANO:
        template["spec"]["schedulerName"] = VOLCANO
        meta["annotations"] = {**(meta.get("annotations") or {}),
                               VOLCANO_GROUP_ANNOTATION: job.name}
    else:
        template["spec"]["schedulerName"] = settings.gang_scheduler_name
        meta["labels"] = {**meta["labels"], PLUGINS_POD_GROUP_LABEL: job.name}


def _pod_template(job: Job, replica_type: str, name: str, labels: dict[str, str],
                  settings: Settings) -> Obj:
    spec = job.replica_specs[replica_type]
    template = copy.deepcopy(spec.template)
    meta = dict(template.get("metadata") or {})
    meta["labels"] = {**(meta.get("labels") or {}), **labels}
    pod_spec = dict(template.get("spec") or {})
    pod_spec["containers"] = [dict(c) for c in pod_spec.get("containers") or [{}]]
    pod_spec["hostname"] = name
    pod_spec["subdomain"] = job.name
    if pod_spec.get("hostNetwork"):
        pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    pod_spec["restartPolicy"] = pod_restart_policy(spec.restart_policy or "Never")
    _ssh_volume(job, pod_spec)
    template = {"metadata": meta, "spec": pod_spec}
    _gang(job, template, settings)
    return template


def worker_pod(job: Job, index: int, settings: Settings) -> Obj:
    name = worker_name(job, index)
    labels = role_labels(job, "worker")
    labels[LABEL_INDEX] = str(index + 1 if job.spec.run_launcher_as_worker else index)
    template = _pod_template(job, "Worker", name, labels, settings)
    main = template["spec"]["containers"][0]
    if not main.get("command") and not main.get("args"):
        main["command"] = list(WORKER_COMMAND)
    main["env"] = [*(main.get("env") or []), {"name": "K_MPI_JOB_ROLE", "value": "worker"}]
    metadata = {**template["metadata"], "name": name, "namespace": job.namespace,
                "ownerReferences": [owner_reference(job)]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}


def _launcher_env(job: Job) -> list[Obj]:
    slots = str(job.spec.slots_per_worker or 1)
    hostfile_path = f"{CONFIG_MOUNT}/hostfile"
    env: list[Obj] = [{"name": "K_MPI_JOB_ROLE", "value": "launcher"}]
    impl = job.spec.mpi_implementation
    if impl == "Intel":
        env += [{"name": "I_MPI_HYDRA_HOST_FILE", "value": hostfile_path},
                {"name": "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "value": CONNECT_ARGS},
                {"name": "I_MPI_PERHOST", "value": slots}]
    elif impl == "MPICH":
        env += [{"name": "HYDRA_HOST_FILE", "value": hostfile_path},
                {"name": "HYDRA_LAUNCH_EXTRA_ARGS", "value": CONNECT_ARGS}]
    else:
        env += [{"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
                {"name": "OMPI_MCA_orte_default_hostfile", "value": hostfile_path},
                {"name": "OMPI_MCA_plm_rsh_args", "value": CONNECT_ARGS},
                {"name": "OMPI_MCA_orte_set_default_slots", "value": slots}]
    if not job.spec.run_launcher_as_worker:
        env += [{"name": "NVIDIA_VISIBLE_DEVICES", "value": ""},
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": ""}]
    return env


def launcher_job(job: Job, settings: Settings) -> Obj:
    name = launcher_name(job)
    template = _pod_template(job, "Launcher", name, role_labels(job, "launcher"), settings)
    pod_spec = template["spec"]
    main = pod_spec["containers"][0]
    main["env"] = [*(main.get("env") or []), *_launcher_env(job)]
    pod_spec["volumes"] = [*pod_spec["volumes"], {
        "name": CONFIG_VOLUME,
        "configMap": {"name": config_name(job),
                      "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444},
                                {"key": "discover_hosts.sh", "path": "discover_hosts.sh",
                                 "mode": 0o555}]}}]
    main["volumeMounts"] = [*main["volumeMounts"],
                            {"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT}]
    policy = job.run_policy
    spec: Obj = {"template": template, "podReplacementPolicy": "Failed",
                 "suspend": job.suspended}
    for key, value in (("ttlSecondsAfterFinished", policy.ttl_seconds_after_finished),
                       ("activeDeadlineSeconds", policy.active_deadline_seconds),
                       ("backoffLimit", policy.backoff_limit)):
        if value is not None:
            spec[key] = value
    meta = _meta(job, name)
    # The job-name label makes its changes reach the functions: the ApiServerSource selects
    # batch Jobs by it (eventing/apiserversource.yaml).
    meta["labels"] = {**meta["labels"], **role_labels(job, "launcher")}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}
