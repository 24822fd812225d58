"""What a kubelet derives from a Pod before and while it runs it, as pure functions.

The local kubelet (:mod:`devstack.kubelet`) runs the pods whose image is a command it
has a binary for (Knative Eventing's, the upstream Trainer and JobSet controllers), and must
give each container exactly what a kubelet would: the environment the pod spec declares
(values, ``fieldRef``, ``configMapKeyRef`` and ``secretKeyRef``, ``envFrom``, ``$(VAR)``
references), the arguments, and a status that follows the container (Running, Ready once its
readiness probe passes, restarts with the kubelet's back-off). Anything it cannot provide
faithfully is refused with :class:`PodSpecError`, the way a kubelet reports
``CreateContainerConfigError``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

TRAINER_IMAGE = "quay.io/opendatahub/trainer:odh-stable"
JOBSET_IMAGE = "registry.k8s.io/jobset/jobset:v0.12.0"

# Knative's manifests name images by Go import path (``ko://``); the binaries are built from
# those packages by hack/ensure-testbin.sh under these names.
IMAGE_BINARIES: Mapping[str, str] = {
    "ko://knative.dev/eventing/cmd/controller": "eventing_controller",
    "ko://knative.dev/eventing/cmd/webhook": "eventing_webhook",
    "ko://knative.dev/eventing/cmd/mtchannel_broker": "mtchannel_broker",
    "ko://knative.dev/eventing/cmd/broker/ingress": "broker_ingress",
    "ko://knative.dev/eventing/cmd/broker/filter": "broker_filter",
    "ko://knative.dev/eventing/cmd/in_memory/channel_controller": "imc_controller",
    "ko://knative.dev/eventing/cmd/in_memory/channel_dispatcher": "imc_dispatcher",
    "ko://knative.dev/eventing/cmd/mtping": "mtping",
    "ko://knative.dev/eventing/cmd/apiserver_receive_adapter": "apiserver_receive_adapter",
    # The upstream Trainer controller the Trainer's manifests deploy (params.env's image),
    # and the JobSet controller of their third-party JobSet release.
    TRAINER_IMAGE: "trainer-controller-manager",
    JOBSET_IMAGE: "jobset-controller-manager",
}
# An image's entrypoint, where a Deployment names it as its command (a ko image's
# entrypoint is its binary, and its Deployments name no command).
IMAGE_ENTRYPOINTS: Mapping[str, tuple[str, ...]] = {
    TRAINER_IMAGE: ("/manager",),
    JOBSET_IMAGE: ("/manager",),
}

# The kubelet's crash-loop back-off: 10 s, doubled per restart, at most five minutes.
BACKOFF_BASE = 10.0
BACKOFF_MAX = 300.0


class PodSpecError(ValueError):
    """The pod asks for something the local kubelet cannot give faithfully."""


# (kind "ConfigMap"|"Secret", namespace, name) -> its data (None when it does not exist)
DataLookup = Callable[[str, str, str], "Mapping[str, str] | None"]


def binary_for(pod: Obj) -> str | None:
    """The local binary of a pod's only container, or ``None`` when this is not such a pod."""
    containers = (pod.get("spec") or {}).get("containers") or []
    if len(containers) != 1 or (pod.get("spec") or {}).get("initContainers"):
        return None
    return IMAGE_BINARIES.get(str(containers[0].get("image", "")))


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: known names are replaced, ``$$`` escapes a ``$``,
    unknown references stay as written."""
    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))
    return _VAR.sub(replace, text)


def field_value(pod: Obj, path: str) -> str:
    """A ``fieldRef`` of the downward API."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    simple = {
        "metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"), "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": status.get("podIP"), "status.hostIP": status.get("hostIP"),
    }
    if path in simple:
        return str(simple[path] or "")
    found = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if found:
        return str((meta.get(found.group(1)) or {}).get(found.group(2), ""))
    raise PodSpecError(f"fieldRef {path!r} is not supported")


def _keyed(kind: str, ref: Obj, namespace: str, lookup: DataLookup) -> str | None:
    data = lookup(kind, namespace, str(ref.get("name", "")))
    optional = bool(ref.get("optional"))
    if data is None:
        if optional:
            return None
        raise PodSpecError(f"{kind} {namespace}/{ref.get('name')} not found")
    key = str(ref.get("key", ""))
    if key not in data:
        if optional:
            return None
        raise PodSpecError(f"{kind} {namespace}/{ref.get('name')} has no key {key!r}")
    return str(data[key])


