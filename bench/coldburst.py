"""A function scaled to zero receives a burst: the status function of the dev stack is down
while N PyTorchJobs are created (its deliveries fail and the Broker emulation retries them, as
a Broker does while Knative's activator starts a pod), then it is spawned.

Reported: spawn to readiness, spawn to the first event it accepts, spawn to every job Running
(only the status function writes Running), and what the event path did meanwhile: deliveries
retried and dead-lettered (must be 0: a burst during a cold start is delayed, never lost).

``python -m bench.coldburst [--jobs N] [--repeats N] [--down SECONDS]``
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.burst_systems import wait_event_path_live
from bench.burst_workload import job
from bench.jobs import _untaint
from bench.stats import summary
from devstack.cluster.binaries import ensure_bin_dir
from devstack.stack import DevStack
from functions.kube import resources
from functions.kube.client import KubeClient

NAMESPACE = "coldburst"
FUNCTION = "status"
EVENTS = re.compile(r"^odh_training_events_total\{.*\} ([0-9.e+]+)$", re.MULTILINE)


def _accepted(url: str) -> float:
    try:
        with urllib.request.urlopen(url + "metrics", timeout=2) as response:  # noqa: S310
            text = response.read().decode()
    except OSError:
        return 0.0
    return sum(float(value) for value in EVENTS.findall(text))


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "health/readiness", timeout=2) as response:  # noqa: S310
            return bool(response.status == 200)
    except OSError:
        return False


def _running(kube: KubeClient) -> int:
    return sum(1 for j in kube.list(resources.PYTORCHJOBS, NAMESPACE)
               if any(c.get("type") == "Running" and c.get("status") == "True"
                      for c in (j.get("status") or {}).get("conditions") or []))


def one_run(jobs: int, down: float, timeout: float = 300.0) -> dict[str, Any]:
    stack = DevStack(ensure_bin_dir(), resync_interval=0, broker="emulated").start()
    try:
        assert stack.cluster is not None
        assert stack.router is not None
        kube = stack.cluster.client()
        _untaint(kube)
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                    res=resources.NAMESPACES)
        # Jobs created before the adapters watch would bring no event at all: wait for the
        # event path to carry a change end to end first.
        wait_event_path_live(stack.cluster)
        url = stack.function_urls[FUNCTION]
        stack.stop_function(FUNCTION)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: kube.create(job(i, NAMESPACE),
                                                res=resources.PYTORCHJOBS), range(jobs)))
        time.sleep(down)
        spawned = time.monotonic()
        stack.start_function(FUNCTION)
        marks: dict[str, float] = {}
        while time.monotonic() - spawned < timeout:
            now = time.monotonic() - spawned
            if "ready_s" not in marks and _ready(url):
                marks["ready_s"] = now
            if "first_event_s" not in marks and _accepted(url) > 0:
                marks["first_event_s"] = now
            if "first_event_s" in marks and _running(kube) >= jobs:
                marks["all_running_s"] = now
                break
            time.sleep(0.01 if "first_event_s" not in marks else 0.5)
        stack.router.wait_idle(30)
        deliveries = [d for d in stack.router.deliveries if d.trigger.endswith(FUNCTION)]
        return {**{k: round(v, 3) for k, v in marks.items()},
                "jobs_not_running": jobs - _running(kube),
                "deliveries": len(deliveries),
                "retried_deliveries": sum(1 for d in deliveries if d.attempts > 1),
                "dead_letters": len(stack.router.dead_letters)}
    finally:
        stack.stop()


def run(repeats: int = 3, jobs: int = 100, down: float = 3.0) -> dict[str, Any]:
    runs = [one_run(jobs, down) for _ in range(repeats)]
    result: dict[str, Any] = {"repeats": repeats, "jobs": jobs, "down_s": down,
                              "function": FUNCTION}
    for name in ("ready_s", "first_event_s", "all_running_s"):
        values = [r[name] for r in runs if name in r]
        if values:
            result[f"spawn_to_{name}"] = summary(values)
    for name in ("jobs_not_running", "deliveries", "retried_deliveries", "dead_letters"):
        result[name] = summary(r[name] for r in runs)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.coldburst")
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--down", type=float, default=3.0)
    args = parser.parse_args()
    print(json.dumps(run(args.repeats, args.jobs, args.down), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
