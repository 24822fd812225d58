"""A burst of PyTorchJobs, like for like: the API server's own limit, the upstream Go
training-operator (default and tuned client settings) and ours, each on a fresh cluster.

Workload (``bench.burst_workload``): N PyTorchJobs (Master 1 + Worker 2) created by a loop of
8 threads in one namespace. Measured per run:

* ``created_s`` (T): first create until every job has 3 pods, 3 services and ``Created``;
  ``pods_running_s``: until every pod is Running (the scheduler's and kwok's part);
  ``running_s``: until every job is ``Running`` (for ``limit``, which has no controller to
  write that condition: every pod Running), so ``running_s - pods_running_s`` is the
  controller's status trailing its pods;
* ``settled_s``: until the namespace's Events stop changing (their count is unchanged for
  ``SETTLE_QUIET`` seconds): a controller that sends its Events late (ours holds them while a
  burst is in flight) does that work before the end, where it is counted;
* CPU seconds of the controller's processes from the first create to T and to the end, and
  their peak RSS; for ``ours`` also the event path (the ApiServerSource adapters) and the
  router, which runs as threads of this process (only its live threads are counted, so the
  figure is a lower bound; ``bench_process_cpu_s`` is this whole process: create loop plus
  router); the API server's and etcd's CPU;
* API requests per job of the controller's identities (and of the event path), by verb and by
  verb and resource, from the API server's audit log between the first create and the end;
* jobs that never reached Created or Running before the timeout (reported, never dropped).

``limit`` is swept over the create loop's concurrency; the best point is reported as the API
server's limit for this workload, with every point.

``python -m bench.burst [--jobs 200] [--repeats 3] [--burst 1000] [--burst-repeats 1]
[--systems limit,go-default,go-tuned,ours] [--limit-threads 4,8,16,32] [--quick]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench import burst_audit, burst_functions, burst_proc
from bench.burst_systems import LIMIT_USER, SYSTEMS, Started, start
from bench.burst_workload import NAMESPACE, Observer, children, created_status, job
from bench.jobs import _untaint
from bench.stats import summary
from devstack.cluster import kwok
from devstack.cluster.binaries import ensure_bin_dir
from functions.kube import resources
from functions.kube.client import KubeClient
from functions.kube.config import from_kubeconfig
from functions.kube.transport import HttpTransport

CREATE_THREADS = 8
LIMIT_THREADS = (4, 8, 16, 32)
DRIVER_USER = "bench-driver"
OBSERVER_USER = "bench-observer"
SETTLE_QUIET = 3.0
SETTLE_LIMIT = 120.0
QUICK = {"jobs": 10, "repeats": 1, "burst": 0, "systems": ("limit", "go-tuned", "ours"),
         "limit_threads": (8,)}


def timeout_for(jobs: int) -> float:
    """Long enough for the Go operator at 20 QPS (about 15 requests per job)."""
    return 120 + 1.2 * jobs


def _client(started: Started, user: str, connections: int) -> KubeClient:
    """A client of its own identity that keeps a connection per thread of the loop."""
    path = started.cluster.user_kubeconfig(user, ("system:masters",))
    return KubeClient(HttpTransport(from_kubeconfig(path), pool_size=max(16, connections)))


def _snapshot(started: Started) -> dict[str, float]:
    cluster_pids = {c.name: c.process.pid for c in started.cluster.components if c.process}
    found = {
        "controller_cpu_s": burst_proc.cpu_seconds(started.controller_pids),
        "event_path_cpu_s": burst_proc.cpu_seconds(started.event_path_pids),
        "apiserver_cpu_s": burst_proc.cpu_seconds([cluster_pids["kube-apiserver"]]),
        "etcd_cpu_s": burst_proc.cpu_seconds([cluster_pids["etcd"]]),
        "bench_process_cpu_s": burst_proc.own_cpu_seconds(),
    }
    for part, pids in started.event_path_parts.items():
        found[f"event_path_cpu_s.{part}"] = burst_proc.cpu_seconds(pids)
    for part, pids in started.event_path_own_parts.items():
        found[f"event_path_cpu_s.{part}"] = burst_proc.own_cpu_of(pids)
    if started.in_process_threads is not None:
        found["router_threads_cpu_s"] = burst_proc.threads_cpu_seconds(
            started.in_process_threads)
    return found


def _create_loop(driver: KubeClient, controller: KubeClient | None, jobs: int, threads: int,
                 errors: list[str]) -> None:
    """Create the jobs; with ``controller`` (the limit) also each job's children and status."""

    def one(index: int) -> None:
        try:
            stored = driver.create(job(index), res=resources.PYTORCHJOBS)
            if controller is not None:
                for obj in children(stored):
                    controller.create(obj)
                controller.patch(resources.PYTORCHJOBS, stored["metadata"]["name"],
                                 created_status(), NAMESPACE, subresource="status")
        except Exception as exc:  # counted and reported; the burst goes on
            errors.append(f"job-{index}: {exc}")

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(jobs)))


