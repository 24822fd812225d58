"""The burst workload and its observer: what is created, and how "done" is seen.

Workload: N PyTorchJobs (Master 1 + Worker 2, the sample of ``config/samples`` as in
``bench.jobs``) created by a concurrent loop in one namespace. Done: every job has its 3 pods
and 3 services and its ``Created`` condition (time T), then every job's ``Running`` condition
(or, with no controller to write it, every pod Running).

The observer runs in its own process (its own interpreter lock, so parsing watch events does
not slow the create loop) with its own identity, and follows three watches (pods, services,
jobs) of the namespace instead of polling lists, which at 3,000 pods would load the API server
more than the systems measured.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from bench.jobs import _job
from devstack.cluster import kwok
from functions.jobs.core.defaults import with_defaults
from functions.jobs.core.model import parse_job
from functions.jobs.core.objects import desired_pod, desired_service
from functions.jobs.core.settings import Settings
from functions.kube import resources
from functions.kube.config import from_kubeconfig
from functions.kube.resources import Resource
from functions.kube.transport import HttpTransport, Request, TransportError

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "burst"
PER_JOB = 3  # Master 1 + Worker 2: pods and services per job
JOB_LABEL = "training.kubeflow.org/job-name"  # on every pod, by upstream and by ours
WATCHED = (resources.PODS, resources.SERVICES, resources.PYTORCHJOBS)


def nodes() -> list[dict[str, Any]]:
    """Four fake nodes that hold 1,000 jobs' pods (3,000 x 100m CPU, 256Mi) with room left;
    the cluster's default nodes hold about 2,500 such pods."""
    return [kwok.node(f"kwok-burst-{i}", cpu="128", memory="1Ti", pods="1000") for i in range(4)]


def job(index: int, namespace: str = NAMESPACE) -> dict[str, Any]:
    return _job(f"job-{index}", namespace)


def children(created: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pods and services a controller creates for ``created`` (the job as stored)."""
    parsed = with_defaults(parse_job(dict(created)))
    found: list[dict[str, Any]] = []
    for rtype in parsed.replica_specs:
        for index in range(parsed.replicas(rtype)):
            found.append(desired_pod(parsed, rtype, index, Settings())[0])
            found.append(desired_service(parsed, rtype, index))
    return found


def created_status() -> dict[str, Any]:
    """The status a controller writes once a job's children exist."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"status": {"conditions": [{
        "type": "Created", "status": "True", "reason": "PyTorchJobCreated",
        "message": "PyTorchJob is created.", "lastUpdateTime": now, "lastTransitionTime": now}]}}


