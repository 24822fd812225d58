"""The steady benchmark's observer: when each job got all its pods, and when it was Running.

It runs in its own process, as ``bench.burst_workload``'s observer does (its own interpreter
lock, its own identity), and follows the same three watches. Times are ``time.monotonic()``,
which on Linux is one clock for every process of the machine, so the driver's create times and
these compare directly.

Protocol (one JSON line each way): the observer writes ``["ready", t]``; the driver writes the
number of jobs it will create; once every one of them is Running, or the deadline passes, the
observer writes ``["done", {job: [pods_at, running_at]}]`` (``null`` for what was not seen).
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from bench.burst_workload import JOB_LABEL, PER_JOB, REPO, _condition, start_watches


@dataclass
class Times:
    """Per job: the pods seen so far, and when it first had all of them and was Running."""

    pods: dict[str, set[str]] = field(default_factory=dict)
    pods_at: dict[str, float] = field(default_factory=dict)
    running_at: dict[str, float] = field(default_factory=dict)

    def apply(self, plural: str, event: str, obj: Mapping[str, Any], now: float) -> None:
        meta = obj["metadata"]
        if event == "DELETED":
            return
        if plural == "pods":
            owner = str((meta.get("labels") or {}).get(JOB_LABEL) or "")
            if not owner:
                return
            seen = self.pods.setdefault(owner, set())
            seen.add(str(meta["name"]))
            if len(seen) >= PER_JOB:
                self.pods_at.setdefault(owner, now)
        elif plural == "pytorchjobs" and _condition(obj, "Running"):
            self.running_at.setdefault(str(meta["name"]), now)

    def running(self) -> int:
        return len(self.running_at)

    def result(self) -> dict[str, list[float | None]]:
        names = set(self.pods_at) | set(self.running_at)
        return {name: [self.pods_at.get(name), self.running_at.get(name)]
                for name in sorted(names)}


def observe(kubeconfig: str, namespace: str, timeout: float, inbox: IO[str],
            outbox: IO[str]) -> None:
    def send(kind: str, value: Any) -> None:
        outbox.write(json.dumps([kind, value]) + "\n")
        outbox.flush()

    events = start_watches(kubeconfig, namespace)
    send("ready", time.monotonic())
    expected = int(inbox.readline())
    deadline = time.monotonic() + timeout
    times = Times()
    while times.running() < expected and time.monotonic() < deadline:
        try:
            plural, kind, obj = events.get(timeout=0.2)
        except queue.Empty:
            continue
        times.apply(plural, kind, obj, time.monotonic())
    send("done", times.result())


class SteadyObserver:
    """The driver's handle on the observer process."""

    def __init__(self, kubeconfig: str, namespace: str, timeout: float) -> None:
        self.argv = [sys.executable, "-m", "bench.steady_observer", kubeconfig, namespace,
                     str(timeout)]
        self.timeout = timeout
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, cwd=REPO)
        kind, _ = self._read()
        if kind != "ready":
            raise RuntimeError(f"the steady observer failed to start ({kind})")

    def _read(self) -> tuple[str, Any]:
        assert self.process is not None
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the steady observer exited ({self.process.wait()})")
        kind, value = json.loads(line)
        return str(kind), value

    def expect(self, jobs: int) -> None:
        assert self.process is not None
        assert self.process.stdin is not None
        self.process.stdin.write(f"{jobs}\n")
        self.process.stdin.flush()

    def result(self) -> dict[str, list[float | None]]:
        """Every job's ``[pods_at, running_at]``, once it is done (it ends by its deadline)."""
        kind, value = self._read()
        if kind != "done":
            raise RuntimeError(f"unexpected message from the steady observer: {kind}")
        return dict(value)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(5)


if __name__ == "__main__":
    kubeconfig_arg, namespace_arg, timeout_arg = sys.argv[1:4]
    observe(kubeconfig_arg, namespace_arg, float(timeout_arg), sys.stdin, sys.stdout)