def one_run(system: str, jobs: int, bin_dir: Path, *, threads: int = CREATE_THREADS,
            timeout: float | None = None,
            attach: Callable[[Started], Callable[[], None]] | None = None,
            adapter_env: dict[str, str] | None = None) -> dict[str, Any]:
    """Start ``system`` on a fresh cluster, run the burst, measure, stop everything.
    ``attach(started)`` runs just before the burst and returns what to call just after it
    (``bench.profile`` attaches its profilers so); ``adapter_env`` goes to the emulated
    path's adapters (``bench.profile`` turns their profiling on)."""
    timeout = timeout or timeout_for(jobs)
    started = start(system, bin_dir, adapter_env=adapter_env)
    try:
        _prepare(started.cluster.client())
        started.watch_namespace(NAMESPACE)
        observer = Observer(str(started.cluster.user_kubeconfig(OBSERVER_USER,
                                                                ("system:masters",))),
                            jobs, by_pods=system == "limit", timeout=timeout)
        observer.start()
        detach = attach(started) if attach is not None else None
        try:
            return _measure(started, system, jobs, threads, observer)
        finally:
            if detach is not None:
                detach()
            observer.stop()
    finally:
        started.stop()


def _prepare(admin: KubeClient, timeout: float = 60.0) -> None:
    """Make the first requests of the burst as fast as the rest, for every system alike: the
    namespace has its ``default`` ServiceAccount (pod admission needs it), and the jobs' CRD
    has been Established for more than two seconds (the API server holds every create of a
    custom resource for 2 s until then, so a controller's peers in HA see the CRD too)."""
    _untaint(admin)
    admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                 res=resources.NAMESPACES)
    deadline = time.monotonic() + timeout
    while admin.get(resources.SERVICEACCOUNTS, "default", NAMESPACE) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no default ServiceAccount in {NAMESPACE}")
        time.sleep(0.1)
    crd = admin.get(resources.CRDS, "pytorchjobs.kubeflow.org") or {}
    established = [c["lastTransitionTime"] for c in crd.get("status", {}).get("conditions", [])
                   if c.get("type") == "Established" and c.get("status") == "True"]
    if not established:
        raise RuntimeError("the PyTorchJob CRD is not established")
    # the stamp has whole seconds: one more second of margin
    time.sleep(max(0.0, burst_audit.timestamp(established[0]) + 3.0 - time.time()))


def _measure(started: Started, system: str, jobs: int, threads: int,
             observer: Observer) -> dict[str, Any]:
    errors: list[str] = []
    threads = threads if system == "limit" else CREATE_THREADS
    driver = _client(started, DRIVER_USER, threads)
    controller = _client(started, LIMIT_USER, threads) if system == "limit" else None
    before = _snapshot(started)
    functions_before = started.function_figures() if started.function_figures else {}
    began, wall_began = time.monotonic(), time.time()
    observer.begin(began)
    loop = threading.Thread(target=_create_loop, args=(driver, controller, jobs, threads, errors),
                            name="burst-create-loop")
    loop.start()
    marks: dict[str, float] = {}
    at_created: dict[str, float] | None = None
    while True:
        kind, value = observer.next()
        if kind == "done":
            counts = dict(value)
            break
        marks[kind] = float(value) - began
        if kind == "created":
            at_created = _snapshot(started)
    settled = _settle(started.cluster.client())
    settled_s = round(settled - began, 2) if settled is not None else None
    wall_end = time.time()
    end = _snapshot(started)
    peak = burst_proc.peak_rss_mib(started.controller_pids)
    loop.join()
    time.sleep(1.0)  # the last audit lines are written just after their answers
    audit = burst_audit.count_file(started.cluster.audit_log, wall_began, wall_end)
    result: dict[str, Any] = {
        "system": system, "jobs": jobs, "threads": threads, **counts,
        "create_errors": len(errors), "first_errors": errors[:3],
        **{f"{mark}_s": round(marks[mark], 2) if mark in marks else None
           for mark in ("created", "pods_running", "running")},
        "settled_s": settled_s,
        "controller_peak_rss_mib": round(peak, 1),
        "controller_requests": burst_audit.combined(audit, started.controller_users),
        "event_path_requests": burst_audit.combined(audit, started.event_path_users),
        "requests_by_user": {user: c["total"] for user, c in audit.items()},
        "cluster_controllers": ",".join(started.cluster.extra_controllers),
        "kwok_pod_play_parallelism": kwok.POD_PLAY_PARALLELISM,
        **(started.delivery_counts() if started.delivery_counts else {}),
    }
    if started.function_figures is not None:
        result["function_figures"] = burst_functions.since(started.function_figures(),
                                                           functions_before)
    for name, value in end.items():
        result[f"{name}_at_end"] = round(value - before[name], 2)
        if at_created is not None:
            result[f"{name}_at_created"] = round(at_created[name] - before[name], 2)
    return result


