"""The whole product on one machine: a local cluster, our CRDs and RBAC, the three functions
under gunicorn, and the event path in front of them.

The event path is, by default, the real one (``broker="knative"``): Knative Eventing's own
controllers, webhook, ApiServerSource and PingSource adapters, multi-tenant channel-based
Broker and in-memory channel, run as local pods (:mod:`devstack.knative_stack`), fed our
``eventing/`` manifests unchanged. ``broker="emulated"`` keeps the earlier stand-in: the
ApiServerSource adapter run with a configuration we derive, and the Broker, Triggers and
PingSource emulated by :class:`~devstack.broker.Router`; the benchmarks use it, to
measure the functions rather than the in-memory channel.

Either way each function runs with a token of the ServiceAccount its Knative Service in
``config/serving/`` names, so a missing RBAC rule fails here as it would in a cluster.
And the functions take only the Broker's deliveries (:mod:`functions.runtime.delivery_auth`;
``delivery_auth=False`` turns it off): the real Eventing runs with ``authentication-oidc``;
the router sends tokens of its own ServiceAccount, :data:`BROKER_ACCOUNT`, which the functions
are told to accept.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from devstack import controllers, knative
from devstack.activator import Activation, Activator, trigger_filters
from devstack.broker import Router
from devstack.cluster.manifests import apply_objects, load_documents
from devstack.cluster.ports import free_port
from devstack.cluster.runner import Component, LocalCluster, stop_process_group
from devstack.faults import PLAN_VARIABLE
from devstack.identities import (
    BROKER_ACCOUNT,
    FUNCTIONS,
    SERVED,
    FunctionIdentity,
    delivery_env,
    function_identities,
)
from devstack.knative_stack import KnativeEventing, cron_every
from devstack.podhost import POD_HOST_CONTROLLERS, PodHost
from devstack.readiness import wait_ready
from devstack.recording import JsonlWriter
from devstack.sandbox import sandbox_available
from devstack.tokens import TokenSource, service_account_token, token_kubeconfig
from functions.core.delivery_auth import subject_of
from functions.kube.client import KubeClient
from functions.runtime.eventing import (
    adapter_environment,
    load_manifests,
    source_filter_patches,
    with_source_filters,
)

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[3]
Broker = Literal["knative", "emulated"]

__all__ = ["FUNCTIONS", "DevStack", "FunctionIdentity", "function_identities",
           "service_account_token", "token_kubeconfig"]


@dataclass
class DevStack:
    """Start with :meth:`start`, stop with :meth:`stop`.

    :param broker: ``"knative"`` (the real event path) or ``"emulated"`` (the router).
    :param resync_interval: ``None`` resyncs on the schedule of ``eventing/pingsource.yaml``;
        ``0`` not at all; seconds override that schedule.
    :param record: append every event the Broker accepted to this JSONL file.
    """

    bin_dir: Path
    eventing_dir: Path = REPO / "eventing"
    config_dir: Path = REPO / "config"
    trainer_manifests: Path | None = None
    resync_interval: float | None = None
    record: Path | None = None
    as_service_accounts: bool = True
    cluster: LocalCluster | None = None
    # Processes per function, as Knative would scale a Service out: deliveries are spread
    # over them.
    replicas: int = 1
    # Extra environment of every function process.
    function_env: dict[str, str] = field(default_factory=dict)
    # Extra environment of every receive adapter of the emulated path (e.g. Knative's
    # K_OBSERVABILITY_CONFIG, to serve /debug/pprof on the adapter's PROFILING_PORT).
    adapter_env: dict[str, str] = field(default_factory=dict)
    broker: Broker = "knative"
    # Keep what the Broker accepted in memory (``knative.events()``), e.g. for tests.
    recording: bool = False
    # Run the upstream Trainer and JobSet controllers (:mod:`devstack.controllers`);
    # ``bin_dir`` must hold them (ensure-testbin's groups ``trainer`` and ``jobset``).
    upstream_controllers: bool = False
    # Add config/components/source-filters: the adapters drop the events no Trigger takes
    # (on the real path, with Knative's flag for it turned on).
    source_filters: bool = False
    # The receivers take only the Broker's deliveries: Knative's authentication-oidc on, the
    # router's tokens, the functions checking them (False: none of that).
    delivery_auth: bool = True
    router: Router | None = None
    knative: KnativeEventing | None = None
    # the network and kubelet of the pods run here (``knative`` on the real event path)
    pods: PodHost | None = None
    processes: list[Component] = field(default_factory=list)
    function_urls: dict[str, str] = field(default_factory=dict)
    replica_urls: dict[str, list[str]] = field(default_factory=dict)
    # seconds each start phase took (cluster, install, functions, eventing ready)
    timings: dict[str, float] = field(default_factory=dict)
    # Each stage's start and end, in order, as they are logged.
    stages: list[tuple[str, str]] = field(default_factory=list)
    # how each replica was started (identity, kubeconfig, replica, port), to start it again
    _launches: dict[str, list[tuple[FunctionIdentity, Path, int, int]]] = field(
        default_factory=dict)
    _writer: JsonlWriter | None = None
    _activator: Activator | None = None

    def start(self) -> DevStack:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        started = time.monotonic()
        runs_pods = self.broker == "knative" or self.upstream_controllers
        if runs_pods:
            reason = sandbox_available()
            if reason:
                raise RuntimeError(reason)
            if self.resync_interval:
                cron_every(self.resync_interval)  # refused before anything starts
        if self.cluster is None:
            self.cluster = LocalCluster(self.bin_dir)
        # else: a cluster given unstarted, configured by the caller (nodes, audit log)
        if runs_pods:
            self.cluster.extra_controllers = POD_HOST_CONTROLLERS
            self.cluster.egress_socket = PodHost.proxy_socket(self.cluster)
            self.cluster.kwok_local_images = controllers.local_images(self.bin_dir)
        self._stage_starts("cluster", "the local control plane (etcd, kube-apiserver, "
                                      "controller-manager, scheduler, kwok)")
        self.cluster.start()
        self._phase("cluster", started)
        kube = self.cluster.client()
        self._writer = JsonlWriter(self.record) if self.record else None
        proxy_port = free_port()  # picked when it is about to be bound
        self._stage_starts("install", "the CRDs, RBAC and event path"
                           + (", Knative Eventing" if self.broker == "knative" else ""))
        if self.broker == "knative":
            self.knative = KnativeEventing(self.cluster, self.bin_dir, proxy_port,
                                           record=self._writer, recording=self.recording,
                                           source_filters=self._source_filters(),
                                           oidc=self.delivery_auth)
            self.knative.start_network()
            self.knative.install(kube)
            self.pods = self.knative
        elif self.upstream_controllers:
            self.pods = PodHost(self.cluster, self.bin_dir, proxy_port)
            self.pods.start_network()
            self.pods.start_kubelet(kube)
        self._install(kube)
        self._phase("install", started)
        self._stage_starts("ready", "the functions and the "
                           + ("real Knative data plane" if self.broker == "knative"
                              else "emulated Broker"))
        served = SERVED if self.broker == "knative" else FUNCTIONS
        identities = list(function_identities(self.config_dir / "serving", served))
        for identity in identities:
            self._launch(kube, identity)
        if self.broker == "knative":
            self._start_knative_path(kube, identities)
        else:
            self._start_emulated_path(kube)
        self._phase("ready", started)

    def _stage_starts(self, name: str, what: str) -> None:
        """Say what the next stage starts (a cold stack takes a minute: the user sees it go)."""
        self.stages.append((name, "started"))
        log.info("dev stack: %s: starting %s", name, what)

    def _phase(self, name: str, started: float) -> None:
        self.timings[name] = round(time.monotonic() - started, 2)
        self.stages.append((name, "done"))
        log.info("dev stack: %s: done, %.1f s since the start", name, self.timings[name])

    def _launch(self, kube: KubeClient, identity: FunctionIdentity) -> None:
        kubeconfig = self._kubeconfig_for(kube, identity.namespace, identity.service_account)
        replicas = self.replicas if identity.function in FUNCTIONS else 1
        launches = [(identity, kubeconfig, replica, free_port()) for replica in range(replicas)]
        self._launches[identity.function] = launches
        urls = [self._start_function(*launch) for launch in launches]
        self.function_urls[identity.function] = urls[0]
        self.replica_urls[identity.function] = urls

    def _start_knative_path(self, kube: KubeClient, identities: list[FunctionIdentity]) -> None:
        assert self.knative is not None
        for identity in identities:
            self.knative.route(identity.service, identity.namespace,
                               self.replica_urls[identity.function])
        self._wait_functions()
        services = [i.manifest for i in identities]
        for obj in services:
            kube.apply(obj, "odh-training-install")
            knative.publish_service(kube, obj, ready=True)
        self.knative.wait_webhooks(kube)
        refs = self.knative.apply_eventing(kube, self.eventing_dir, self.resync_interval)
        refs += knative.refs_of(services)
        knative.wait_until(lambda: knative.not_ready(kube, refs), 120,
                           "the event path is not Ready")

    def _start_emulated_path(self, kube: KubeClient) -> None:
        manifests = load_manifests(self.eventing_dir)
        by_service = {i.service: i for i in function_identities(self.config_dir / "serving")}
        subscribers: dict[str, list[str]] = {}
        for trigger in manifests.triggers:
            ref = ((trigger.get("spec") or {}).get("subscriber") or {}).get("ref") or {}
            identity = by_service.get(str(ref.get("name", "")))
            if identity is not None:
                subscribers[identity.service] = self.replica_urls[identity.function]
        credentials = None
        if self.delivery_auth:
            credentials = TokenSource.of_account(kube, self._broker_namespace(), BROKER_ACCOUNT)
        self.router = Router(self.eventing_dir, subscribers,
                             resync_interval=self.resync_interval, record=self._writer,
                             credentials=credentials).start()
        for source in with_source_filters(manifests.apiserver_sources, self._source_filters()):
            self._start_adapter(kube, source, self.router.url)
        self._wait_functions()

    def _source_filters(self) -> list[dict[str, Any]]:
        if not self.source_filters:
            return []
        return source_filter_patches(self.config_dir / "components" / "source-filters")

    def _wait_functions(self, timeout: float = 120.0) -> None:
        """Every function process answers its readiness probe; one that exits or stays
        unready is named with the end of its log."""
        for component in self.processes:
            if component.name.startswith("function-"):
                port = component.argv[component.argv.index("--port") + 1]
                wait_ready(component, f"http://127.0.0.1:{port}/health/readiness", timeout)

    def _install(self, kube: KubeClient) -> None:
        """Our CRDs (validation is CEL inside them), the CRDs the Trainer depends on (JobSet, and
        PodMonitor which the upstream overlay ships), the namespaces the manifests name, and
        the RBAC of every identity. With the upstream controllers, JobSet's whole install."""
        paths = [self.config_dir / "crd", self.bin_dir / "crds" / "prometheus-operator"]
        if self.upstream_controllers:
            controllers.install_jobset(kube, self.bin_dir)
        else:
            paths.append(self.bin_dir / "crds" / "jobset")
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

    def add_event_sources(self, directory: Path) -> None:
        """An optional event-source component (e.g. ``config/components/trainjobs``) added to
        the running emulated path: its RBAC applied and an adapter started for each of its
        ApiServerSources. On the real path, ``kubectl apply -k`` it as a user would: Knative's
        controller starts the adapters."""
        if self.broker != "emulated" or self.router is None or self.cluster is None:
            raise RuntimeError("only the emulated event path starts adapters itself")
        kube = self.cluster.client()
        objects = load_documents([directory])
        apply_objects(kube, [o for o in objects if o.get("kind") != "ApiServerSource"])
        for source in objects:
            if source.get("kind") == "ApiServerSource":
                self._start_adapter(kube, source, self.router.url)

    def stop_function(self, function: str) -> None:
        """Stop every replica of ``function`` (as Knative scales a Service to zero); events
        for it fail and are retried until :meth:`start_function`."""
        for component in [c for c in self.processes if _runs(c, function)]:
            if component.process is not None:
                stop_process_group(component.process.pid)
            self.processes.remove(component)

    def start_function(self, function: str) -> None:
        """Start the replicas of ``function`` again, on the ports the event path knows;
        returns once they are spawned (not ready)."""
        for launch in self._launches[function]:
            self._start_function(*launch)

    def scale_to_zero(self, function: str) -> None:
        """Stop ``function`` as Knative scales a Service to zero; it starts again, as from
        zero, at the first event its Trigger takes (:mod:`devstack.activator`). Needs the real
        event path with ``recording`` on."""
        if self.knative is None or self.knative.recorder is None:
            raise RuntimeError("scale to zero needs the real event path with recording on")
        if self._activator is None:
            filters = trigger_filters(self.eventing_dir, self.config_dir / "serving")
            self._activator = Activator(self.knative.events, filters,
                                        self.start_function, self.stop_function)
        self._activator.scale_to_zero(function)

    def activations(self) -> list[Activation]:
        """The starts from zero so far, each with the event that caused it."""
        return list(self._activator.activations) if self._activator is not None else []

    def wake_up(self, function: str) -> None:
        """Start ``function`` now if :meth:`scale_to_zero` stopped it."""
        if self._activator is not None:
            self._activator.wake_up(function)

    def at_zero(self) -> set[str]:
        return self._activator.at_zero() if self._activator is not None else set()

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
        env.update(self._delivery_env(identity))
        if self.pods is not None:
            # In-cluster addresses (a namespace Broker's ingress, for the job lifecycle) are
            # reached through the cluster network's proxy, as pods behind a cluster-wide
            # proxy reach them; the API server on loopback stays direct.
            env["HTTP_PROXY"] = self.pods.proxy_url
            env["NO_PROXY"] = "127.0.0.1,localhost"
        env.update(self.function_env)
        # Served as the container serves it, or, when a chaos test asks for API faults,
        # through the same server with a client that injects them.
        entry = (["devstack.faulty_serve"] if env.get(PLAN_VARIABLE)
                 else ["functions", "serve"])
        component = Component(
            name, [sys.executable, "-m", *entry, identity.function,
                   "--host", "127.0.0.1", "--port", str(port)],
            self.cluster.logs / f"{name}.log", env=env)
        component.start()
        self.processes.append(component)
        return f"http://127.0.0.1:{port}/"

    def _delivery_env(self, identity: FunctionIdentity) -> dict[str, str]:
        senders = ((subject_of(self._broker_namespace(), BROKER_ACCOUNT),)
                   if self.broker == "emulated" else ())
        return delivery_env(identity, enabled=self.delivery_auth, senders=senders)

    def _broker_namespace(self) -> str:
        brokers = load_manifests(self.eventing_dir).brokers
        return str((brokers[0]["metadata"] if brokers else {}).get("namespace") or "default")

    def _start_adapter(self, kube: KubeClient, source: dict[str, Any], sink: str) -> None:
        """The emulated path's adapter: the receive adapter run with a configuration derived
        here from the ApiServerSource (the real path runs the controller's Deployment)."""
        assert self.cluster is not None
        meta, spec = source["metadata"], source.get("spec") or {}
        kubeconfig = self._kubeconfig_for(kube, meta.get("namespace") or "default",
                                          spec.get("serviceAccountName"))
        env = dict(os.environ)
        env.update(adapter_environment(source, sink))
        env.update({"KUBECONFIG": str(kubeconfig), "SYSTEM_NAMESPACE": "knative-eventing",
                    "METRICS_DOMAIN": "knative.dev/eventing", "K_SINK_TIMEOUT": "30",
                    "PROFILING_PORT": str(free_port())})
        env.update(self.adapter_env)
        component = Component(f"adapter-{meta['name']}",
                              [str(self.bin_dir / "apiserver_receive_adapter"),
                               f"--kubeconfig={kubeconfig}"],
                              self.cluster.logs / f"adapter-{meta['name']}.log", env=env)
        component.start()
        self.processes.append(component)

    def check_processes(self) -> None:
        """Raise if a function, an adapter or the cluster network has died."""
        for component in self.processes:
            code = component.exited()
            if code is not None:
                raise RuntimeError(f"{component.name} exited with code {code}; log: "
                                   f"{component.log}\n{component.tail()}")
        if self.pods is not None:
            self.pods.check()

    def stop(self) -> None:
        """Stop in dependency order: the event path, functions, then the cluster."""
        if self._activator is not None:
            self._activator.close()
        adapters = [c for c in self.processes if c.name.startswith("adapter-")]
        for component in adapters:
            if component.process is not None:
                stop_process_group(component.process.pid)
        if self.router is not None:
            self.router.stop()
            self.router = None
        if self.pods is not None:
            self.pods.stop()
            self.pods = self.knative = None
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
