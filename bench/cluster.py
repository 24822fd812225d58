"""Local control plane start-up and teardown time with warm binaries.

Start: from ``LocalCluster.start()`` until every component is ready, the fake nodes are Ready
and the ``default`` ServiceAccount exists. Teardown: ``stop()`` until every process is gone.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from functions.cluster.binaries import ensure_bin_dir
from functions.cluster.runner import LocalCluster


def run(repeats: int = 3) -> dict[str, Any]:
    bin_dir = ensure_bin_dir()
    starts: list[float] = []
    stops: list[float] = []
    for _ in range(repeats):
        cluster = LocalCluster(bin_dir)
        began = time.monotonic()
        cluster.start()
        starts.append(time.monotonic() - began)
        began = time.monotonic()
        cluster.stop()
        stops.append(time.monotonic() - began)
    return {
        "cluster_start_s": summary(starts),
        "cluster_stop_s": summary(stops),
    }


def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "n": len(values)}
