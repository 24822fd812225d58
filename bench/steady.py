"""Steady arrivals: PyTorchJobs created at a fixed rate (2 and 8 per second by default) for
5 minutes, each on a fresh cluster, for the Go training-operator (default and tuned client
settings) and ours on the emulated and on the real Knative data plane
(``bench.burst_systems``).

Each job is the burst's (Master 1 + Worker 2) whose pods kwok ends as Succeeded ``--run-for``
seconds after they run, so the fake nodes hold the jobs in flight, not every job ever made.
The driver creates job *i* at ``start + i / rate`` (a pool of threads, so one slow create does
not hold the next back) and records when the API server stored it; the observer
(``bench.steady_observer``) records when the job's third pod appeared and when its ``Running``
condition did. Reported per system and rate:

* ``pods_s`` / ``running_s``: p50, p95 and p99 of stored to all pods created, and to
  ``Running``, over every job (a job never seen so counts as slower than any that was: a
  percentile it falls in is ``null``), with ``jobs_without_pods`` / ``jobs_not_running``;
* ``late_creates``: creates sent more than a second after their time (the driver's own lag);
* ``controller_cpu_s`` and ``event_path_cpu_s`` over the run, and per job; the controller's
  peak RSS; the API server's and etcd's CPU;
* for ours, what each function did (``function_figures``: deliveries answered, handler
  seconds, from their metrics) and what the event path did with the events (deliveries,
  retries, dead letters).

``python -m bench.steady [--rates 2 8] [--seconds 300] [--systems ...] [--out DIR]`` writes
``steady.json``, ``steady.md`` and ``steady.png`` (:mod:`bench.report_steady`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import burst_functions, burst_proc, report_steady
from bench.burst import CREATE_THREADS, DRIVER_USER, OBSERVER_USER, _client, _prepare, _snapshot
from bench.burst_systems import Started, start
from bench.burst_workload import NAMESPACE, job
from bench.jobs import REPO
from bench.steady_observer import SteadyObserver
from devstack.cluster import kwok
from devstack.cluster.binaries import ensure_bin_dir
from functions.kube import resources
from functions.kube.client import KubeClient

SYSTEMS = ("go-default", "go-tuned", "ours", "ours-knative")
RATES = (2.0, 8.0)
SECONDS = 300.0
RUN_FOR = 30  # seconds a job's pods run before they succeed
DRAIN = 120.0  # seconds after the last create for the last jobs to run
LATE = 1.0
PERCENTILES = (50, 95, 99)
RESULTS = REPO / "bench" / "results"


def steady_job(index: int, run_for: int = RUN_FOR) -> dict[str, Any]:
    """The burst's job, whose pods kwok ends as Succeeded ``run_for`` seconds after they run."""
    found = job(index)
    for replica in found["spec"]["pytorchReplicaSpecs"].values():
        meta = replica["template"].setdefault("metadata", {})
        meta.setdefault("labels", {})[kwok.RESULT_LABEL] = "succeed"
        meta.setdefault("annotations", {})[kwok.DELAY_ANNOTATION] = f"{run_for}s"
    return found


def percentiles(values: Sequence[float | None], digits: int = 2) -> dict[str, float | None]:
    """Nearest-rank p50/p95/p99 of ``values``, ``None`` standing for never (slower than any
    value): a percentile that falls on one is ``None``."""
    ranked = sorted(values, key=lambda v: math.inf if v is None else v)
    found: dict[str, float | None] = {}
    for p in PERCENTILES:
        if not ranked:
            found[f"p{p}"] = None
            continue
        value = ranked[max(0, math.ceil(p / 100 * len(ranked)) - 1)]
        found[f"p{p}"] = None if value is None else round(value, digits)
    return found


def latencies(stored: dict[str, float], seen: dict[str, list[float | None]]
              ) -> tuple[list[float | None], list[float | None]]:
    """Per job created: stored to all pods, and stored to Running (``None``: never seen)."""
    pods: list[float | None] = []
    running: list[float | None] = []
    for name, at in stored.items():
        pods_at, running_at = seen.get(name, [None, None])
        pods.append(None if pods_at is None else max(0.0, pods_at - at))
        running.append(None if running_at is None else max(0.0, running_at - at))
    return pods, running


def _rounded(values: Sequence[float | None]) -> list[float | None]:
    return sorted(round(v, 3) for v in values if v is not None) + [
        None for v in values if v is None]


