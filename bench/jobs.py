"""Burst of PyTorchJobs on the local cluster: our handlers against the API server's own limit.

Limit: a plain loop that creates the same objects (job CRs, then every pod and service the
controller would create) with the same client and the same parallelism. Ours: create the job
CRs, then run the reconcile and status handlers once per job (as one event per job would) until
every pod and service exists and every job has its Created condition. Also reported: API
requests per job, and the writes a second, idle pass makes (should be zero).

Each figure is a median over repeated runs (a fresh cluster each) with min and max; ``run``
also takes a larger burst (1,000 jobs by default), run ``burst_repeats`` times.

``python -m bench.jobs [--jobs N] [--repeats N] [--burst N]``
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from bench.stats import summary
from devstack.cluster.binaries import ensure_bin_dir
from devstack.cluster.manifests import apply_objects, load_documents
from devstack.cluster.runner import LocalCluster
from functions.core.keys import ObjectKey
from functions.jobs.controller import CONTROLLERS
from functions.jobs.core.defaults import with_defaults
from functions.jobs.core.model import parse_job
from functions.jobs.core.objects import desired_pod, desired_service
from functions.jobs.core.settings import Settings
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.runtime.recorder import EventRecorder
from functions.runtime.registry import Context

REPO = Path(__file__).resolve().parents[1]
WORKERS = 8
WRITES = ("create", "apply", "patch", "delete")


@functools.cache
def _sample() -> dict[str, Any]:
    loaded = yaml.safe_load((REPO / "config" / "samples" / "pytorchjob.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def _job(name: str, namespace: str) -> dict[str, Any]:
    """The PyTorchJob sample as ``name``. The sample is parsed once: a create loop that
    parsed YAML per job spent a third of its time so, in the process that also hosts the
    Broker emulation."""
    spec = copy.deepcopy(_sample())
    spec["metadata"] = {"name": name, "namespace": namespace}
    spec["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 2
    return dict(spec)


def _namespace(kube: KubeClient, name: str) -> None:
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                res=resources.NAMESPACES)


def _untaint(kube: KubeClient) -> None:
    for node in kube.list(resources.NODES):
        taints = [t for t in node.get("spec", {}).get("taints") or []
                  if t.get("key") != "node.kubernetes.io/not-ready"]
        kube.patch(resources.NODES, node["metadata"]["name"], {"spec": {"taints": taints}})


def _settle(kube: KubeClient, namespace: str, pods: int, timeout: float = 120) -> None:
    """Wait until kwok has every pod of the namespace Running, so phases do not overlap."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = sum(1 for p in kube.list(resources.PODS, namespace)
                      if p.get("status", {}).get("phase") == "Running")
        if running >= pods:
            break
        time.sleep(1)
    time.sleep(3)


def limit(kube: KubeClient, jobs: int) -> float:
    """Seconds to create N jobs plus their pods and services with a plain create loop."""
    _namespace(kube, "bench-limit")
    started = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        created = list(pool.map(lambda i: kube.create(_job(f"job-{i}", "bench-limit"),
                                                      res=resources.PYTORCHJOBS), range(jobs)))
        children: list[dict[str, Any]] = []
        for obj in created:
            job = with_defaults(parse_job(obj))
            for rtype in job.replica_specs:
                for index in range(job.replicas(rtype)):
                    children.append(desired_pod(job, rtype, index, Settings())[0])
                    children.append(desired_service(job, rtype, index))
        list(pool.map(lambda obj: kube.create(obj), children))
    return time.monotonic() - started


def ours(kube: KubeClient, jobs: int) -> dict[str, float]:
    _namespace(kube, "bench-ours")
    controller = next(c for c in CONTROLLERS if c.parent.kind == "PyTorchJob")
    recorder = EventRecorder(kube, "training-jobs")
    keys = [ObjectKey("kubeflow.org/v1", "PyTorchJob", "bench-ours", f"job-{i}")
            for i in range(jobs)]

    def handle(key: ObjectKey) -> None:
        controller.handlers["reconcile"](Context(kube, recorder, "reconcile"), key)
        controller.handlers["status"](Context(kube, recorder, "status"), key)

    before = kube.request_count()
    started = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(lambda i: kube.create(_job(f"job-{i}", "bench-ours"),
                                            res=resources.PYTORCHJOBS), range(jobs)))
        list(pool.map(handle, keys))
    elapsed = time.monotonic() - started
    requests = kube.request_count() - before
    pods = kube.list(resources.PODS, "bench-ours")
    services = kube.list(resources.SERVICES, "bench-ours")
    created = sum(1 for j in kube.list(resources.PYTORCHJOBS, "bench-ours")
                  if any(c["type"] == "Created" for c in j.get("status", {}).get("conditions", [])))
    _settle(kube, "bench-ours", len(pods))
    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(handle, keys))          # catch up: every job is Running now
    writes_before = kube.request_count(*WRITES)
    requests_before = kube.request_count()
    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(handle, keys))          # nothing changed: must not write
    idle_writes = kube.request_count(*WRITES) - writes_before
    idle_reads = (kube.request_count() - requests_before) / jobs
    return {"seconds": round(elapsed, 2), "requests_per_job": round(requests / jobs, 2),
            "pods": len(pods), "services": len(services), "jobs_with_created": created,
            "idle_pass_writes": idle_writes, "idle_pass_reads_per_job": round(idle_reads, 2)}


def one_run(jobs: int) -> dict[str, Any]:
    """One fresh cluster: the plain create loop, then ours."""
    cluster = LocalCluster(ensure_bin_dir())
    cluster.start()
    try:
        kube = cluster.client()
        apply_objects(kube, load_documents([REPO / "config" / "crd"]))
        _untaint(kube)
        raw = limit(kube, jobs)
        _settle(kube, "bench-limit", jobs * 3)
        result = ours(kube, jobs)
        return {"limit_seconds": raw, **result, "ratio_to_limit": result["seconds"] / raw}
    finally:
        cluster.stop()


def _figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    last = runs[-1]
    return {
        "limit_create_loop_s": summary(r["limit_seconds"] for r in runs),
        "ours_s": summary(r["seconds"] for r in runs),
        "ratio_to_limit": summary(r["ratio_to_limit"] for r in runs),
        "requests_per_job": summary(r["requests_per_job"] for r in runs),
        "idle_pass_writes": summary(r["idle_pass_writes"] for r in runs),
        "idle_pass_reads_per_job": summary(r["idle_pass_reads_per_job"] for r in runs),
        "pods": last["pods"], "services": last["services"],
        "jobs_with_created": last["jobs_with_created"],
    }


def run(repeats: int = 3, jobs: int = 200, burst: int | None = 1000,
        burst_repeats: int = 1) -> dict[str, Any]:
    """``repeats`` runs of ``jobs`` PyTorchJobs, then ``burst_repeats`` runs of ``burst``
    (``None`` or ``0``: no burst run). Each run starts a fresh cluster."""
    result: dict[str, Any] = {"repeats": repeats}
    result[f"jobs_{jobs}"] = _figures([one_run(jobs) for _ in range(repeats)])
    if burst and burst != jobs:
        result[f"jobs_{burst}"] = _figures([one_run(burst) for _ in range(burst_repeats)])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.jobs")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--burst", type=int, default=1000, help="0: no burst run")
    args = parser.parse_args()
    print(json.dumps(run(args.repeats, args.jobs, args.burst), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
