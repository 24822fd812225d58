"""Events per second one gunicorn worker sustains: ``python -m functions serve reconcile`` with
one worker (eight threads, as deployed) against a local cluster, fed by eight concurrent
senders over keep-alive connections.

Two workloads:

* ``job_events_per_s`` — Resource-mode update events about converged PyTorchJobs (what the
  ApiServerSource sends when a job's status changes): each runs the reconcile handler, which
  reads the job and its children from the API server and writes nothing;
* ``ignored_events_per_s`` — events about a kind no controller owns (parse, route, answer):
  the runtime's own ceiling.

``scale_out`` repeats the first workload with the function as 1, 2 and 4 separate processes
(replicas, as Knative scales a Service out), the senders spread over them: what replicas add
on this machine (two cores are shared by the API server, the senders and the replicas).

``python -m bench.throughput [--events N] [--jobs N] [--repeats N]``
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench.fleet import NAMESPACE, converged_fleet, local_cluster
from bench.jobs import REPO
from bench.stats import summary
from devstack.cluster.ports import free_port
from functions.kube import resources
from functions.kube.client import KubeClient

SENDERS = 8
Event = tuple[dict[str, str], bytes]


def resource_event(obj: dict[str, Any]) -> Event:
    """The binary-mode event an ApiServerSource adapter sends for an update of ``obj``."""
    meta = obj["metadata"]
    headers = {"Ce-Specversion": "1.0", "Ce-Id": str(uuid.uuid4()),
               "Ce-Type": "dev.knative.apiserver.resource.update",
               "Ce-Source": "https://127.0.0.1:6443", "Ce-Apiversion": obj["apiVersion"],
               "Ce-Kind": obj["kind"], "Ce-Name": meta["name"],
               "Ce-Namespace": meta.get("namespace", ""), "Content-Type": "application/json"}
    return headers, json.dumps(obj, separators=(",", ":")).encode()


def foreign_event() -> Event:
    widget = {"apiVersion": "example.com/v1", "kind": "Widget",
              "metadata": {"name": "w", "namespace": "default"}, "spec": {"size": 3}}
    return resource_event(widget)


def _wait_ready(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            connection.request("GET", "/health/readiness")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            connection.close()
        time.sleep(0.05)
    raise TimeoutError("the served function never became ready")


def blast(ports: int | list[int], events: list[Event], senders: int = SENDERS) -> float:
    """Send every event (spread over ``senders`` keep-alive connections, and those over
    ``ports``); events/s."""
    failures: list[int] = []
    targets = [ports] if isinstance(ports, int) else ports
    shares = [(targets[i % len(targets)], events[i::senders]) for i in range(senders)]

    def send(port: int, share: list[Event]) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            for headers, body in share:
                connection.request("POST", "/", body=body, headers=headers)
                response = connection.getresponse()
                response.read()
                if response.status != 202:
                    failures.append(response.status)
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=share) for share in shares]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"{len(failures)} events were not accepted: {failures[:5]}")
    return len(events) / elapsed


def _serve(count: int, env: dict[str, str], tmp: str) -> tuple[list[int], list[Any]]:
    """``count`` processes of ``serve reconcile`` (one worker, eight threads each)."""
    ports, processes = [], []
    for index in range(count):
        port = free_port()
        log = (Path(tmp) / f"serve-{index}.log").open("wb")
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "functions", "serve", "reconcile", "--host", "127.0.0.1",
             "--port", str(port), "--workers", "1", "--threads", "8"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT))
        log.close()
        ports.append(port)
    for port in ports:
        _wait_ready(port)
    return ports, processes


def _stop(processes: list[Any]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        process.wait(30)


def run(repeats: int = 3, events: int = 3000, jobs: int = 50,
        replicas: tuple[int, ...] = (1, 2, 4)) -> dict[str, Any]:
    if 1 not in replicas:
        raise ValueError("replicas must include 1 (the per-worker figures)")
    scale_out: dict[str, Any] = {}
    job_rates: list[float] = []
    ignored_rates: list[float] = []
    with local_cluster() as cluster, tempfile.TemporaryDirectory() as tmp:
        kube: KubeClient = cluster.client()
        converged_fleet(kube, jobs)
        job_objects = kube.list(resources.PYTORCHJOBS, NAMESPACE)
        job_events = [resource_event(job_objects[i % len(job_objects)]) for i in range(events)]
        ignored = [foreign_event() for _ in range(events)]
        # The events are posted straight to the function, with no Broker and no token.
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig),
               "FUNCTIONS_DELIVERY_AUTH": "none"}
        for count in replicas:
            ports, processes = _serve(count, {**env, "PROMETHEUS_MULTIPROC_DIR": tmp}, tmp)
            try:
                blast(ports, job_events[: max(1, events // 10)])  # warm caches
                rates = [blast(ports, job_events, SENDERS * count) for _ in range(repeats)]
                if count == 1:
                    job_rates = rates
                    ignored_rates = [blast(ports, ignored) for _ in range(repeats)]
                scale_out[f"replicas_{count}_job_events_per_s"] = summary(rates, 1)
            finally:
                _stop(processes)
    return {"events": events, "jobs": jobs, "senders": SENDERS, "gunicorn_workers": 1,
            "threads": 8, "job_events_per_s": summary(job_rates, 1),
            "ignored_events_per_s": summary(ignored_rates, 1), "scale_out": scale_out}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.throughput")
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(run(args.repeats, args.events, args.jobs), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
