"""``python -m tests.chaos.record [--out FILE] [--jobs-only]``: run the chaos scenario through
the dev stack (real ApiServerSource adapter, router, served functions) and keep the events the
router passed on, as recorded, for the replay tests.

The stack runs without a resync ticker, so the file holds only what the adapter saw.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from devstack.cluster.binaries import ensure_bin_dir
from devstack.stack import DevStack
from devstack.upstream import fetch_trainer_manifests
from functions.kube import resources
from functions.kube.client import KubeClient
from tests.chaos.scenario import (
    JOBS_NAMESPACE,
    RECORDING,
    apply_all,
    scenario_jobs,
    trainer_sample,
)
from tests.support import wait_for

QUIET_SECONDS = 5.0


def _condition(obj: dict[str, object] | None, kind: str) -> str:
    status = (obj or {}).get("status") or {}
    assert isinstance(status, dict)
    for cond in status.get("conditions") or []:
        if cond.get("type") == kind:
            return str(cond.get("status"))
    return ""


def jobs_succeeded(kube: KubeClient, namespace: str) -> bool:
    jobs = [j for res in (resources.PYTORCHJOBS, resources.TFJOBS, resources.MPIJOBS)
            for j in kube.list(res, namespace)]
    return len(jobs) == 3 and all(_condition(j, "Succeeded") == "True" for j in jobs)


def trainer_ready(kube: KubeClient) -> bool:
    return _condition(kube.get(resources.TRAINERS, "default-trainer"), "Ready") == "True"


def record_scenario(out: Path, *, with_trainer: bool = True, timeout: float = 120) -> int:
    """Run the scenario and write the recording to ``out``; return the number of events."""
    with tempfile.TemporaryDirectory() as tmp:
        recording = Path(tmp) / "events.jsonl"
        stack = DevStack(ensure_bin_dir(), trainer_manifests=fetch_trainer_manifests(),
                         resync_interval=None, record=recording, broker="emulated")
        stack.start()
        try:
            assert stack.cluster is not None and stack.router is not None
            kube = stack.cluster.client()
            if with_trainer:
                apply_all(kube, [trainer_sample()])
            kube.apply({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": JOBS_NAMESPACE}}, "chaos-user")
            apply_all(kube, scenario_jobs())
            wait_for(lambda: jobs_succeeded(kube, JOBS_NAMESPACE), timeout, 0.5,
                     "the jobs to succeed")
            if with_trainer:
                try:
                    wait_for(lambda: trainer_ready(kube), timeout, 0.5,
                             "the Trainer to be Ready")
                except AssertionError:
                    trainer = kube.get(resources.TRAINERS, "default-trainer") or {}
                    print(f"Trainer status: {trainer.get('status')}", file=sys.stderr)
                    raise
            time.sleep(QUIET_SECONDS)  # the tail: pod deletions, last status updates
            stack.router.wait_idle(30)
            stack.check_processes()
        except BaseException:
            if stack.cluster is not None:
                print(stack.cluster.logs_summary(40), file=sys.stderr)
                for component in stack.processes:
                    print(f"--- {component.name} ---\n{component.tail(40)}", file=sys.stderr)
            raise
        finally:
            stack.stop()
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(recording, out)
    return sum(1 for line in out.read_text().splitlines() if line.strip())


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.record")
    parser.add_argument("--out", type=Path, default=RECORDING)
    parser.add_argument("--jobs-only", action="store_true", help="leave the Trainer out")
    args = parser.parse_args()
    count = record_scenario(args.out, with_trainer=not args.jobs_only)
    print(f"{count} events recorded into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