def container_env(pod: Obj, container: Obj, lookup: DataLookup) -> dict[str, str]:
    """The environment of ``container`` as a kubelet builds it: ``envFrom`` first, then
    ``env`` in order (later entries win, and may refer to earlier ones with ``$(NAME)``)."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix") or "")
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = source.get(key)
            if ref is None:
                continue
            data = lookup(kind, namespace, str(ref.get("name", "")))
            if data is None:
                if ref.get("optional"):
                    continue
                raise PodSpecError(f"{kind} {namespace}/{ref.get('name')} not found")
            env.update({prefix + k: str(v) for k, v in data.items()})
    for item in container.get("env") or []:
        name = str(item["name"])
        source = item.get("valueFrom")
        if source is None:
            env[name] = expand(str(item.get("value") or ""), env)
            continue
        value: str | None
        if "fieldRef" in source:
            value = field_value(pod, str(source["fieldRef"]["fieldPath"]))
        elif "configMapKeyRef" in source:
            value = _keyed("ConfigMap", source["configMapKeyRef"], namespace, lookup)
        elif "secretKeyRef" in source:
            value = _keyed("Secret", source["secretKeyRef"], namespace, lookup)
        else:
            raise PodSpecError(f"env {name}: {sorted(source)} is not supported")
        if value is not None:
            env[name] = value
    return env


def container_args(container: Obj, env: Mapping[str, str]) -> list[str]:
    """The arguments after the image's entrypoint (a command that is the image's own
    entrypoint, as JobSet's Deployment writes it, is the same)."""
    command = [expand(str(word), env) for word in container.get("command") or []]
    entrypoint = IMAGE_ENTRYPOINTS.get(str(container.get("image", "")), ())
    if command and (not entrypoint or tuple(command[:len(entrypoint)]) != entrypoint):
        raise PodSpecError("a command replacing the image's entrypoint is not supported")
    return command[len(entrypoint):] + [expand(str(arg), env)
                                        for arg in container.get("args") or []]


def container_ports(container: Obj) -> list[int]:
    return sorted({int(p["containerPort"]) for p in container.get("ports") or []})


@dataclass(frozen=True)
class Probe:
    """An HTTP readiness probe with the kubelet's defaults filled in."""

    port: int
    path: str = "/"
    scheme: str = "HTTP"
    headers: tuple[tuple[str, str], ...] = ()
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3


def readiness_probe(container: Obj) -> Probe | None:
    """The container's ``httpGet`` readiness probe (``None`` without one: then the container
    is ready once it runs)."""
    probe = container.get("readinessProbe")
    if not probe:
        return None
    action = probe.get("httpGet")
    if action is None:
        raise PodSpecError("only httpGet readiness probes are supported")
    path = str(action.get("path") or "/")
    return Probe(
        port=resolve_port(container, action.get("port")),
        path=path if path.startswith("/") else "/" + path,
        scheme=str(action.get("scheme") or "HTTP"),
        headers=tuple((str(h["name"]), str(h["value"])) for h in action.get("httpHeaders") or []),
        initial_delay=float(probe.get("initialDelaySeconds") or 0),
        period=float(probe.get("periodSeconds") or 10),
        timeout=float(probe.get("timeoutSeconds") or 1),
        success_threshold=int(probe.get("successThreshold") or 1),
        failure_threshold=int(probe.get("failureThreshold") or 3))


def resolve_port(container: Obj, port: Any) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return int(port)
    for item in container.get("ports") or []:
        if item.get("name") == port:
            return int(item["containerPort"])
    raise PodSpecError(f"the container has no port named {port!r}")


def backoff(restarts: int) -> float:
    """Seconds before the next start after ``restarts`` exits (CrashLoopBackOff)."""
    if restarts <= 0:
        return 0.0
    return float(min(BACKOFF_MAX, BACKOFF_BASE * 2 ** (restarts - 1)))


@dataclass(frozen=True)
class ContainerState:
    """What the kubelet knows about the one container of a local pod."""

    started_at: str | None  # when the current run started; None while it waits to restart
    ready: bool
    restarts: int
    last_exit: int | None = None
    last_finished_at: str | None = None


def pod_status(pod: Obj, state: ContainerState, *, pod_ip: str, host_ip: str,
               start_time: str, now: str) -> Obj:
    """The ``status`` the kubelet reports for a local pod (a strategic-merge patch body:
    conditions merge by type, so the scheduler's ``PodScheduled`` stays)."""
    container = ((pod.get("spec") or {}).get("containers") or [{}])[0]
    ready = "True" if state.ready else "False"
    previous = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}

    def condition(kind: str, status: str) -> Obj:
        old = previous.get(kind) or {}
        since = old.get("lastTransitionTime") if old.get("status") == status else None
        return {"type": kind, "status": status, "lastTransitionTime": since or now}

    running = state.started_at is not None
    current: Obj = ({"running": {"startedAt": state.started_at}} if running else
                    {"waiting": {"reason": "CrashLoopBackOff",
                                 "message": f"back-off restarting failed container "
                                            f"{container.get('name')}"}})
    status_of_container: Obj = {
        "name": container.get("name"), "image": container.get("image"),
        "imageID": "", "containerID": "", "ready": state.ready, "started": running,
        "restartCount": state.restarts, "state": current, "lastState": {}}
    if state.last_exit is not None:
        status_of_container["lastState"] = {"terminated": {
            "exitCode": state.last_exit, "reason": "Completed" if state.last_exit == 0
            else "Error", "finishedAt": state.last_finished_at or now}}
    return {
        "phase": "Running", "podIP": pod_ip, "podIPs": [{"ip": pod_ip}], "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}], "startTime": start_time,
        "conditions": [condition("Initialized", "True"), condition("ContainersReady", ready),
                       condition("Ready", ready)],
        "containerStatuses": [status_of_container],
    }
