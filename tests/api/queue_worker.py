"""``python -m tests.api.queue_worker KUBECONFIG NAMESPACE START STOP_FILE NAME``: one replica
of the queue handler in a process of its own, for the test that runs two of them at once.

From the wall-clock time ``START`` until ``STOP_FILE`` exists it asks for queue passes as fast
as it can (as a burst of job events would), through the real handler and its Lease, which it
holds in ``LEASE_NAMESPACE``. Its Admitted Events name it (``NAME``) as their component. It
prints how many passes it ran and how many found the Lease taken.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from functions.api import queue_controller
from functions.core.keys import ObjectKey
from functions.kube.client import KubeClient
from functions.kube.config import from_kubeconfig
from functions.runtime.recorder import EventRecorder
from functions.runtime.registry import Context


def main(argv: list[str]) -> int:
    kubeconfig, namespace, start, stop_file, name = argv
    kube = KubeClient.from_config(from_kubeconfig(kubeconfig))
    context = Context(kube, EventRecorder(kube, name), "reconcile")
    # A job that does not exist: "a job went away" always asks for a pass.
    key = ObjectKey("kubeflow.org/v1", "PyTorchJob", namespace, "gone")
    time.sleep(max(0.0, float(start) - time.time()))
    passes = refused = 0
    while not Path(stop_file).exists():
        result = queue_controller.admit(context, key)
        passes += 1
        if (result is not None
                and result.requeue_after == queue_controller.LEASE_TAKEN_RETRY_SECONDS):
            refused += 1
            time.sleep(0.005)
    print(json.dumps({"passes": passes, "refused": refused}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
