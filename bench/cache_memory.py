"""Where a function's memory goes once its watch caches are full: for each cached kind, the
objects held, their size as JSON, and the Python heap they take (every dict, list, string and
number reachable from them, each counted once however often it is shared), in a cluster of N
converged PyTorchJobs (bench/scale.py's fill: 3 pods and 3 Services each).

Each function's app is made in this process as ``serve`` makes it, its caches filled, and
measured; the heap figure is what the caches add to a process (the rest of a function's RSS is
the interpreter, the libraries and the allocator's slack).

``python -m bench.cache_memory [--jobs N] [--out DIR]`` writes ``cache_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from bench.fleet import converged_fleet
from bench.jobs import REPO
from bench.scale import FUNCTIONS, NAMESPACE, PODS_PER_JOB, RESULTS, _job, nodes
from devstack.cluster.binaries import ensure_bin_dir
from devstack.cluster.manifests import apply_objects, load_documents
from devstack.cluster.runner import LocalCluster
from functions.core.delivery_auth import DISABLED
from functions.kube.client import KubeClient, RequestHook
from functions.runtime.app import create_app, runtime_of


def heap_bytes(objects: list[Any]) -> int:
    """The sizes of everything reachable from ``objects`` through dicts and lists, each object
    once."""
    seen: set[int] = set()
    total = 0
    stack = list(objects)
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return total


def measure(cluster: LocalCluster, function: str) -> dict[str, Any]:
    def factory(hook: RequestHook) -> KubeClient:
        return cluster.client(on_request=hook)

    app = create_app(function, kube_factory=factory, warm_up="now", delivery_auth=DISABLED)
    runtime = runtime_of(app)
    started = time.monotonic()
    if not runtime.synced(600):
        raise TimeoutError(f"{function}'s caches did not fill")
    filled = time.monotonic() - started
    kinds: dict[str, Any] = {}
    cache = runtime.cache()
    assert cache is not None
    for spec in runtime.cache_specs:
        informer = cache.informer(spec.resource)
        objects = informer.store.values() if informer is not None else []
        if not objects:
            continue
        kinds[spec.resource.plural] = {
            "objects": len(objects),
            "json_mib": round(sum(len(orjson.dumps(o)) for o in objects) / 2**20, 1),
            "heap_mib": round(heap_bytes(objects) / 2**20, 1)}
    runtime.close()
    return {"fill_s": round(filled, 2), "kinds": kinds,
            "heap_mib": round(sum(k["heap_mib"] for k in kinds.values()), 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    cluster = LocalCluster(ensure_bin_dir(), nodes=nodes(args.jobs))
    cluster.start()
    try:
        kube = cluster.client()
        apply_objects(kube, load_documents([REPO / "config" / "crd"]))
        converged_fleet(kube, args.jobs, NAMESPACE, timeout=3600, job=_job,
                        pods_per_job=PODS_PER_JOB)
        found = {"jobs": args.jobs, **{f: measure(cluster, f) for f in FUNCTIONS},
                 "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    finally:
        cluster.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cache_memory.json").write_text(json.dumps(found, indent=2) + "\n")
    print(json.dumps(found, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
