"""The whole product on one machine: a local cluster, our CRDs and RBAC, the three functions
under gunicorn, the real ApiServerSource receive adapter and a Broker-like router.

The same manifests a cluster applies drive it: the Triggers, Broker and PingSource in
``eventing/`` configure the router, each ApiServerSource there configures one adapter process,
and each function runs with a token of the ServiceAccount its Knative Service in
``config/serving/`` names, so a missing RBAC rule fails here as it would in a cluster.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from functions.cluster.manifests import apply_objects, load_documents
from functions.cluster.runner import Component, LocalCluster, free_port, stop_process_group
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.runtime.eventing import adapter_environment, load_manifests
from functions.runtime.recording import JsonlWriter
from functions.runtime.router import Router

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
FUNCTIONS = ("reconcile", "gc", "status")
TOKEN_SECONDS = 24 * 3600


@dataclass(frozen=True)
class FunctionIdentity:
    """Which function a Knative Service runs and as which ServiceAccount."""

    service: str
    function: str
    namespace: str
    service_account: str | None


def function_identities(serving_dir: Path) -> list[FunctionIdentity]:
    """Read ``config/serving``: each Knative Service's function (the ``serve`` argument) and
    ServiceAccount."""
    found: list[FunctionIdentity] = []
    for obj in load_documents([serving_dir]) if serving_dir.exists() else []:
        if obj.get("kind") != "Service" or not str(obj.get("apiVersion", "")).startswith(
                "serving.knative.dev/"):
            continue
        pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        words = [str(w) for c in pod.get("containers") or []
                 for w in (c.get("command") or []) + (c.get("args") or [])]
        env = {e.get("name"): e.get("value") for c in pod.get("containers") or []
               for e in c.get("env") or []}
        function = next((words[i + 1] for i, w in enumerate(words[:-1]) if w == "serve"),
                        env.get("FUNCTION"))
        if function not in FUNCTIONS:
            continue
        meta = obj["metadata"]
        found.append(FunctionIdentity(meta["name"], str(function),
                                      meta.get("namespace") or "opendatahub",
                                      pod.get("serviceAccountName")))
    return found


def service_account_token(kube: KubeClient, namespace: str, name: str) -> str:
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": TOKEN_SECONDS}}
    path = resources.SERVICEACCOUNTS.path(namespace, name, "token")
    response = kube.call("create", "POST", path, body=body)
    if response.status >= 300:
        raise RuntimeError(f"TokenRequest for {namespace}/{name} failed: {response.status} "
                           f"{response.body[:300]!r}")
    return str(yaml.safe_load(response.body)["status"]["token"])


def token_kubeconfig(admin_kubeconfig: Path, token: str, out: Path) -> Path:
    """A copy of the admin kubeconfig that authenticates with ``token`` instead. Written to a
    new file renamed into place: the adapters of one identity share ``out``, and one that is
    starting must never read it half-written by the next."""
    config = yaml.safe_load(admin_kubeconfig.read_text())
    config["users"] = [{"name": "token", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "token"
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    with os.fdopen(fd, "w") as handle:  # mkstemp: 0600 from the start
        handle.write(yaml.safe_dump(config))
    os.replace(name, out)
    return out


@dataclass
class DevStack:
    """Start with :meth:`start`, stop with :meth:`stop`."""

    bin_dir: Path
    eventing_dir: Path = REPO / "eventing"
    config_dir: Path = REPO / "config"
    trainer_manifests: Path | None = None
    # seconds between resync ticks: None takes eventing/pingsource.yaml's schedule (as in a
    # cluster), 0 turns the ticker off
    resync_interval: float | None = None
    record: Path | None = None
    as_service_accounts: bool = True
    cluster: LocalCluster | None = None
    # Processes per function, as Knative would scale a Service out: the router spreads
    # deliveries over them.
    replicas: int = 1
    # Extra environment of every function process.
    function_env: dict[str, str] = field(default_factory=dict)
    router: Router | None = None
    processes: list[Component] = field(default_factory=list)
    function_urls: dict[str, str] = field(default_factory=dict)
    replica_urls: dict[str, list[str]] = field(default_factory=dict)
    # how each replica was started (identity, kubeconfig, replica, port), to start it again
    _launches: dict[str, list[tuple[FunctionIdentity, Path, int, int]]] = field(
        default_factory=dict)
    _writer: JsonlWriter | None = None

    def start(self) -> DevStack:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        if self.cluster is None:
            self.cluster = LocalCluster(self.bin_dir)
        # else: a cluster given unstarted, configured by the caller (nodes, audit log)
        self.cluster.start()
        kube = self.cluster.client()
        self._install(kube)
        manifests = load_manifests(self.eventing_dir)
        identities = {i.service: i for i in function_identities(self.config_dir / "serving")}
        subscribers: dict[str, list[str]] = {}
        for trigger in manifests.triggers:
            subscriber = ((trigger.get("spec") or {}).get("subscriber") or {}).get("ref") or {}
            service = str(subscriber.get("name", ""))
            identity = identities.get(service) or FunctionIdentity(
                service, service.rsplit("-", 1)[-1], "opendatahub", None)
            if identity.function not in FUNCTIONS or service in subscribers:
                continue
            kubeconfig = self._kubeconfig_for(kube, identity.namespace,
                                              identity.service_account)
            launches = [(identity, kubeconfig, replica, free_port())
                        for replica in range(self.replicas)]
            self._launches[identity.function] = launches
            urls = [self._start_function(*launch) for launch in launches]
            subscribers[service] = urls
            self.function_urls[identity.function] = urls[0]
            self.replica_urls[identity.function] = urls
        self._writer = JsonlWriter(self.record) if self.record else None
        self.router = Router(self.eventing_dir, subscribers,
                             resync_interval=self.resync_interval, record=self._writer).start()
        for source in manifests.apiserver_sources:
            self._start_adapter(kube, source, self.router.url)
        for urls in self.replica_urls.values():
            for url in urls:
                _wait_http(url + "health/readiness", 60)

    def _install(self, kube: KubeClient) -> None:
        """Our CRDs (validation is CEL inside them), the CRDs the Trainer depends on (JobSet, and
        PodMonitor which the upstream overlay ships), the namespaces the manifests name, and
        the RBAC of every identity."""
        paths = [self.config_dir / "crd", self.bin_dir / "crds" / "jobset",
                 self.bin_dir / "crds" / "prometheus-operator"]
        apply_objects(kube, load_documents([p for p in paths if p.exists()]))
        rbac = [p for p in (self.config_dir / "rbac", self.eventing_dir / "rbac.yaml")
                if p.exists()]
        objects = load_documents(rbac)
        namespaces = {str(o["metadata"].get("namespace")) for o in objects
                      if o["metadata"].get("namespace")} | {"opendatahub"}
        for name in sorted(namespaces):
            kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                       "odh-training-dev")
        apply_objects(kube, objects)

    def _kubeconfig_for(self, kube: KubeClient, namespace: str, account: str | None) -> Path:
        assert self.cluster is not None
        if not self.as_service_accounts or not account:
            return self.cluster.kubeconfig
        token = service_account_token(kube, namespace, account)
        return token_kubeconfig(self.cluster.kubeconfig, token,
                                self.cluster.root / f"{account}.kubeconfig")

    def stop_function(self, function: str) -> None:
        """Stop every replica of ``function`` (as Knative scales a Service to zero); events
        for it fail and are retried until :meth:`start_function`."""
        for component in [c for c in self.processes if _runs(c, function)]:
            if component.process is not None:
                stop_process_group(component.process.pid)
            self.processes.remove(component)

    def start_function(self, function: str) -> None:
        """Start the replicas of ``function`` again, on the ports the router knows; returns
        once they are spawned (not ready)."""
        for launch in self._launches[function]:
            self._start_function(*launch)

    def _start_function(self, identity: FunctionIdentity, kubeconfig: Path,
                        replica: int, port: int) -> str:
        assert self.cluster is not None
        name = f"function-{identity.function}" + (f"-{replica}" if replica else "")
        env = dict(os.environ)
        env.update({
            "KUBECONFIG": str(kubeconfig),
            "KUSTOMIZE_BIN": str(self.bin_dir / "kustomize"),
            "TRAINER_WORK_DIR": str(self.cluster.root / f"work-{name}"),
            "TRAINER_RUNTIMES_DIR": str(REPO / "manifests" / "runtimes"),
            "TRAINER_IMAGESTREAMS_DIR": str(REPO / "manifests" / "imagestreams"),
            "PYTHONUNBUFFERED": "1",
        })
        if self.trainer_manifests is not None:
            env["TRAINER_MANIFESTS_DIR"] = str(self.trainer_manifests)
        env.update(self.function_env)
        component = Component(
            name, [sys.executable, "-m", "functions", "serve", identity.function,
                   "--host", "127.0.0.1", "--port", str(port)],
            self.cluster.logs / f"{name}.log", env=env)
        component.start()
        self.processes.append(component)
        return f"http://127.0.0.1:{port}/"

    def _start_adapter(self, kube: KubeClient, source: dict[str, Any], sink: str) -> None:
        assert self.cluster is not None
        meta, spec = source["metadata"], source.get("spec") or {}
        kubeconfig = self._kubeconfig_for(kube, meta.get("namespace") or "default",
                                          spec.get("serviceAccountName"))
        env = dict(os.environ)
        env.update(adapter_environment(source, sink))
        env.update({"KUBECONFIG": str(kubeconfig), "SYSTEM_NAMESPACE": "knative-eventing",
                    "METRICS_DOMAIN": "knative.dev/eventing", "K_SINK_TIMEOUT": "30",
                    "PROFILING_PORT": str(free_port())})
        component = Component(f"adapter-{meta['name']}",
                              [str(self.bin_dir / "apiserver_receive_adapter"),
                               f"--kubeconfig={kubeconfig}"],
                              self.cluster.logs / f"adapter-{meta['name']}.log", env=env)
        component.start()
        self.processes.append(component)

    def check_processes(self) -> None:
        """Raise if a function or adapter process has died."""
        for component in self.processes:
            code = component.exited()
            if code is not None:
                raise RuntimeError(f"{component.name} exited with code {code}; log: "
                                   f"{component.log}\n{component.tail()}")

    def stop(self) -> None:
        """Stop in dependency order: adapters, router, functions, then the cluster."""
        adapters = [c for c in self.processes if c.name.startswith("adapter-")]
        for component in adapters:
            if component.process is not None:
                stop_process_group(component.process.pid)
        if self.router is not None:
            self.router.stop()
            self.router = None
        for component in reversed(self.processes):
            if component.process is not None and component not in adapters:
                stop_process_group(component.process.pid)
        self.processes.clear()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None


def _runs(component: Component, function: str) -> bool:
    name = component.name
    return name == f"function-{function}" or name.startswith(f"function-{function}-")


def _wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - local URL
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} not ready after {timeout}s")
        time.sleep(0.05)
