"""A local cluster holding many converged PyTorchJobs: the steady state the resync and
throughput benchmarks measure.

Each job is the sample with its Master only (one pod, one service), so 1,000 jobs stay within
what kwok and a two-core machine handle. The jobs are created, then the reconcile and status
handlers run once per job (as one event per job would), kwok starts the pods, and a catch-up
pass records them Running: after that, a handler pass writes nothing.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import yaml

from bench.jobs import REPO
from devstack.cluster.binaries import ensure_bin_dir
from devstack.cluster.manifests import apply_objects, load_documents
from devstack.cluster.runner import LocalCluster
from functions.core.keys import ObjectKey
from functions.jobs.controller import CONTROLLERS
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.runtime.recorder import EventRecorder
from functions.runtime.registry import Context

WORKERS = 8
NAMESPACE = "bench-fleet"


@contextmanager
def local_cluster() -> Iterator[LocalCluster]:
    cluster = LocalCluster(ensure_bin_dir())
    cluster.start()
    try:
        apply_objects(cluster.client(), load_documents([REPO / "config" / "crd"]))
        yield cluster
    finally:
        cluster.stop()


def master_only_job(name: str, namespace: str) -> dict[str, Any]:
    job = yaml.safe_load((REPO / "config" / "samples" / "pytorchjob.yaml").read_text())
    job = copy.deepcopy(job)
    job["metadata"] = {"name": name, "namespace": namespace}
    job["spec"]["pytorchReplicaSpecs"].pop("Worker", None)
    return dict(job)


def _running(kube: KubeClient, namespace: str) -> int:
    return sum(1 for p in kube.iter_list(resources.PODS, namespace)
               if (p.get("status") or {}).get("phase") == "Running")


def converged_fleet(kube: KubeClient, count: int, namespace: str = NAMESPACE,
                    timeout: float = 600,
                    job: Callable[[str, str], dict[str, Any]] = master_only_job,
                    pods_per_job: int = 1) -> list[ObjectKey]:
    """Create ``count`` jobs (``job(name, namespace)``, each of ``pods_per_job`` pods) in
    ``namespace`` and bring them to steady state."""
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                res=resources.NAMESPACES)
    controller = next(c for c in CONTROLLERS if c.parent.kind == "PyTorchJob")
    recorder = EventRecorder(kube, "training-jobs")
    keys = [ObjectKey("kubeflow.org/v1", "PyTorchJob", namespace, f"job-{i}")
            for i in range(count)]

    def handle(key: ObjectKey) -> None:
        controller.handlers["reconcile"](Context(kube, recorder, "reconcile"), key)
        controller.handlers["status"](Context(kube, recorder, "status"), key)

    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(lambda k: kube.create(job(k.name, namespace),
                                            res=resources.PYTORCHJOBS), keys))
        list(pool.map(handle, keys))
        deadline = time.monotonic() + timeout
        while _running(kube, namespace) < count * pods_per_job:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the fleet's pods are not Running after {timeout}s")
            time.sleep(1)
        list(pool.map(handle, keys))
    return keys