def _condition(obj: Mapping[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


@dataclass
class Progress:
    """What the watches have shown so far. A job is running when its ``Running`` condition is
    true, or with ``by_pods`` (no controller writes conditions) when all its pods run."""

    jobs: int
    by_pods: bool = False
    pods: set[str] = field(default_factory=set)
    running_pods: dict[str, str] = field(default_factory=dict)  # pod -> its job
    services: set[str] = field(default_factory=set)
    created: set[str] = field(default_factory=set)
    running: set[str] = field(default_factory=set)

    def apply(self, plural: str, event: str, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        name = str(meta["name"])
        gone = event == "DELETED"
        if plural == "pods":
            _mark(self.pods, name, not gone)
            if not gone and (obj.get("status") or {}).get("phase") == "Running":
                self.running_pods[name] = str((meta.get("labels") or {}).get(JOB_LABEL, ""))
            else:
                self.running_pods.pop(name, None)
        elif plural == "services":
            _mark(self.services, name, not gone)
        elif plural == "pytorchjobs":
            _mark(self.created, name, not gone and _condition(obj, "Created"))
            _mark(self.running, name, not gone and _condition(obj, "Running"))

    def all_created(self) -> bool:
        return (len(self.pods) >= PER_JOB * self.jobs and len(self.services) >= PER_JOB *
                self.jobs and len(self.created) >= self.jobs)

    def jobs_running(self) -> int:
        if self.by_pods:
            per_job = Counter(self.running_pods.values())
            return sum(1 for job, pods in per_job.items() if job and pods >= PER_JOB)
        return len(self.running)

    def all_running(self) -> bool:
        return self.jobs_running() >= self.jobs

    def all_pods_running(self) -> bool:
        """Every job's pods are Running: the cluster's part of ``all_running`` (the scheduler
        and kwok), without the controller's status write that follows it."""
        return len(self.running_pods) >= PER_JOB * self.jobs

    def counts(self) -> dict[str, int]:
        running = self.jobs_running()
        return {"pods": len(self.pods), "pods_running": len(self.running_pods),
                "services": len(self.services), "jobs_created": len(self.created),
                "jobs_running": running, "jobs_not_created": self.jobs - len(self.created),
                "jobs_not_running": self.jobs - running}


def _mark(names: set[str], name: str, present: bool) -> None:
    if present:
        names.add(name)
    else:
        names.discard(name)


def _watch(transport: HttpTransport, res: Resource, namespace: str,
           events: queue.Queue[tuple[str, str, dict[str, Any]]], ready: threading.Event) -> None:
    """List, then watch from the list's version; after any break, list and watch again."""
    while True:
        try:
            listed = json.loads(transport.send(
                Request("GET", res.path(namespace)), 30).body)
            for item in listed.get("items") or []:
                events.put((res.plural, "ADDED", item))
            version = str(listed["metadata"]["resourceVersion"])
            ready.set()
            query = {"watch": "1", "resourceVersion": version, "allowWatchBookmarks": "true",
                     "timeoutSeconds": "1800"}
            _, _, raw = transport.stream(Request("GET", res.path(namespace), query), 120)
            buffer = b""
            for chunk in raw.stream(1 << 16):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    event = json.loads(line)
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        events.put((res.plural, event["type"], event["object"]))
            raw.release_conn()
        except (TransportError, ValueError, KeyError):
            time.sleep(0.2)


def start_watches(kubeconfig: str, namespace: str
                  ) -> queue.Queue[tuple[str, str, dict[str, Any]]]:
    """The :data:`WATCHED` watches of ``namespace`` on threads of their own, once each has
    listed: every change they see goes to the queue as ``(plural, type, object)``."""
    transport = HttpTransport(from_kubeconfig(kubeconfig), pool_size=len(WATCHED))
    events: queue.Queue[tuple[str, str, dict[str, Any]]] = queue.Queue()
    readies = []
    for res in WATCHED:
        ready = threading.Event()
        readies.append(ready)
        threading.Thread(target=_watch, args=(transport, res, namespace, events, ready),
                         name=f"watch-{res.plural}", daemon=True).start()
    for ready in readies:
        ready.wait(60)
    return events


def observe(kubeconfig: str, namespace: str, jobs: int, by_pods: bool, timeout: float,
            inbox: IO[str], outbox: IO[str]) -> None:
    """The observer process: report ``ready``, read the start time, then report ``created``,
    ``pods_running`` and ``running`` (monotonic times) as they happen and ``done`` with the
    counts at the end; one JSON line ``[kind, value]`` each."""

    def send(kind: str, value: Any) -> None:
        outbox.write(json.dumps([kind, value]) + "\n")
        outbox.flush()

    events = start_watches(kubeconfig, namespace)
    send("ready", time.monotonic())
    started = float(inbox.readline())
    deadline = started + timeout
    progress = Progress(jobs, by_pods)
    marks = {"created": progress.all_created, "pods_running": progress.all_pods_running,
             "running": progress.all_running}
    reached: set[str] = set()
    while len(reached) < len(marks) and time.monotonic() < deadline:
        try:
            plural, kind, obj = events.get(timeout=0.2)
        except queue.Empty:
            continue
        progress.apply(plural, kind, obj)
        now = time.monotonic()  # one change can complete several marks: one time for all
        for mark, done in marks.items():
            if mark not in reached and done():
                reached.add(mark)
                send(mark, now)
    send("done", {**progress.counts(), "timed_out": not {"created", "running"} <= reached})


class Observer:
    """The parent's handle on the observer process (``python -m bench.burst_workload``)."""

    def __init__(self, kubeconfig: str, jobs: int, *, by_pods: bool, timeout: float,
                 namespace: str = NAMESPACE) -> None:
        self.argv = [sys.executable, "-m", "bench.burst_workload", kubeconfig, namespace,
                     str(jobs), "1" if by_pods else "0", str(timeout)]
        self.timeout = timeout
        self.process: subprocess.Popen[str] | None = None
        self._messages: queue.Queue[tuple[str, Any]] = queue.Queue()

    def start(self) -> None:
        self.process = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, cwd=REPO)
        threading.Thread(target=self._read, name="burst-observer-reader", daemon=True).start()
        kind, _ = self._next(90)
        if kind != "ready":
            raise RuntimeError(f"the burst observer failed to start ({kind})")

    def _read(self) -> None:
        assert self.process is not None
        assert self.process.stdout is not None
        for line in self.process.stdout:
            kind, value = json.loads(line)
            self._messages.put((str(kind), value))
        self._messages.put(("exited", self.process.wait()))

    def begin(self, started: float) -> None:
        assert self.process is not None
        assert self.process.stdin is not None
        self.process.stdin.write(f"{started}\n")
        self.process.stdin.flush()

    def _next(self, timeout: float) -> tuple[str, Any]:
        try:
            return self._messages.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError("the burst observer went silent") from None

    def next(self) -> tuple[str, Any]:
        """The next message: ``created``, ``pods_running``, ``running``, ``done`` (or
        ``exited`` if it died)."""
        kind, value = self._next(self.timeout + 60)
        if kind == "exited":
            raise RuntimeError(f"the burst observer exited with code {value}")
        return kind, value

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(5)


if __name__ == "__main__":
    kubeconfig_arg, namespace_arg, jobs_arg, by_pods_arg, timeout_arg = sys.argv[1:6]
    observe(kubeconfig_arg, namespace_arg, int(jobs_arg), by_pods_arg == "1",
            float(timeout_arg), sys.stdin, sys.stdout)