def _pace(driver: KubeClient, jobs: int, rate: float, run_for: int, began: float,
          stored: dict[str, float], late: list[float], errors: list[str]) -> None:
    """Create job *i* at ``began + i / rate``; record when each was stored."""
    lock = threading.Lock()

    def one(index: int, due: float) -> None:
        sent = time.monotonic()
        if sent - due > LATE:
            with lock:
                late.append(sent - due)
        try:
            created = driver.create(steady_job(index, run_for), res=resources.PYTORCHJOBS)
        except Exception as exc:  # counted and reported; the run goes on
            with lock:
                errors.append(f"job-{index}: {exc}")
            return
        with lock:
            stored[str(created["metadata"]["name"])] = time.monotonic()

    with ThreadPoolExecutor(CREATE_THREADS, thread_name_prefix="steady-create") as pool:
        for index in range(jobs):
            due = began + index / rate
            time.sleep(max(0.0, due - time.monotonic()))
            pool.submit(one, index, due)


def one_run(system: str, rate: float, seconds: float, bin_dir: Path, *,
            run_for: int = RUN_FOR, drain: float = DRAIN) -> dict[str, Any]:
    """Start ``system`` on a fresh cluster, create jobs at ``rate`` for ``seconds``, measure."""
    started = start(system, bin_dir)
    try:
        _prepare(started.cluster.client())
        started.watch_namespace(NAMESPACE)
        observer = SteadyObserver(str(started.cluster.user_kubeconfig(
            OBSERVER_USER, ("system:masters",))), NAMESPACE, seconds + drain)
        observer.start()
        try:
            return _measure(started, system, rate, seconds, run_for, observer)
        finally:
            observer.stop()
    finally:
        started.stop()


def _measure(started: Started, system: str, rate: float, seconds: float, run_for: int,
             observer: SteadyObserver) -> dict[str, Any]:
    jobs = max(1, round(rate * seconds))
    driver = _client(started, DRIVER_USER, CREATE_THREADS)
    stored: dict[str, float] = {}
    late: list[float] = []
    errors: list[str] = []
    before = _snapshot(started)
    functions_before = started.function_figures() if started.function_figures else {}
    observer.expect(jobs)
    began = time.monotonic()
    _pace(driver, jobs, rate, run_for, began, stored, late, errors)
    seen = observer.result()
    elapsed = time.monotonic() - began
    end = _snapshot(started)
    pods, running = latencies(stored, seen)
    result: dict[str, Any] = {
        "system": system, "rate": rate, "seconds": seconds, "jobs": jobs, "run_for": run_for,
        "elapsed_s": round(elapsed, 1), "create_errors": len(errors),
        "first_errors": errors[:3], "late_creates": len(late),
        "latest_create_s": round(max(late), 2) if late else 0.0,
        "pods_s": percentiles(pods), "running_s": percentiles(running),
        "jobs_without_pods": sum(1 for v in pods if v is None),
        "jobs_not_running": sum(1 for v in running if v is None),
        "controller_peak_rss_mib": round(burst_proc.peak_rss_mib(started.controller_pids), 1),
        "samples": {"pods_s": _rounded(pods), "running_s": _rounded(running)},
    }
    if started.function_figures is not None:
        result["function_figures"] = burst_functions.since(started.function_figures(),
                                                           functions_before)
    if started.delivery_counts is not None:
        result.update(started.delivery_counts())
    for name, value in end.items():
        spent = value - before[name]
        result[name] = round(spent, 2)
        result[f"{name}_per_job"] = round(spent / jobs, 4)
    return result


def run(rates: Sequence[float] = RATES, seconds: float = SECONDS,
        systems: Sequence[str] = SYSTEMS, run_for: int = RUN_FOR,
        drain: float = DRAIN) -> dict[str, Any]:
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise ValueError(f"unknown systems {sorted(unknown)}; known: {', '.join(SYSTEMS)}")
    extra = ("training-operator",) if any(s.startswith("go-") for s in systems) else ()
    bin_dir = ensure_bin_dir(extra)
    runs = []
    for rate in rates:
        for system in systems:
            print(f"== steady: {system}, {rate:g}/s for {seconds:g} s", file=sys.stderr,
                  flush=True)
            runs.append(one_run(system, rate, seconds, bin_dir, run_for=run_for, drain=drain))
    return {"at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": {"cpus": os.cpu_count()}, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.steady")
    parser.add_argument("--rates", type=float, nargs="+", default=list(RATES))
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--run-for", type=int, default=RUN_FOR)
    parser.add_argument("--drain", type=float, default=DRAIN)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    command = "python -m bench.steady " + " ".join(argv if argv is not None else sys.argv[1:])
    results = run(args.rates, args.seconds, args.systems, args.run_for, args.drain)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "steady.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "steady.md").write_text(report_steady.markdown(results, command.strip()))
    report_steady.plot(results, args.out / "steady.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
