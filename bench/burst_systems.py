"""The systems the burst benchmark compares, each started on a fresh audited cluster:

* ``limit`` — no controller: the driver itself creates, per job, the job, its pods and
  services and its ``Created`` status (as a controller would), at a given concurrency;
* ``go-default`` / ``go-tuned`` — the upstream Go training-operator (``bench.burst_go``) with
  the upstream CRDs;
* ``ours`` — the product's dev stack (``devstack.stack.DevStack``: the functions under
  gunicorn with their own ServiceAccounts, the real ApiServerSource adapters, the Broker
  emulation router) with our CRDs; ``ours-x2`` and ``ours-x4`` run each function as 2 or 4
  processes (replicas), the router spreading deliveries over them;
* ``ours-knative`` — the same stack on the real Knative Eventing data plane (``make dev``'s
  default): the ApiServerSource adapters, the mt-channel-based Broker (ingress, filter) and the
  in-memory channel dispatcher run as their pods say, their CPU counted as the event path's
  together with Knative's controllers and the local cluster network (the process that plays
  the CNI and the Services' routing between the pods' network namespaces).

Each :class:`Started` says which processes and API identities belong to the controller and
which to its event path, so one measuring loop (``bench.burst``) serves every system.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import burst_functions, burst_proc, burst_workload
from bench.burst_go import SETTINGS, GoOperator, install_crds
from bench.burst_go import USER as GO_USER
from bench.burst_workload import nodes
from bench.jobs import REPO
from devstack.cluster.manifests import apply_objects, load_documents
from devstack.cluster.runner import LocalCluster
from devstack.podhost import POD_HOST_CONTROLLERS
from functions.kube import resources

if TYPE_CHECKING:
    from devstack.stack import DevStack

SYSTEMS = ("limit", "go-default", "go-tuned", "ours", "ours-x2", "ours-x4", "ours-knative")
REPLICAS = {"ours": 1, "ours-x2": 2, "ours-x4": 4, "ours-knative": 1}
KNATIVE = ("ours-knative",)
NAMESPACE_OF_FUNCTIONS = "opendatahub"
FUNCTION_ACCOUNTS = ("odh-training-reconcile", "odh-training-gc", "odh-training-status")
ADAPTER_ACCOUNT = "odh-training-events"
LIMIT_USER = "bench-limit"  # the create loop's "controller" part (children and status)


def service_account(name: str) -> str:
    return f"system:serviceaccount:{NAMESPACE_OF_FUNCTIONS}:{name}"


@dataclass
class Started:
    """A running system: its cluster, whose processes and identities to measure, how to stop."""

    cluster: LocalCluster
    controller_users: tuple[str, ...]
    controller_pids: list[int] = field(default_factory=list)
    event_path_users: tuple[str, ...] = ()
    event_path_pids: list[int] = field(default_factory=list)
    # the event path's parts whose CPU is reported one by one: process trees, and processes
    # counted without their children
    event_path_parts: dict[str, list[int]] = field(default_factory=dict)
    event_path_own_parts: dict[str, list[int]] = field(default_factory=dict)
    # threads of this process that belong to the system (the router of the dev stack)
    in_process_threads: Callable[[str], bool] | None = None
    stop: Callable[[], None] = lambda: None
    # what the event path did with the events (deliveries, retries, dead letters)
    delivery_counts: Callable[[], dict[str, int]] | None = None
    # what our functions did, from their metrics (bench.burst_functions), once the run is over
    function_figures: Callable[[], dict[str, float]] | None = None
    # waits, once the burst's namespace exists, until the system watches it
    watch_namespace: Callable[[str], None] = lambda namespace: None


def start(system: str, bin_dir: Path, *, adapter_env: dict[str, str] | None = None) -> Started:
    """A fresh cluster (audit log on, the burst nodes) with ``system`` running on it. Every
    system's cluster runs the same controllers, those a cluster serving the local Knative pods
    needs: the endpoints controller among them, which a real cluster runs too (Knative's
    controllers read v1 Endpoints), and which writes an Endpoints object for each Service of
    every job, whoever the controller. ``adapter_env`` is added to the environment of the
    emulated path's adapters."""
    cluster = LocalCluster(bin_dir, audit=True, nodes=nodes(),
                           extra_controllers=POD_HOST_CONTROLLERS)
    if system in REPLICAS:
        if system in KNATIVE:
            return _ours_knative(cluster, bin_dir)
        return _ours(cluster, bin_dir, REPLICAS[system], adapter_env or {})
    cluster.start()
    try:
        if system == "limit":
            apply_objects(cluster.client(), load_documents([REPO / "config" / "crd"]))
            return Started(cluster, (LIMIT_USER,), stop=cluster.stop)
        qps, burst, threads = SETTINGS[system]
        install_crds(cluster, bin_dir)
        operator = GoOperator(bin_dir / "training-operator", cluster, qps, burst,
                              threads).start()
    except BaseException:
        cluster.stop()
        raise

    def stop() -> None:
        operator.stop()
        cluster.stop()

    return Started(cluster, (GO_USER,), [operator.pid], stop=stop)


