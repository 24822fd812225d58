"""MPIJob ``kubeflow.org/v1`` (training-operator 1.9): a launcher pod that starts the ranks on
the workers with ``kubectl exec``.

Objects, all controlled by the MPIJob: the ConfigMap ``<job>-config`` (``hostfile``,
``kubexec.sh``, ``discover_hosts.sh``), the launcher's ServiceAccount, Role and RoleBinding
``<job>-launcher`` (it may list pods and exec into the workers, nothing else), worker pods
``<job>-worker-<i>`` that idle until exec'd into, and the launcher pod ``<job>-launcher``,
whose end is the job's. No Services: ranks are reached through the API server, not the pod
network. Names, labels, scripts and variables are upstream's, because MPI images built for the
training operator read exactly these.
"""

from __future__ import annotations

from collections.abc import Sequence

from functions.jobs.core.frameworks import LABEL_REPLICA_INDEX
from functions.jobs.core.model import Job, Obj
from functions.jobs.core.mpi import launcher_name, worker_name
from functions.jobs.core.objects import Notice, desired_pod, owner_reference
from functions.jobs.core.settings import Settings

CONFIG_VOLUME = "mpi-job-config"
KUBECTL_VOLUME = "mpi-job-kubectl"
CONFIG_MOUNT = "/etc/mpi"
KUBECTL_MOUNT = "/opt/kube"
KUBEXEC = f"{CONFIG_MOUNT}/kubexec.sh"
RBAC_API = "rbac.authorization.k8s.io"
# Intel MPI's bootstrap goes through kubexec.sh too, unless the user chose otherwise.
INTEL_BOOTSTRAP = (("I_MPI_HYDRA_BOOTSTRAP", "rsh"), ("I_MPI_HYDRA_BOOTSTRAP_EXEC", KUBEXEC))


def config_name(job: Job) -> str:
    return f"{job.name}-config"


def _meta(job: Job, name: str) -> Obj:
    return {"name": name, "namespace": job.namespace, "labels": {"app": job.name},
            "ownerReferences": [owner_reference(job)]}


def gpu_launcher(job: Job) -> bool:
    """A launcher that asks for a GPU is also a host of the hostfile (upstream: any limit
    whose name contains ``gpu``)."""
    spec = job.replica_specs.get("Launcher")
    return spec is not None and any(
        "gpu" in str(key)
        for container in spec.containers
        for key in ((container.get("resources") or {}).get("limits") or {}))


def launcher_service_account(job: Job) -> str:
    """The launcher template's own ServiceAccount, else ``<job>-launcher``."""
    spec = job.replica_specs.get("Launcher")
    own = ((spec.template.get("spec") or {}).get("serviceAccountName") if spec else None)
    return str(own) if own else launcher_name(job)


def hostfile(job: Job) -> str:
    slots = job.spec.slots_per_worker or 1
    lines = [f"{launcher_name(job)} slots={slots}\n"] if gpu_launcher(job) else []
    lines += [f"{worker_name(job, i)} slots={slots}\n" for i in range(job.replicas("Worker"))]
    return "".join(lines)


def kubexec(job: Job) -> str:
    command = f"{KUBECTL_MOUNT}/kubectl exec ${{POD_NAME}}"
    if job.spec.main_container:
        command += f" --container {job.spec.main_container}"
    return f'#!/bin/sh\nset -x\nPOD_NAME=$1\nshift\n{command} -- /bin/sh -c "$*"'


def discover_hosts(job: Job, running_workers: Sequence[str]) -> str:
    slots = job.spec.slots_per_worker or 1
    lines = ["#!/bin/sh\n"]
    if gpu_launcher(job):
        lines.append(f"echo {launcher_name(job)}:{slots}\n")
    lines += [f"echo {name}:{slots}\n" for name in sorted(running_workers)]
    return "".join(lines)


def config_map(job: Job, running_workers: Sequence[str]) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(job, config_name(job)),
            "data": {"hostfile": hostfile(job), "kubexec.sh": kubexec(job),
                     "discover_hosts.sh": discover_hosts(job, running_workers)}}


def service_account(job: Job) -> Obj:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": _meta(job, launcher_service_account(job))}


def role(job: Job) -> Obj:
    """Pods readable; ``exec`` only into this job's workers. Upstream leaves
    ``resourceNames`` empty without workers, which would allow every pod of the namespace:
    here the exec rule is left out instead."""
    rules: list[Obj] = [{"apiGroups": [""], "resources": ["pods"],
                         "verbs": ["get", "list", "watch"]}]
    workers = [worker_name(job, i) for i in range(job.replicas("Worker"))]
    if workers:
        rules.append({"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"],
                      "resourceNames": workers})
    return {"apiVersion": f"{RBAC_API}/v1", "kind": "Role",
            "metadata": _meta(job, launcher_name(job)), "rules": rules}


