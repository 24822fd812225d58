"""The training API under gunicorn on the local cluster: create and get latency, list of 1,000.

Each request goes the whole way: HTTP to gunicorn, TokenReview and SubjectAccessReview (cached
for a few seconds per token and question, as in production), then the API server. ``create``
also checks the name is free in every kind and computes the queue position; ``get`` of a
queued job reads the namespace's queue for its position. ``list`` pages through 1,000 queued
PyTorchJobs (500 per page) and places each in the queue.

``python -m bench.api [--repeats N] [--requests N]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from devstack.cluster.binaries import ensure_bin_dir
from devstack.cluster.manifests import apply_objects, load_documents
from devstack.cluster.ports import free_port
from devstack.cluster.runner import LocalCluster
from functions.api.client import TrainingApi
from functions.api.core import crs
from functions.api.core.models import JobRequest
from functions.jobs.core.frameworks import FRAMEWORKS
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.kube.resources import Resource

REPO = Path(__file__).resolve().parents[1]
LIST_SIZE = 1000
ROLE = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
BINDING = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000
    return {"p50_ms": round(at(0.50), 2), "p99_ms": round(at(0.99), 2),
            "mean_ms": round(statistics.fmean(ordered) * 1000, 2), "n": len(ordered)}


def _user(kube: KubeClient, namespace: str) -> str:
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                res=resources.NAMESPACES)
    deadline = time.monotonic() + 30
    while kube.get(resources.SERVICEACCOUNTS, "default", namespace) is None:
        if time.monotonic() > deadline:
            raise TimeoutError("no default ServiceAccount")
        time.sleep(0.05)
    kube.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                 "metadata": {"name": "jobs", "namespace": namespace},
                 "rules": [{"apiGroups": ["kubeflow.org"], "verbs": ["*"],
                            "resources": [fw.plural for fw in FRAMEWORKS]}]},
                res=ROLE)
    kube.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": "jobs", "namespace": namespace},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                             "name": "jobs"},
                 "subjects": [{"kind": "ServiceAccount", "name": "default",
                               "namespace": namespace}]}, res=BINDING)
    answer = kube.call("create", "POST",
                       resources.SERVICEACCOUNTS.path(namespace, "default", "token"),
                       body={"apiVersion": "authentication.k8s.io/v1",
                             "kind": "TokenRequest", "spec": {}})
    return str(json.loads(answer.body)["status"]["token"])


def _serve(cluster: LocalCluster) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    process = subprocess.Popen([sys.executable, "-m", "functions", "serve", "api", "--host",
                                "127.0.0.1", "--port", str(port)], cwd=REPO, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    import urllib.request
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health/readiness", timeout=1):  # noqa: S310
                return process, url
        except OSError:
            if time.monotonic() > deadline:
                process.kill()
                raise
            time.sleep(0.1)


def _fill(kube: KubeClient, namespace: str, count: int) -> None:
    from datetime import UTC, datetime

    def create(index: int) -> None:
        request = JobRequest.model_validate({"name": f"bulk-{index:04d}", "framework": "pytorch",
                                             "image": "img:1"})
        kube.create(crs.build_job(request, namespace, datetime.now(UTC), "bench", False),
                    res=resources.PYTORCHJOBS)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(count)))


def run(repeats: int = 1, requests: int = 200) -> dict[str, Any]:
    results: dict[str, Any] = {"requests": requests, "list_size": LIST_SIZE}
    with LocalCluster(ensure_bin_dir()) as cluster:
        kube = cluster.client()
        apply_objects(kube, load_documents([REPO / "config" / "crd"]))
        process, url = _serve(cluster)
        try:
            creates: list[float] = []
            gets: list[float] = []
            lists: list[float] = []
            for repeat in range(repeats):
                namespace = f"bench-api-{repeat}"
                api = TrainingApi(url, _user(kube, namespace), namespace)
                api.list()  # warm: the first review and connection
                for i in range(requests):
                    started = time.perf_counter()
                    api.create({"name": f"job-{i}", "framework": "pytorch", "image": "img:1",
                                "workers": 2, "resources": {"cpu": "100m"}})
                    creates.append(time.perf_counter() - started)
                for i in range(requests):
                    started = time.perf_counter()
                    api.get(f"job-{i}")
                    gets.append(time.perf_counter() - started)
                _fill(kube, namespace, LIST_SIZE - requests)
                for _ in range(3):
                    started = time.perf_counter()
                    items = api.list_all()
                    lists.append(time.perf_counter() - started)
                    assert len(items) == LIST_SIZE, len(items)
            results["create"] = _percentiles(creates)
            results["get"] = _percentiles(gets)
            results["list_1000"] = {"median_s": round(statistics.median(lists), 3),
                                    "min_s": round(min(lists), 3), "n": len(lists)}
        finally:
            process.terminate()
            process.wait(timeout=20)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.api")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    print(json.dumps(run(args.repeats, args.requests), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
