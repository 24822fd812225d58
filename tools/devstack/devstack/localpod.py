"""What the local kubelet (:mod:`devstack.kubelet`) keeps per pod, and how a pod's
sandbox reaches the API server and the cluster network."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from devstack.podroot import PodRoot

__all__ = ["LocalPod", "PodNetwork", "now_iso"]


@dataclass(frozen=True)
class PodNetwork:
    """How a pod's sandbox reaches the API server and the cluster network."""

    api_port: int
    api_sock: Path
    proxy_port: int
    proxy_sock: Path
    pods_dir: Path
    handoff_sock: Path


@dataclass
class LocalPod:
    """One pod this kubelet runs."""

    pod: dict[str, Any]
    binary: str
    ip: str
    start_time: str
    log: Path
    process: subprocess.Popen[bytes] | None = None
    started_at: str | None = None
    ready: bool = False
    restarts: int = 0
    last_exit: int | None = None
    last_finished_at: str | None = None
    next_start: float = 0.0
    next_probe: float = 0.0
    successes: int = 0
    failures: int = 0
    reported: tuple[bool, bool, int] | None = None
    root: PodRoot | None = None
    next_refresh: float = 0.0
    stopping: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        meta = self.pod["metadata"]
        return f"{meta['namespace']}/{meta['name']}"

    @property
    def uid(self) -> str:
        return str(self.pod["metadata"]["uid"])


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
