"""Cost as the cluster grows: a new replica into a cluster of N converged PyTorchJobs (3 pods
and 3 Services each, Running on kwok), for each of our functions and for the Go
training-operator v1.9.3 (tuned client settings), on one cluster per size.

For each of ours, a process is spawned as its container runs it (``python -m functions serve
<function>``; no delivery check, no wakes) while a new job is created, and reported:

* ``ready_s``: spawn to readiness;
* ``first_pass_s``: spawn to the first correct pass on the new job, its add event posted as
  the Broker would retry it (reconcile: the job's 3 pods exist; status: the job has a
  condition; gc: the event answered, there being nothing to collect);
* ``wake_s``: spawn to the answer of a wake posted once it is ready: its watch caches filled
  and every parent passed over (what a function scaled to zero does when its wake fires);
* ``lists`` / ``list_mib``: LIST requests and response bytes the API server served from the
  spawn to that answer (the initial lists, and the wake's own list of parents);
* ``rss_mib``: the process tree's peak RSS by then;
* ``resync_s`` / ``resync_requests`` / ``resync_writes``: a resync tick (every parent, from
  the caches: :mod:`functions.runtime.resyncs`) on the warm process; ``rewake_s`` /
  ``rewake_requests`` / ``rewake_writes``: a second wake (the same pass, then its PingSources
  looked up).

For Go: spawn to its PyTorchJob workers started (caches synced), spawn to the new job's pods,
the LISTs and bytes by then, peak RSS. Requests and writes are the API server's own counters
(``apiserver_request_total``, ``apiserver_response_sizes_sum``), writes counted on jobs, pods,
Services and Events only.

``python -m bench.scale [--sizes 1000 5000] [--systems ours go-tuned] [--out DIR]`` writes
``scale.json``, ``scale.md`` and ``scale.png`` (:mod:`bench.report_scale`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench import report_scale
from bench.burst_go import SETTINGS, GoOperator
from bench.burst_proc import peak_rss_mib
from bench.burst_workload import JOB_LABEL
from bench.burst_workload import job as burst_job
from bench.coldburst import _ready
from bench.fleet import converged_fleet
from bench.jobs import REPO
from devstack.cluster import kwok
from devstack.cluster.binaries import ensure_bin_dir
from devstack.cluster.manifests import apply_objects, load_documents
from devstack.cluster.ports import free_port
from devstack.cluster.runner import Component, LocalCluster, stop_process_group
from functions.core import wakes
from functions.kube import resources
from functions.kube.client import KubeClient

NAMESPACE = "bench-scale"
PODS_PER_JOB = 3
FUNCTIONS = ("reconcile", "status", "gc")
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE"})
WRITTEN = frozenset({"pytorchjobs", "pods", "services", "events"})
RESULTS = Path(__file__).parent / "results"


def _job(name: str, namespace: str) -> dict[str, Any]:
    made = burst_job(0, namespace)
    made["metadata"]["name"] = name
    return made


def nodes(jobs: int) -> list[dict[str, Any]]:
    count = max(4, math.ceil(jobs * PODS_PER_JOB / 1400) + 1)
    return [kwok.node(f"kwok-scale-{i}", cpu="1000", memory="8Ti", pods="1500")
            for i in range(count)]


def apiserver_counts(kube: KubeClient) -> Counter[str]:
    """LIST requests and bytes, and writes of the kinds the controllers write."""
    response = kube.call("metrics", "GET", "/metrics")
    counts: Counter[str] = Counter()
    for family in text_string_to_metric_families(response.body.decode()):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "apiserver_request_total":
                if labels.get("verb") == "LIST":
                    counts["lists"] += int(sample.value)
                elif labels.get("verb") in WRITE_VERBS and labels.get("resource") in WRITTEN:
                    counts["writes"] += int(sample.value)
                counts["requests"] += int(sample.value)
            elif sample.name == "apiserver_response_sizes_sum" and labels.get("verb") == "LIST":
                counts["list_bytes"] += int(sample.value)
    return counts


def _post(url: str, headers: dict[str, str], body: bytes, timeout: float = 600) -> int:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def _ping(function: str) -> tuple[dict[str, str], bytes]:
    return ({"Ce-Specversion": "1.0", "Ce-Id": str(uuid.uuid4()),
             "Ce-Type": "dev.knative.sources.ping", "Ce-Source": "/bench/scale",
             f"Ce-{wakes.EXTENSION}": function, "Content-Type": "application/json"},
            b'{"reason": "bench"}')


def _added(obj: dict[str, Any]) -> tuple[dict[str, str], bytes]:
    meta = obj["metadata"]
    return ({"Ce-Specversion": "1.0", "Ce-Id": str(uuid.uuid4()),
             "Ce-Type": "dev.knative.apiserver.resource.add",
             "Ce-Source": "https://127.0.0.1:6443", "Ce-Apiversion": obj["apiVersion"],
             "Ce-Kind": obj["kind"], "Ce-Name": meta["name"], "Ce-Namespace": meta["namespace"],
             "Content-Type": "application/json"}, json.dumps(obj).encode())


def _until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.02)


def _pods_of(kube: KubeClient, name: str) -> int:
    return len(kube.list(resources.PODS, NAMESPACE, label_selector=f"{JOB_LABEL}={name}"))


def _timed_post(url: str, event: tuple[dict[str, str], bytes],
                kube: KubeClient) -> tuple[float, Counter[str]]:
    before, started = apiserver_counts(kube), time.monotonic()
    status = _post(url, *event)
    if status // 100 != 2:
        raise RuntimeError(f"{url} answered {status}")
    return time.monotonic() - started, apiserver_counts(kube) - before


def ours(cluster: LocalCluster, kube: KubeClient, function: str) -> dict[str, float]:
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig),
           "FUNCTIONS_DELIVERY_AUTH": "none", "WAKES": "off", "PYTHONUNBUFFERED": "1"}
    name = f"new-{function}"
    component = Component(f"scale-{function}", [
        sys.executable, "-m", "functions", "serve", function, "--host", "127.0.0.1",
        "--port", str(port)], cluster.logs / f"scale-{function}.log", env=env)
    before = apiserver_counts(kube)
    started = time.monotonic()
    component.start()
    try:
        created = kube.create(_job(name, NAMESPACE), res=resources.PYTORCHJOBS)
        _until(lambda: _ready(url), 120, f"{function} ready")
        ready = time.monotonic() - started
        while _post(url, *_added(created)) // 100 != 2:
            time.sleep(0.05)
        if function == "reconcile":
            _until(lambda: _pods_of(kube, name) == PODS_PER_JOB, 120, "the new job's pods")
        elif function == "status":
            _until(lambda: bool(((kube.get(resources.PYTORCHJOBS, name, NAMESPACE) or {})
                                 .get("status") or {}).get("conditions")), 120,
                   "the new job's status")
        first_pass = time.monotonic() - started
        if _post(url, *_ping(function)) // 100 != 2:
            raise RuntimeError(f"{function}'s wake failed")
        woke = time.monotonic() - started
        initial = apiserver_counts(kube) - before
        rss = peak_rss_mib([component.process.pid]) if component.process else 0.0
        resync_s, resync = _timed_post(url, _ping(wakes.ALL), kube)
        rewake_s, rewake = _timed_post(url, _ping(function), kube)
    finally:
        if component.process is not None:
            stop_process_group(component.process.pid)
        kube.delete(resources.PYTORCHJOBS, name, NAMESPACE)
    return {"ready_s": round(ready, 2), "first_pass_s": round(first_pass, 2),
            "wake_s": round(woke, 2), "lists": initial["lists"],
            "list_mib": round(initial["list_bytes"] / 2**20, 1), "rss_mib": round(rss, 1),
            "resync_s": round(resync_s, 2), "resync_requests": resync["requests"],
            "resync_writes": resync["writes"], "rewake_s": round(rewake_s, 2),
            "rewake_requests": rewake["requests"], "rewake_writes": rewake["writes"]}


def go(cluster: LocalCluster, kube: KubeClient, bin_dir: Path, system: str) -> dict[str, float]:
    """On our CRDs (the same PyTorchJob schema; upstream's MPIJob CRD would replace the
    v2beta1 one the cluster stores), the operator's PyTorchJob controller alone."""
    qps, burst, threads = SETTINGS[system]
    operator = GoOperator(bin_dir / "training-operator", cluster, qps, burst, threads,
                          extra_args=("--enable-scheme=pytorchjob",))
    name = f"new-{system}"
    before = apiserver_counts(kube)
    started = time.monotonic()
    kube.create(_job(name, NAMESPACE), res=resources.PYTORCHJOBS)
    try:
        operator.start(timeout=600)
        synced = time.monotonic() - started
        _until(lambda: _pods_of(kube, name) == PODS_PER_JOB, 300, "the new job's pods")
        first_pass = time.monotonic() - started
        initial = apiserver_counts(kube) - before
        rss = peak_rss_mib([operator.pid])
    finally:
        operator.stop()
    return {"synced_s": round(synced, 2), "first_pass_s": round(first_pass, 2),
            "lists": initial["lists"], "list_mib": round(initial["list_bytes"] / 2**20, 1),
            "rss_mib": round(rss, 1)}