def role_binding(job: Job) -> Obj:
    return {"apiVersion": f"{RBAC_API}/v1", "kind": "RoleBinding",
            "metadata": _meta(job, launcher_name(job)),
            "subjects": [{"kind": "ServiceAccount", "name": launcher_service_account(job),
                          "namespace": job.namespace}],
            "roleRef": {"apiGroup": RBAC_API, "kind": "Role", "name": launcher_name(job)}}


def _config_volume(job: Job, items: Sequence[tuple[str, int]]) -> Obj:
    return {"name": CONFIG_VOLUME,
            "configMap": {"name": config_name(job),
                          "items": [{"key": k, "path": k, "mode": m} for k, m in items]}}


def worker_pod(job: Job, index: int, settings: Settings) -> tuple[Obj, list[Notice]]:
    """A worker idles (``sleep 365d`` unless told otherwise) until the launcher execs ranks
    into it; Open MPI looks for kubexec.sh on every rank, so it is mounted here too."""
    pod, notices = desired_pod(job, "Worker", index, settings)
    spec = pod["spec"]
    main = dict(spec["containers"][0])
    if not main.get("command"):
        main["command"], main["args"] = ["sleep"], ["365d"]
    main["volumeMounts"] = [*(main.get("volumeMounts") or []),
                            {"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT}]
    spec["containers"] = [main, *spec["containers"][1:]]
    spec["volumes"] = [*(spec.get("volumes") or []),
                       _config_volume(job, [("kubexec.sh", 0o555)])]
    return pod, notices


def _launcher_env(job: Job, current: Sequence[Obj]) -> list[Obj]:
    env: list[Obj] = [{"name": "OMPI_MCA_plm_rsh_agent", "value": KUBEXEC},
                      {"name": "OMPI_MCA_orte_default_hostfile",
                       "value": f"{CONFIG_MOUNT}/hostfile"}]
    if not gpu_launcher(job):
        env += [{"name": "NVIDIA_VISIBLE_DEVICES", "value": ""},
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": ""}]
    named = {str(var.get("name")) for var in current}
    env += [{"name": k, "value": v} for k, v in INTEL_BOOTSTRAP if k not in named]
    return env


def _kubectl_delivery(job: Job, settings: Settings) -> Obj:
    resources = {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"}
    return {"name": "kubectl-delivery", "image": settings.kubectl_delivery_image,
            "imagePullPolicy": "IfNotPresent",
            "env": [{"name": "TARGET_DIR", "value": KUBECTL_MOUNT},
                    {"name": "NAMESPACE", "value": job.namespace}],
            "volumeMounts": [{"name": KUBECTL_VOLUME, "mountPath": KUBECTL_MOUNT},
                             {"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT}],
            "resources": {"limits": dict(resources), "requests": dict(resources)}}


def launcher_pod(job: Job, settings: Settings) -> tuple[Obj, list[Notice]]:
    """The launcher: ``job-role: master`` (what the SDK's ``is_master`` finds), no replica
    index, the launcher identity, kubectl delivered into an emptyDir by an init container."""
    pod, notices = desired_pod(job, "Launcher", 0, settings)
    meta = pod["metadata"]
    meta["name"] = launcher_name(job)
    meta["labels"].pop(LABEL_REPLICA_INDEX, None)
    spec = pod["spec"]
    spec["serviceAccountName"] = launcher_service_account(job)
    spec["initContainers"] = [*(spec.get("initContainers") or []),
                              _kubectl_delivery(job, settings)]
    main = dict(spec["containers"][0])
    main["env"] = [*(main.get("env") or []), *_launcher_env(job, main.get("env") or [])]
    main["volumeMounts"] = [*(main.get("volumeMounts") or []),
                            {"name": KUBECTL_VOLUME, "mountPath": KUBECTL_MOUNT},
                            {"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT}]
    spec["containers"] = [main, *spec["containers"][1:]]
    spec["volumes"] = [*(spec.get("volumes") or []),
                       {"name": KUBECTL_VOLUME, "emptyDir": {}},
                       _config_volume(job, [("kubexec.sh", 0o555), ("hostfile", 0o444),
                                            ("discover_hosts.sh", 0o555)])]
    return pod, notices