def _ours(cluster: LocalCluster, bin_dir: Path, replicas: int,
          adapter_env: dict[str, str]) -> Started:
    """The dev stack as it is, with the resync ticker off (the burst is event-driven)."""
    from devstack.stack import DevStack

    stack = DevStack(bin_dir, resync_interval=0, cluster=cluster, replicas=replicas,
                     broker="emulated", source_filters=True,
                     adapter_env=adapter_env).start()

    return Started(
        watch_namespace=lambda namespace: wait_event_path_live(cluster),
        cluster=cluster,
        controller_users=tuple(service_account(a) for a in FUNCTION_ACCOUNTS),
        controller_pids=_pids(stack, "function-"),
        event_path_users=(service_account(ADAPTER_ACCOUNT),),
        event_path_pids=_pids(stack, "adapter-"),
        in_process_threads=lambda name: (name.startswith("router-")
                                         or "process_request_thread" in name),
        stop=stack.stop, delivery_counts=lambda: _deliveries(stack),
        function_figures=lambda: _function_figures(stack))


CANARY_NAMESPACE = "burst-canary"


def wait_event_path_live(cluster: LocalCluster, timeout: float = 60.0) -> None:
    """Wait until a job changed now gets its status through the event path. The adapters
    start with the stack and list before they watch; a job created before an adapter's list
    is in that list, which sends nothing (a cluster's resync would find it; the burst runs
    without one). So the burst starts only once a canary (a suspended job of its own
    namespace, so it makes no pod) has been sent, delivered and reconciled: created, then
    touched every 2 s until then (a change made once the adapter watches is sent)."""
    kube = cluster.client()
    kube.create({"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": CANARY_NAMESPACE}}, res=resources.NAMESPACES)
    canary = burst_workload.job(0, CANARY_NAMESPACE)
    canary["metadata"]["name"] = "canary"
    canary["spec"]["runPolicy"] = {"suspend": True}
    kube.create(canary, res=resources.PYTORCHJOBS)
    deadline = time.monotonic() + timeout
    touches = 0
    while True:
        for _ in range(10):
            current = kube.get(resources.PYTORCHJOBS, "canary", CANARY_NAMESPACE) or {}
            if (current.get("status") or {}).get("conditions"):
                return
            time.sleep(0.2)
        if time.monotonic() > deadline:
            raise TimeoutError("the canary job got no status through the event path")
        touches += 1
        kube.patch(resources.PYTORCHJOBS, "canary",
                   {"metadata": {"annotations": {"bench/touch": str(touches)}}},
                   CANARY_NAMESPACE)


def _pids(stack: DevStack, prefix: str) -> list[int]:
    """The stack's own processes (functions ``function-``, emulated adapters ``adapter-``)."""
    return [c.process.pid for c in stack.processes
            if c.name.startswith(prefix) and c.process is not None]


