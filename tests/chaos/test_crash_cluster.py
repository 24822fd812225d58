"""Crash tolerance: the functions served by gunicorn (two workers, as in production) while a
killer sends SIGKILL to a random worker at random moments, mid-reconcile. Gunicorn starts new
workers; the Broker-like sender retries what got no answer. After the killing stops, resyncs
bring the jobs to exactly the state a clean replay ends in, with no duplicate pods.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.cluster.ports import free_port
from devstack.cluster.runner import LocalCluster
from devstack.recording import RecordedRequest, ReplayReport, replay
from functions.kube.client import KubeClient
from functions.runtime.sender import post_event
from tests.chaos.conftest import jobs_stream
from tests.chaos.replay import resync_event
from tests.chaos.scenario import (
    JOB_KINDS,
    apply_all,
    differences,
    duplicate_pods,
    first_added,
    snapshot,
)
from tests.support import REPO, wait_for

pytestmark = pytest.mark.cluster

WORKERS = 2
KILLS = 3  # the least number of workers killed while the stream is being handled
MAX_PASSES = 20  # replays of the stream before the killer is deemed broken


def worker_pids(master: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{master}/task").iterdir():
        found.extend(int(pid) for pid in (task / "children").read_text().split())
    return found


class Killer:
    """SIGKILLs a random worker of ``master`` every 0.2 to 0.8 s until stopped."""

    def __init__(self, master: int, seed: int = 4) -> None:
        self.master = master
        self.kills: list[int] = []
        self._random = random.Random(seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="killer", daemon=True)

    def __enter__(self) -> Killer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._random.uniform(0.2, 0.8)):
            pids = worker_pids(self.master)
            if pids:
                victim = self._random.choice(pids)
                try:
                    os.kill(victim, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                self.kills.append(victim)


@pytest.fixture
def served(cluster: LocalCluster, tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "PYTHONUNBUFFERED": "1",
           "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    log = (tmp_path / "gunicorn.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "functions", "serve", "all", "--host", "127.0.0.1",
         "--port", str(port), "--workers", str(WORKERS), "--threads", "4"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_for(lambda: post_event(url, *resync_event(), 30).status == 202, 60, 0.2,
                 "the served functions")
        yield url, process
    finally:
        process.terminate()
        process.wait(30)
        log.close()


def test_sigkilled_workers_lose_no_work(cluster: LocalCluster, kube: KubeClient,
                                        namespace: str, recording: list[RecordedRequest],
                                        clean_jobs_state: dict[str, Any],
                                        served: tuple[str, subprocess.Popen[bytes]]) -> None:
    url, master = served
    stream = jobs_stream(recording, namespace)
    apply_all(kube, first_added(stream, JOB_KINDS))
    first_workers = set(worker_pids(master.pid))
    reports: list[ReplayReport] = []
    with Killer(master.pid) as killer:
        # A faster machine handles the stream sooner: replay it until the killer has struck
        # often enough, so the test does not depend on how long one pass takes.
        while len(reports) < 2 or (len(killer.kills) < KILLS and len(reports) < MAX_PASSES):
            reports.append(replay(stream, url, retries=6, backoff=0.1))
    assert len(killer.kills) >= KILLS, "the killer must strike while events are handled"
    assert master.poll() is None, "gunicorn's master survives its workers"
    wait_for(lambda: len(worker_pids(master.pid)) == WORKERS, 30, 0.2, "respawned workers")
    assert not set(worker_pids(master.pid)) & first_workers

    headers, body = resync_event()
    resyncs = 0

    def converged() -> bool:
        nonlocal resyncs
        post_event(url, headers, body, 60)
        resyncs += 1
        return not differences(snapshot(kube, [namespace]), clean_jobs_state)

    try:
        wait_for(converged, 120, 1.0, "convergence after the crashes")
    finally:
        diff = differences(snapshot(kube, [namespace]), clean_jobs_state)
        print(f"{len(killer.kills)} workers killed in {len(reports)} passes; "
              f"{sum(r.sent for r in reports)} events sent, "
              f"{sum(r.attempts for r in reports)} attempts, "
              f"{sum(len(r.rejected) for r in reports)} given up; {resyncs} resyncs to converge")
    assert not diff, "\n".join(diff)
    assert duplicate_pods(kube, namespace) == {}
