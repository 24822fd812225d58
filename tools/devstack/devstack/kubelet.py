"""A kubelet for the pods whose image is a command built here (Knative Eventing's, the
upstream Trainer and JobSet controllers): it runs them as local processes, each in a network
namespace of its own, and reports their status.

kwok plays the kubelet of every other pod (they never run). These pods must really run: the
Knative controllers, webhook and data plane that ``config/`` and ``eventing/`` rely on, the
receive adapter Deployments the ApiServerSource controller creates, and the controllers (and
admission webhooks) of the Trainer's upstream Deployment and of JobSet. For each pod bound to
a node (the scheduler places them on kwok's nodes; kwok is told to leave them alone), this
does what a kubelet does, and only that:

* the container's environment from the pod spec exactly (:func:`container_env`), plus the
  pod's ServiceAccount token (a kubeconfig stands in for the in-cluster config files) and
  ``HTTP_PROXY`` (the pod network's SOCKS5 proxy: :mod:`devstack.socks`);
* its own network namespace (:mod:`devstack.podnet`), so ports never collide;
* for a container that mounts volumes, a root directory of its own
  (:mod:`devstack.podroot`) with its ``configMap``, ``secret`` and ``emptyDir`` volumes
  (whole-volume mounts kept current) and the ServiceAccount volume the API server adds, which
  it reads as in a cluster (``KUBERNETES_SERVICE_HOST``); any other container gets that
  token in a kubeconfig;
* status: ``Running`` with a pod IP, ``Ready`` only while the readiness probe passes,
  restarts with the crash-loop back-off, and the process stopped (SIGTERM, then SIGKILL after
  the grace period) once the pod is deleted, e.g. by a rollout after the controller changed
  its Deployment.

Liveness probes, resource limits, other volume types and security contexts are not
applied.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from devstack.cluster.runner import stop_process_group
from devstack.core import podspec
from devstack.core.volumes import VolumeError, needs_root
from devstack.handoff import SUFFIX as HANDOFF_SUFFIX
from devstack.localpod import LocalPod, PodNetwork, now_iso
from devstack.podroot import PodRoot, lookup_bytes
from devstack.sandbox import SANDBOX, probe_once
from devstack.tokens import service_account_token, token_kubeconfig
from functions.core.errors import TemporaryError
from functions.kube import resources
from functions.kube.client import ApiError, KubeClient

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[3]
STRATEGIC = "application/strategic-merge-patch+json"
FIELD_MANAGER = "odh-local-kubelet"
MAX_GRACE_SECONDS = 10.0
HOST_IP = "10.240.0.1"
# how often the whole-volume mounts are written again (a kubelet: about a minute)
REFRESH_SECONDS = 2.0


class LocalKubelet:
    """Start with :meth:`start`; :meth:`stop` ends every pod process."""

    def __init__(self, kube: KubeClient, bin_dir: Path, admin_kubeconfig: Path,
                 network: PodNetwork, logs: Path) -> None:
        self.kube = kube
        self.bin_dir = bin_dir
        self.admin_kubeconfig = admin_kubeconfig
        self.network = network
        self.logs = logs
        self.pods: dict[str, LocalPod] = {}
        self._events: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._next_ip = 10
        self._threads: list[threading.Thread] = []
        self._held: list[tuple[str, dict[str, Any]]] | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> LocalKubelet:
        for target, name in ((self._watch, "kubelet-watch"), (self._sync, "kubelet-sync")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            pods = list(self.pods.values())
        for pod in pods:
            self._kill(pod, grace=2.0)

    @contextlib.contextmanager
    def holding_new_pods(self) -> Iterator[None]:
        """Start no new pod until the block ends, as a node slow to start containers would;
        pods already running go on, and deleted ones are still stopped."""
        with self._lock:
            self._held = []
        try:
            yield
        finally:
            with self._lock:
                held, self._held = self._held or [], None
            for item in held:
                self._events.put(item)

    def snapshot(self) -> list[LocalPod]:
        with self._lock:
            return list(self.pods.values())

    # -- watching pods --------------------------------------------------------------------------

    def _watch(self) -> None:
        version: str | None = None
        while not self._stopping.is_set():
            try:
                if version is None:
                    version = self._list()
                for event in self.kube.watch(resources.PODS, resource_version=version,
                                             timeout_seconds=120):
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        version = None
                        break
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        self._events.put((str(event["type"]), obj))
                    if self._stopping.is_set():
                        return
            except ApiError as exc:
                log.info("kubelet: pod watch: %s", exc)
                version = None
                self._stopping.wait(0.5)
            except TemporaryError as exc:
                log.info("kubelet: pod watch: %s", exc)
                self._stopping.wait(0.5)

    def _list(self) -> str:
        version = ""
        seen: set[str] = set()
        for page in self.kube.list_pages(resources.PODS):
            version = str((page.get("metadata") or {}).get("resourceVersion") or "")
            for pod in page.get("items") or []:
                seen.add(str(pod["metadata"]["uid"]))
                self._events.put(("ADDED", pod))
        with self._lock:
            gone = [p.pod for uid, p in self.pods.items() if uid not in seen]
        for pod in gone:
            self._events.put(("DELETED", pod))
        return version

    # -- the sync loop --------------------------------------------------------------------------

    def _sync(self) -> None:
        while not self._stopping.is_set():
            try:
                kind, pod = self._events.get(timeout=0.1)
            except queue.Empty:
                pass
            else:
                self._observe(kind, pod)
                continue
            for local in self.snapshot():
                try:
                    self._tend(local)
                except Exception:
                    log.exception("kubelet: %s", local.key)

    def _observe(self, kind: str, pod: dict[str, Any]) -> None:
        uid = str(pod["metadata"]["uid"])
        with self._lock:
            local = self.pods.get(uid)
        if kind == "DELETED" or (pod["metadata"].get("deletionTimestamp") and local):
            with self._lock:
                if self._held is not None:  # a held pod deleted meanwhile never starts
                    self._held = [h for h in self._held if h[1]["metadata"]["uid"] != uid]
            if local is not None:
                self._kill(local, grace=_grace(pod))
                with self._lock:
                    self.pods.pop(uid, None)
            return
        if local is not None:
            local.pod = pod
            return
        with self._lock:
            if self._held is not None:
                self._held.append((kind, pod))
                return
        binary = podspec.binary_for(pod)
        spec = pod.get("spec") or {}
        if binary is not None and not (self.bin_dir / binary).exists():
            binary = None  # not built here: kwok runs it (``kwok_local_images``)
        if (binary is None or not spec.get("nodeName") or pod["metadata"].get("deletionTimestamp")
                or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")):
            return
        meta = pod["metadata"]
        self._next_ip += 1
        local = LocalPod(pod=pod, binary=binary, start_time=now_iso(),
                         ip=f"10.244.{self._next_ip // 250}.{self._next_ip % 250 + 1}",
                         log=self.logs / f"pod-{meta['namespace']}-{meta['name']}.log")
        with self._lock:
            self.pods[uid] = local
        self._start(local)

    def _tend(self, local: LocalPod) -> None:
        if local.stopping:
            return
        process = local.process
        if process is not None and process.poll() is not None:
            local.last_exit = process.returncode
            local.last_finished_at = now_iso()
            local.process, local.started_at, local.ready = None, None, False
            local.restarts += 1
            local.next_start = time.monotonic() + podspec.backoff(local.restarts)
            log.warning("kubelet: %s exited with %s (restart %d in %.0fs); log: %s",
                        local.key, local.last_exit, local.restarts,
                        podspec.backoff(local.restarts), local.log)
        if local.process is None and time.monotonic() >= local.next_start:
            self._start(local)
        if local.process is not None and time.monotonic() >= local.next_probe:
            self._probe(local)
        if local.root is not None and time.monotonic() >= local.next_refresh:
            local.next_refresh = time.monotonic() + REFRESH_SECONDS
            local.root.pod = local.pod
            try:
                local.root.refresh()
            except VolumeError as exc:
                log.info("kubelet: volumes of %s: %s", local.key, exc)
        self._report(local)

    # -- containers -----------------------------------------------------------------------------

    def _start(self, local: LocalPod) -> None:
        pod = {**local.pod, "status": {**(local.pod.get("status") or {}), "podIP": local.ip,
                                       "hostIP": HOST_IP}}
        container = pod["spec"]["containers"][0]
        try:
            env = podspec.container_env(pod, container, self._data)
            args = podspec.container_args(container, env)
            probe = podspec.readiness_probe(container)
        except podspec.PodSpecError as exc:
            log.warning("kubelet: %s: %s", local.key, exc)
            local.notes.append(str(exc))
            local.next_start = time.monotonic() + podspec.BACKOFF_BASE
            return
        directory = self.network.pods_dir / local.uid
        directory.mkdir(parents=True, exist_ok=True)
        meta, spec = pod["metadata"], pod["spec"]
        token = service_account_token(self.kube, meta["namespace"],
                                      spec.get("serviceAccountName") or "default", bound_pod=pod)
        proxy = f"socks5://127.0.0.1:{self.network.proxy_port}"
        env.update({"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "NO_PROXY": "127.0.0.1,localhost"})
        argv = [str(self.bin_dir / local.binary), *args]
        if needs_root(container):
            try:
                local.root = PodRoot.prepared(directory / "root", pod, self.bin_dir / local.binary,
                                              lookup_bytes(self.kube), token)
            except VolumeError as exc:  # e.g. its Secret is not there yet
                log.info("kubelet: %s: %s", local.key, exc)
                local.next_start = time.monotonic() + 1.0
                return
            argv[0] = local.root.entrypoint
            env.update({"KUBERNETES_SERVICE_HOST": "127.0.0.1",
                        "KUBERNETES_SERVICE_PORT": str(self.network.api_port)})
        else:
            kubeconfig = token_kubeconfig(self.admin_kubeconfig, token,
                                          directory / "kubeconfig")
            env["KUBECONFIG"] = str(kubeconfig)
        ports = set(podspec.container_ports(container)) | ({probe.port} if probe else set())
        config: dict[str, Any] = {
            "argv": argv, "env": env,
            "outbound": [{"port": self.network.api_port, "name": "api",
                          "handoff": str(self.network.handoff_sock)},
                         {"port": self.network.proxy_port, "name": "socks",
                          "handoff": str(self.network.handoff_sock)}],
            "inbound": [{"unix": str(directory / str(p)), "port": p,
                         "handoff": str(directory / f"{p}{HANDOFF_SUFFIX}")}
                        for p in sorted(ports)],
        }
        if local.root is not None:
            config["root"] = str(local.root.directory)
        config_file = directory / "config.json"
        config_file.write_text(json.dumps(config))
        config_file.chmod(0o600)
        host_env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "HOME")}
        with local.log.open("ab") as out:
            local.process = subprocess.Popen(
                [*SANDBOX, sys.executable, "-m", "devstack.podnet", str(config_file)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=host_env, cwd=REPO)
        local.started_at = now_iso()
        local.next_probe = time.monotonic() + (probe.initial_delay if probe else 0.0)
        local.successes = local.failures = 0
        local.ready = probe is None

    def _data(self, kind: str, namespace: str, name: str) -> Mapping[str, str] | None:
        res = resources.CONFIGMAPS if kind == "ConfigMap" else resources.SECRETS
        obj = self.kube.get(res, name, namespace)
        if obj is None:
            return None
        if kind == "Secret":
            return {k: base64.b64decode(v).decode("utf-8", "replace")
                    for k, v in (obj.get("data") or {}).items()}
        return {k: str(v) for k, v in (obj.get("data") or {}).items()}

    def _probe(self, local: LocalPod) -> None:
        container = local.pod["spec"]["containers"][0]
        try:
            probe = podspec.readiness_probe(container)
        except podspec.PodSpecError:
            probe = None
        if probe is None:
            local.ready = True
            local.next_probe = float("inf")
            return
        local.next_probe = time.monotonic() + probe.period
        ok = probe_once(self.network.pods_dir / local.uid / str(probe.port), probe, local.ip)
        if ok:
            local.successes, local.failures = local.successes + 1, 0
            if local.successes >= probe.success_threshold:
                local.ready = True
        else:
            local.successes, local.failures = 0, local.failures + 1
            if local.failures >= probe.failure_threshold or not local.ready:
                local.ready = False
            # until first ready, probe again soon rather than a whole period later
            if not local.ready:
                local.next_probe = time.monotonic() + min(probe.period, 1.0)

    def _report(self, local: LocalPod) -> None:
        running = local.process is not None
        current = (running, local.ready, local.restarts)
        if current == local.reported:
            return
        state = podspec.ContainerState(
            started_at=local.started_at, ready=local.ready, restarts=local.restarts,
            last_exit=local.last_exit, last_finished_at=local.last_finished_at)
        status = podspec.pod_status(local.pod, state, pod_ip=local.ip, host_ip=HOST_IP,
                                    start_time=local.start_time, now=now_iso())
        meta = local.pod["metadata"]
        try:
            self.kube.patch(resources.PODS, meta["name"], {"status": status},
                            meta["namespace"], content_type=STRATEGIC, subresource="status",
                            field_manager=FIELD_MANAGER)
        except ApiError as exc:
            if exc.status != 404:
                log.info("kubelet: status of %s: %s", local.key, exc)
            return
        local.reported = current

    def _kill(self, local: LocalPod, grace: float) -> None:
        local.stopping = True
        process = local.process
        if process is not None and process.poll() is None:
            threading.Thread(target=stop_process_group, args=(process.pid, grace),
                             daemon=True, name=f"stop-{local.key}").start()


def _grace(pod: dict[str, Any]) -> float:
    seconds = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return min(MAX_GRACE_SECONDS, float(30 if seconds is None else seconds))