def _ours_knative(cluster: LocalCluster, bin_dir: Path) -> Started:
    """The dev stack on the real Knative event path, the PingSource left out (resync off)."""
    from devstack.stack import DevStack

    stack = DevStack(bin_dir, resync_interval=0, cluster=cluster, broker="knative",
                     source_filters=True).start()
    started = Started(
        cluster, tuple(service_account(a) for a in FUNCTION_ACCOUNTS), _pids(stack, "function-"),
        event_path_users=(service_account(ADAPTER_ACCOUNT),), stop=stack.stop,
        delivery_counts=lambda: _dead_letters(stack),
        function_figures=lambda: _function_figures(stack))

    def watch_namespace(namespace: str) -> None:
        _watching(cluster, namespace)
        _knative_processes(stack, started)  # the adapters restarted: their processes are new

    started.watch_namespace = watch_namespace
    _knative_processes(stack, started)
    return started


def _knative_processes(stack: DevStack, started: Started) -> None:
    """Which processes are the event path, by part. Each local pod is its network half
    (``devstack.podnet``, run by the local kubelet: it accepts and connects, and hands the
    connections over to the cluster network) with the container below it: the containers are
    Knative's real cost, the pods' network halves (still named ``pod-network-relays``) and the
    cluster network process stand in for a cluster's pod network and kube-proxy, so they are
    reported as parts of their own."""
    knative = stack.knative
    assert knative is not None
    assert knative.kubelet is not None
    parts: dict[str, list[int]] = {}
    relays: list[int] = []
    for pod in knative.kubelet.snapshot():
        if pod.process is not None:
            relays.append(pod.process.pid)
            parts.setdefault(workload_of(pod.pod), []).extend(
                burst_proc.children(pod.process.pid))
    network = [knative.network.process.pid] if knative.network and knative.network.process else []
    started.event_path_pids = relays + network
    started.event_path_parts = {**parts, "cluster-network": network}
    started.event_path_own_parts = {"pod-network-relays": relays}


# After a restarted adapter's successor has been Ready for the functions' settle time (10 s),
# the next retry of the event its restart sent makes them resync: with the Broker's backoff
# (0.2 s doubling) that retry comes within about 25 s.
ADAPTER_RESTART_QUIET_S = 30.0


def _watching(cluster: LocalCluster, namespace: str) -> None:
    """A namespace a user creates long before a burst is watched by the time of the burst: the
    ApiServerSource controller rewrites the all-namespaces adapters for it (a restart, and
    the functions' resync that follows). Wait for that to be over, so the burst measures the
    event path, not an adapter restart."""
    from devstack import knative

    kube = cluster.client()
    knative.wait_until(lambda: knative.sources_not_watching(kube, namespace,
                                                            NAMESPACE_OF_FUNCTIONS),
                       120, f"the event sources to watch {namespace}", interval=0.5)
    time.sleep(ADAPTER_RESTART_QUIET_S)


def workload_of(pod: dict[str, Any]) -> str:
    """The name of the workload a pod belongs to: a Deployment's pod is named
    ``<deployment>-<template hash>-<suffix>``."""
    meta = pod["metadata"]
    source = (meta.get("labels") or {}).get("eventing.knative.dev/sourceName")
    if source:
        return f"adapter-{source}"
    generated = str(meta.get("generateName") or "").rstrip("-")
    if not generated:
        return str(meta["name"])
    hashed = generated.rsplit("-", 1)
    labels = meta.get("labels") or {}
    return hashed[0] if len(hashed) == 2 and "pod-template-hash" in labels else generated


def _function_figures(stack: DevStack) -> dict[str, float]:
    """What the controller's functions (not the Broker's dead-letter sink) did so far."""
    from devstack.stack import FUNCTIONS

    urls = stack.replica_urls
    return burst_functions.scrape({f: urls[f] for f in FUNCTIONS if f in urls})


def _dead_letters(stack: DevStack) -> dict[str, int]:
    """What the real Broker gave up on: the deliveries the dead-letters function logged."""
    assert stack.cluster is not None
    log = stack.cluster.logs / "function-dead-letters.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return {"dead_letters": sum(1 for line in lines
                                if line.startswith("{") and json.loads(line).get("deadLetter"))}


def _deliveries(stack: DevStack) -> dict[str, int]:
    router = stack.router
    if router is None:
        return {}
    deliveries = list(router.deliveries)
    return {"deliveries": len(deliveries),
            "retried_deliveries": sum(1 for d in deliveries if d.attempts > 1),
            "dead_letters": len(router.dead_letters)}
