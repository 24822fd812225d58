"""Resync cost: one PingSource tick delivered to each function while 1,000 converged jobs
exist. Reported per function: the tick's wall time (from the POST to the answer; the function
lists every job and runs its handler on each, with bounded concurrency) and the API requests
it made, in total and by verb. Steady state: the writes must be zero.

``python -m bench.resync [--jobs N] [--repeats N]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from typing import Any

from bench.fleet import converged_fleet, local_cluster
from bench.jobs import REPO
from bench.stats import summary
from devstack.broker import ping_event
from devstack.cluster.runner import LocalCluster
from functions.core.delivery_auth import DISABLED
from functions.kube.client import KubeClient, RequestHook
from functions.runtime.app import create_app
from functions.runtime.eventing import load_manifests

FUNCTIONS = ("reconcile", "status", "gc")
WRITES = ("create", "apply", "patch", "delete")


def measure(cluster: LocalCluster, function: str, repeats: int) -> dict[str, Any]:
    clients: list[KubeClient] = []

    def factory(hook: RequestHook) -> KubeClient:
        clients.append(cluster.client(on_request=hook))
        return clients[-1]

    client = create_app(function, kube_factory=factory, warm_up="now",
                        delivery_auth=DISABLED).test_client()  # ticks posted with no token
    ping = load_manifests(REPO / "eventing").ping_sources[0]
    walls: list[float] = []
    totals: list[int] = []
    writes: list[int] = []
    verbs: Counter[str] = Counter()
    for _ in range(repeats):
        kube = clients[-1]
        kube.reset_counts()
        headers, body = ping_event(ping)
        started = time.perf_counter()
        status = client.post("/", headers=headers, data=body).status_code
        walls.append(time.perf_counter() - started)
        if status != 202:
            raise RuntimeError(f"the {function} resync answered {status}")
        totals.append(kube.request_count())
        writes.append(kube.request_count(*WRITES))
        verbs = Counter()
        for (verb, _), count in kube.requests.items():
            verbs[verb] += count
    return {"wall_s": summary(walls), "api_requests": summary(totals),
            "api_writes": summary(writes), "requests_by_verb": dict(sorted(verbs.items()))}


def run(repeats: int = 3, jobs: int = 1000) -> dict[str, Any]:
    with local_cluster() as cluster:
        converged_fleet(cluster.client(), jobs)
        result: dict[str, Any] = {"jobs": jobs, "repeats": repeats}
        for function in FUNCTIONS:
            result[function] = measure(cluster, function, repeats)
        return result


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.resync")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(run(args.repeats, args.jobs), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
