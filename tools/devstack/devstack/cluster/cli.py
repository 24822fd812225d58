"""``python -m devstack cluster up | down | status``: a local cluster that outlives the command.

``up`` starts the components detached, waits until the cluster is ready and prints the admin
kubeconfig path; ``down`` stops every process it started and removes the state directory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from devstack.cluster.binaries import BinariesError, ensure_bin_dir
from devstack.cluster.runner import ClusterError, LocalCluster, stop_process_group


def default_state_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "odh-training-functions" / "cluster"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("cluster", help="run a local control plane (etcd, "
                                   "kube-apiserver, controller-manager, scheduler, kwok)")
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="where state, logs and the kubeconfig live")
    parser.set_defaults(handler=main)


def _read_state(state_dir: Path) -> dict[str, object] | None:
    try:
        data = json.loads((state_dir / "state.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def up(state_dir: Path) -> int:
    state = _read_state(state_dir)
    if state is not None:
        pids = state.get("pids") or {}
        if isinstance(pids, dict) and any(_alive(int(p)) for p in pids.values()):
            print(f"a cluster is already running; its kubeconfig: {state['kubeconfig']}",
                  file=sys.stderr)
            print(state["kubeconfig"])
            return 0
        shutil.rmtree(state_dir, ignore_errors=True)
    started = time.monotonic()
    try:
        cluster = LocalCluster(ensure_bin_dir(), state_dir=state_dir, keep_state=True)
        cluster.start()
    except (BinariesError, ClusterError) as exc:
        shutil.rmtree(state_dir, ignore_errors=True)
        print(f"cluster up failed: {exc}", file=sys.stderr)
        return 1
    print(f"cluster ready in {time.monotonic() - started:.1f}s at {cluster.server}; "
          f"logs in {cluster.logs}", file=sys.stderr)
    print(f"export KUBECONFIG={cluster.kubeconfig}", file=sys.stderr)
    print(cluster.kubeconfig)
    return 0


def down(state_dir: Path) -> int:
    state = _read_state(state_dir)
    if state is None:
        print("no cluster is running", file=sys.stderr)
        shutil.rmtree(state_dir, ignore_errors=True)
        return 0
    pids = state.get("pids") or {}
    assert isinstance(pids, dict)
    for name in reversed(list(pids)):
        stop_process_group(int(pids[name]))
    shutil.rmtree(state_dir, ignore_errors=True)
    print("cluster stopped", file=sys.stderr)
    return 0


def status(state_dir: Path) -> int:
    state = _read_state(state_dir)
    if state is None:
        print("no cluster is running")
        return 1
    pids = state.get("pids") or {}
    assert isinstance(pids, dict)
    healthy = True
    for name, pid in pids.items():
        alive = _alive(int(pid))
        healthy &= alive
        print(f"{name:26} pid {pid:<8} {'running' if alive else 'STOPPED'}")
    print(f"kubeconfig: {state['kubeconfig']}")
    return 0 if healthy else 1


def main(args: argparse.Namespace) -> int:
    state_dir = args.state_dir or default_state_dir()
    actions = {"up": up, "down": down, "status": status}
    return actions[args.action](state_dir)
