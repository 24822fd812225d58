"""The systems the burst benchmark compares, each started on a fresh audited cluster:

* ``limit`` — no controller: the driver itself creates, per job, the job, its pods and
  services and its ``Created`` status (as a controller would), at a given concurrency;
* ``go-default`` / ``go-tuned`` — the upstream Go training-operator (``bench.burst_go``) with
  the upstream CRDs;
* ``ours`` — the product's dev stack (``functions.dev.stack.DevStack``: the functions under
  gunicorn with their own ServiceAccounts, the real ApiServerSource adapters, the Broker
  emulation router) with our CRDs; ``ours-x2`` and ``ours-x4`` run each function as 2 or 4
  processes (replicas), the router spreading deliveries over them.

Each :class:`Started` says which processes and API identities belong to the controller and
which to its event path, so one measuring loop (``bench.burst``) serves every system.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bench.burst_go import SETTINGS, GoOperator, install_crds
from bench.burst_go import USER as GO_USER
from bench.burst_workload import nodes
from bench.jobs import REPO
from functions.cluster.manifests import apply_objects, load_documents
from functions.cluster.runner import LocalCluster

if TYPE_CHECKING:
    from functions.dev.stack import DevStack

SYSTEMS = ("limit", "go-default", "go-tuned", "ours", "ours-x2", "ours-x4")
REPLICAS = {"ours": 1, "ours-x2": 2, "ours-x4": 4}
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
    # threads of this process that belong to the system (the router of the dev stack)
    in_process_threads: Callable[[str], bool] | None = None
    stop: Callable[[], None] = lambda: None
    # what the event path did with the events (deliveries, retries, dead letters)
    delivery_counts: Callable[[], dict[str, int]] | None = None


def start(system: str, bin_dir: Path) -> Started:
    """A fresh cluster (audit log on, the burst nodes) with ``system`` running on it."""
    cluster = LocalCluster(bin_dir, audit=True, nodes=nodes())
    if system in REPLICAS:
        return _ours(cluster, bin_dir, REPLICAS[system])
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


def _ours(cluster: LocalCluster, bin_dir: Path, replicas: int) -> Started:
    """The dev stack as it is, with the resync ticker off (the burst is event-driven)."""
    from functions.dev.stack import DevStack

    stack = DevStack(bin_dir, resync_interval=0, cluster=cluster, replicas=replicas,
                     broker="emulated").start()

    def pids(prefix: str) -> list[int]:
        return [c.process.pid for c in stack.processes
                if c.name.startswith(prefix) and c.process is not None]

    return Started(
        cluster, tuple(service_account(a) for a in FUNCTION_ACCOUNTS), pids("function-"),
        event_path_users=(service_account(ADAPTER_ACCOUNT),), event_path_pids=pids("adapter-"),
        in_process_threads=lambda name: (name.startswith("router-")
                                         or "process_request_thread" in name),
        stop=stack.stop, delivery_counts=lambda: _deliveries(stack))


def _deliveries(stack: DevStack) -> dict[str, int]:
    router = stack.router
    if router is None:
        return {}
    deliveries = list(router.deliveries)
    return {"deliveries": len(deliveries),
            "retried_deliveries": sum(1 for d in deliveries if d.attempts > 1),
            "dead_letters": len(router.dead_letters)}