def one_size(jobs: int, systems: list[str], bin_dir: Path) -> dict[str, Any]:
    cluster = LocalCluster(bin_dir, nodes=nodes(jobs))
    cluster.start()
    try:
        kube = cluster.client()
        apply_objects(kube, load_documents([REPO / "config" / "crd"]))
        started = time.monotonic()
        converged_fleet(kube, jobs, NAMESPACE, timeout=3600, job=_job,
                        pods_per_job=PODS_PER_JOB)
        found: dict[str, Any] = {"jobs": jobs, "fill_s": round(time.monotonic() - started, 1)}
        print(f"{jobs} jobs converged in {found['fill_s']} s", file=sys.stderr)
        if "ours" in systems:
            for function in FUNCTIONS:
                found[function] = ours(cluster, kube, function)
                print(f"  {function}: {found[function]}", file=sys.stderr)
            found["ours_rss_mib"] = round(sum(found[f]["rss_mib"] for f in FUNCTIONS), 1)
        for system in (s for s in systems if s.startswith("go-")):
            found[system] = go(cluster, kube, bin_dir, system)
            print(f"  {system}: {found[system]}", file=sys.stderr)
        return found
    finally:
        cluster.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--systems", nargs="+", default=["ours", "go-tuned"])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    command = " ".join(["python -m bench.scale", *sys.argv[1:]])
    extra = ("training-operator",) if any(s.startswith("go-") for s in args.systems) else ()
    bin_dir = ensure_bin_dir(extra)
    results = {"sizes": [one_size(n, args.systems, bin_dir) for n in args.sizes],
               "machine": {"cpus": os.cpu_count()},
               "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "scale.md").write_text(report_scale.markdown(results, command))
    report_scale.plot(results, args.out / "scale.png")
    print(report_scale.markdown(results, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
