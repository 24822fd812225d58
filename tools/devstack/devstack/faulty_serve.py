"""``python -m devstack.faulty_serve FUNCTION --host H --port P``: a function served exactly as
``python -m functions serve`` serves it, but with a share of its API requests failing as a busy
API server's do, by the plan in ``FUNCTIONS_API_FAULTS`` (e.g. ``rate=0.1,seed=1``;
:func:`devstack.faults.plan_from_text`). The local stack starts functions so when the chaos
tests ask for faults; the product itself never injects any.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from devstack.faults import PLAN_VARIABLE, FaultInjectingTransport, plan_from_text
from functions.kube.client import KubeClient, RequestHook
from functions.runtime.app import FUNCTION_CHOICES
from functions.runtime.serve import EVENT_FUNCTION_THREADS, serve

log = logging.getLogger(__name__)


def faulty_kube(on_request: RequestHook) -> KubeClient:
    """A worker's API client whose transport injects the planned faults (seeded by the
    worker's pid, so replicas fail differently)."""
    text = os.environ[PLAN_VARIABLE]
    kube = KubeClient.from_config(on_request=on_request)
    log.warning("injecting API faults (%s)", text)
    kube.transport = FaultInjectingTransport(kube.transport, plan_from_text(text, os.getpid()))
    return kube


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.faulty_serve")
    parser.add_argument("function", choices=FUNCTION_CHOICES)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=EVENT_FUNCTION_THREADS)
    args = parser.parse_args(argv)
    if not os.environ.get(PLAN_VARIABLE):
        parser.error(f"{PLAN_VARIABLE} names no fault plan")
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve(args.function, args.port, threads=args.threads, host=args.host,
          kube_factory=faulty_kube)
    return 0


if __name__ == "__main__":
    sys.exit(main())
