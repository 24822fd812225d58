"""Trainer reconcile cost: the first pass on a new Trainer (render the manifests with kustomize,
apply every object, install the CRDs) and a steady-state pass (nothing changed: render, read,
compare, write nothing), each as wall time and API requests by verb.

Each repeat starts a fresh cluster with our CRDs, the JobSet CRD and a PodMonitor API, creates
the sample Trainer, and calls the reconcile handler directly: the first pass, then passes (with
the status handler, as Deployment events would bring) until the Trainer is Ready, then the
steady-state passes.

``python -m bench.trainer [--repeats N]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from bench.jobs import REPO
from bench.stats import summary
from devstack.cluster.binaries import ensure_bin_dir
from devstack.cluster.manifests import apply_objects, load_documents
from devstack.cluster.runner import LocalCluster
from devstack.upstream import fetch_trainer_manifests
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.runtime.recorder import EventRecorder
from functions.runtime.registry import Context, FunctionName

APP_NAMESPACE = "opendatahub"
WRITES = ("create", "apply", "patch", "delete")
STEADY_PASSES = 5


def _environment(bin_dir: Path, work: Path) -> dict[str, str]:
    return {"KUSTOMIZE_BIN": str(bin_dir / "kustomize"), "TRAINER_WORK_DIR": str(work),
            "TRAINER_MANIFESTS_DIR": str(fetch_trainer_manifests()),
            "TRAINER_RUNTIMES_DIR": str(REPO / "manifests" / "runtimes"),
            "TRAINER_IMAGESTREAMS_DIR": str(REPO / "manifests" / "imagestreams")}


def _ready(kube: KubeClient) -> bool:
    trainer = kube.get(resources.TRAINERS, "default-trainer") or {}
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (trainer.get("status") or {}).get("conditions") or [])


def _pass(kube: KubeClient, handler: Callable[[Context, Any], Any], function: FunctionName,
          key: Any) -> tuple[float, Counter[str]]:
    kube.reset_counts()
    context = Context(kube, EventRecorder(kube, "trainer-bench"), function)
    started = time.perf_counter()
    handler(context, key)
    elapsed = time.perf_counter() - started
    verbs: Counter[str] = Counter()
    for (verb, _), count in kube.requests.items():
        verbs[verb] += count
    return elapsed, verbs


def one_run(bin_dir: Path) -> dict[str, Any]:
    from functions.trainer import controller

    cluster = LocalCluster(bin_dir)
    cluster.start()
    try:
        kube = cluster.client()
        apply_objects(kube, load_documents([
            REPO / "config" / "crd", bin_dir / "crds" / "jobset",
            REPO / "tests" / "trainer" / "data" / "podmonitor-crd.yaml"]))
        kube.create({"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": APP_NAMESPACE}}, res=resources.NAMESPACES)
        sample = yaml.safe_load((REPO / "config" / "samples" / "trainer.yaml").read_text())
        kube.create(sample, res=resources.TRAINERS)
        key = controller.TRAINER_KEY
        first, first_verbs = _pass(kube, controller.reconcile, "reconcile", key)
        passes = 1
        deadline = time.monotonic() + 120
        while not _ready(kube):
            if time.monotonic() > deadline:
                raise TimeoutError("the Trainer never became Ready")
            time.sleep(0.5)
            _pass(kube, controller.reconcile, "reconcile", key)
            _pass(kube, controller.status, "status", key)
            passes += 1
        steady = [_pass(kube, controller.reconcile, "reconcile", key)
                  for _ in range(STEADY_PASSES)]
        return {"first_s": first, "first_requests": sum(first_verbs.values()),
                "first_verbs": first_verbs, "passes_to_ready": passes,
                "steady_s": [s for s, _ in steady],
                "steady_requests": [sum(v.values()) for _, v in steady],
                "steady_writes": [sum(n for verb, n in v.items() if verb in WRITES)
                                  for _, v in steady],
                "steady_verbs": steady[-1][1]}
    finally:
        cluster.stop()


def run(repeats: int = 3) -> dict[str, Any]:
    bin_dir = ensure_bin_dir()
    saved = dict(os.environ)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for index in range(repeats):
                os.environ.update(_environment(bin_dir, Path(tmp) / f"work-{index}"))
                runs.append(one_run(bin_dir))
        finally:
            os.environ.clear()
            os.environ.update(saved)
    return {
        "repeats": repeats,
        "first_reconcile_s": summary(r["first_s"] for r in runs),
        "first_reconcile_requests": summary(r["first_requests"] for r in runs),
        "passes_to_ready": summary(r["passes_to_ready"] for r in runs),
        "steady_reconcile_s": summary(s for r in runs for s in r["steady_s"]),
        "steady_reconcile_requests": summary(s for r in runs for s in r["steady_requests"]),
        "steady_reconcile_writes": summary(s for r in runs for s in r["steady_writes"]),
        "first_requests_by_verb": dict(sorted(runs[-1]["first_verbs"].items())),
        "steady_requests_by_verb": dict(sorted(runs[-1]["steady_verbs"].items())),
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.trainer")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(run(args.repeats), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
