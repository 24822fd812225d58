"""Local control plane start-up and teardown time with warm binaries.

Start: from ``LocalCluster.start()`` until every component is ready, the fake nodes are Ready
and the ``default`` ServiceAccount exists. Teardown: ``stop()`` until every process is gone.
"""

from __future__ import annotations

import time
from typing import Any

from bench.stats import summary
from devstack.cluster.binaries import ensure_bin_dir
from devstack.cluster.runner import LocalCluster


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