def _settle(admin: KubeClient) -> float | None:
    """Wait until the count of the namespace's Events has not changed for ``SETTLE_QUIET``
    seconds (within ``SETTLE_LIMIT``); when it last changed, or ``None``."""
    deadline = time.monotonic() + SETTLE_LIMIT
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        page = next(admin.list_pages(resources.EVENTS, NAMESPACE, page_size=1))
        count = len(page.get("items") or []) + int(
            (page.get("metadata") or {}).get("remainingItemCount") or 0)
        now = time.monotonic()
        if count != last:
            last, since = count, now
        elif now - since >= SETTLE_QUIET:
            return since
        time.sleep(0.5)
    return None


# -- summaries (pure) ----------------------------------------------------------------------------

TIMES = ("created_s", "pods_running_s", "running_s", "settled_s")
COUNTS = ("jobs_not_created", "jobs_not_running", "create_errors")
# only for systems with an event path of their own (ours): none may be lost
DELIVERY_COUNTS = ("deliveries", "retried_deliveries", "dead_letters")


def summarise(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Median, min and max of each figure over ``runs`` of one system and size. A run that
    timed out adds no time, but is counted in ``runs_timed_out`` and in the jobs missing."""
    jobs = int(runs[0]["jobs"])
    found: dict[str, Any] = {"runs": len(runs),
                             "runs_timed_out": sum(1 for r in runs if r.get("timed_out"))}
    for name in TIMES:
        values = [r[name] for r in runs if r.get(name) is not None]
        if values:
            found[name] = summary(values)
    for name in COUNTS:
        found[name] = summary(r.get(name, 0) for r in runs)
    for name in DELIVERY_COUNTS:
        if any(name in r for r in runs):
            found[name] = summary(r.get(name, 0) for r in runs)
    for name in sorted({k for r in runs for k in r if k.endswith(("_at_created", "_at_end"))}):
        values = [r[name] for r in runs if r.get(name) is not None]
        if values:
            found[name] = summary(values)
    found["controller_peak_rss_mib"] = summary(r["controller_peak_rss_mib"] for r in runs)
    for key in ("controller_requests", "event_path_requests"):
        found[key.replace("requests", "requests_per_job")] = per_job(
            [r[key] for r in runs], jobs)
    found["requests_by_user"] = _median_counts([r["requests_by_user"] for r in runs])
    if any("function_figures" in r for r in runs):
        found["function_figures"] = _median_counts(
            [r["function_figures"] for r in runs if "function_figures" in r])
    found["cluster_controllers"] = str(runs[0].get("cluster_controllers") or "")
    found["kwok_pod_play_parallelism"] = runs[0].get("kwok_pod_play_parallelism")
    return found


def per_job(counts: Sequence[Mapping[str, Any]], jobs: int) -> dict[str, Any]:
    """Requests per job: the total and each verb as figures, each verb and resource as the
    median over runs."""
    if not any(c.get("total") for c in counts):
        return {}
    verbs = sorted({v for c in counts for v in c.get("by_verb", {})})
    return {
        "total_requests": summary((c.get("total", 0) / jobs for c in counts), 2),
        "by_verb": {f"{v}_requests": summary(
            (c.get("by_verb", {}).get(v, 0) / jobs for c in counts), 2) for v in verbs},
        "by_verb_resource": {k: round(v / jobs, 2) for k, v in _median_counts(
            [c.get("by_verb_resource", {}) for c in counts]).items()},
    }


def _median_counts(counts: Iterable[Mapping[str, float]]) -> dict[str, float]:
    listed = list(counts)
    keys = sorted({k for c in listed for k in c})
    return {k: statistics.median(c.get(k, 0) for c in listed) for k in keys}


def best_limit(points: Mapping[int, Mapping[str, Any]]) -> int:
    """The concurrency with the shortest median T (runs that timed out do not qualify)."""
    timed = {t: p["created_s"]["median"] for t, p in points.items() if "created_s" in p}
    if not timed:
        raise RuntimeError("no limit run finished")
    return min(timed, key=lambda t: (timed[t], t))


# -- the suite ---------------------------------------------------------------------------------

def _size(jobs: int, repeats: int, systems: Sequence[str], limit_threads: Sequence[int],
          bin_dir: Path, timeout: float | None) -> dict[str, Any]:
    """Every system's runs at one size, round-robin (each system's first run, then each one's
    second, ...): a machine whose speed drifts over minutes weighs on every system alike."""
    points = [("limit", threads) for threads in limit_threads] if "limit" in systems else []
    points += [(system, CREATE_THREADS) for system in systems if system != "limit"]
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {point: [] for point in points}
    for index in range(repeats):
        for system, threads in points:
            print(f"== burst: {system}, {jobs} jobs, run {index + 1} of {repeats}",
                  file=sys.stderr, flush=True)
            runs[(system, threads)].append(one_run(system, jobs, bin_dir, threads=threads,
                                                   timeout=timeout))
    result: dict[str, Any] = {}
    for system in systems:
        if system == "limit":
            sweep = {t: summarise(runs[("limit", t)]) for t in limit_threads}
            best = best_limit(sweep)
            result["limit"] = {"best_threads": best, **sweep[best], "sweep": {
                f"threads_{t}": {k: p[k] for k in TIMES if k in p} for t, p in sweep.items()}}
        else:
            result[system] = summarise(runs[(system, CREATE_THREADS)])
    return result


def run(repeats: int = 3, jobs: int = 200, burst: int | None = 1000, burst_repeats: int = 1,
        systems: Sequence[str] = SYSTEMS, limit_threads: Sequence[int] = LIMIT_THREADS,
        timeout: float | None = None) -> dict[str, Any]:
    """``repeats`` runs per system of ``jobs`` jobs (``0``: none), then ``burst_repeats`` of
    ``burst`` jobs (``0``/``None``: none). Each run starts a fresh cluster."""
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise ValueError(f"unknown systems {sorted(unknown)}; known: {', '.join(SYSTEMS)}")
    extra = ("training-operator",) if any(s.startswith("go-") for s in systems) else ()
    bin_dir = ensure_bin_dir(extra)
    result: dict[str, Any] = {"burst_repeats": burst_repeats, "systems": ",".join(systems),
                              "create_threads": CREATE_THREADS}
    if repeats:
        result["repeats"] = repeats
        result[f"jobs_{jobs}"] = _size(jobs, repeats, systems, limit_threads, bin_dir, timeout)
    if burst and burst != jobs:
        result[f"jobs_{burst}"] = _size(burst, burst_repeats, systems, limit_threads, bin_dir,
                                        timeout)
    return result


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.burst")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--burst", type=int, default=1000, help="0: no burst run")
    parser.add_argument("--burst-repeats", type=int, default=1)
    parser.add_argument("--systems", type=_csv, default=None,
                        help=f"comma-separated subset of {','.join(SYSTEMS)} (default: all)")
    parser.add_argument("--limit-threads", type=_csv, default=None,
                        help="create-loop concurrencies of the limit sweep (default: "
                             f"{','.join(map(str, LIMIT_THREADS))})")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds per run before unfinished jobs are counted as missing")
    parser.add_argument("--quick", action="store_true",
                        help="smoke size: 10 jobs, one run, limit (8 threads) + go-tuned + ours")
    args = parser.parse_args(argv)
    options: dict[str, Any] = {
        "repeats": args.repeats, "jobs": args.jobs, "burst": args.burst,
        "burst_repeats": args.burst_repeats, "timeout": args.timeout}
    if args.quick:
        options.update(QUICK)
    if args.systems is not None:
        options["systems"] = tuple(args.systems)
    if args.limit_threads is not None:
        options["limit_threads"] = tuple(int(t) for t in args.limit_threads)
    print(json.dumps(run(**options), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
