"""``python -m devstack dev``: run the product locally until Ctrl-C.

Starts a local cluster, installs the CRDs and RBAC, runs the reconcile, gc and status
functions under gunicorn with their own ServiceAccount tokens, and the event path in front of
them: by default the real Knative Eventing (controllers, webhook, Broker ingress and filter,
in-memory channel, ApiServerSource and PingSource adapters) fed ``eventing/`` unchanged;
with ``--emulated-broker`` the ApiServerSource adapter and the router instead. Then it prints
what to try.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path

from devstack import controllers
from devstack.cluster.binaries import BinariesError, ensure_bin_dir
from devstack.cluster.runner import ClusterError
from devstack.stack import DevStack
from devstack.upstream import ManifestsError, trainer_manifests


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("dev", help="run everything locally (cluster, functions, "
                                   "Knative Eventing) until Ctrl-C")
    parser.add_argument("--resync", type=float, default=None, metavar="SECONDS",
                        help="resync tick period (default: the schedule of "
                             "eventing/pingsource.yaml, as in a cluster; 0 = off; with the "
                             "real Knative, a period below a day that divides a minute, an "
                             "hour or a day)")
    parser.add_argument("--record", type=Path,
                        help="append every event the Broker accepted to this JSONL")
    parser.add_argument("--emulated-broker", action="store_true",
                        help="deliver with the router (devstack.broker) instead of "
                             "the real Knative Eventing")
    parser.add_argument("--no-source-filters", action="store_true",
                        help="leave out config/components/source-filters (the adapters then "
                             "send every change, and Knative's new-apiserversource-filters "
                             "flag stays off)")
    parser.add_argument("--no-delivery-auth", action="store_true",
                        help="the functions take deliveries from anyone "
                             "(FUNCTIONS_DELIVERY_AUTH=none) and Knative runs without "
                             "authentication-oidc")
    parser.add_argument("--admin", action="store_true",
                        help="run the functions as cluster admin instead of their "
                             "ServiceAccounts")
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    started = time.monotonic()
    try:
        stack = DevStack(ensure_bin_dir(controllers.GROUPS), trainer_manifests=trainer_manifests(),
                         upstream_controllers=True,
                         resync_interval=args.resync, record=args.record,
                         as_service_accounts=not args.admin,
                         source_filters=not args.no_source_filters,
                         delivery_auth=not args.no_delivery_auth,
                         broker="emulated" if args.emulated_broker else "knative")
        stack.start()
    except (BinariesError, ClusterError, ManifestsError, RuntimeError, TimeoutError,
            ValueError) as exc:
        print(f"dev: {exc}", file=sys.stderr)
        return 1
    assert stack.cluster is not None
    kubeconfig = stack.cluster.kubeconfig
    kubectl = stack.bin_dir / "kubectl"
    functions = ", ".join(f"{name} {url}" for name, url in stack.function_urls.items())
    trainjob_events = ""
    if stack.router is not None:
        path = f"router {stack.router.url}"
    else:
        trainjob_events = (f"\n  {kubectl} apply -k config/components/trainjobs   # once the "
                           "Trainer is Ready: TrainJobs queued by the API admitted on events")
        path = (f"Knative Eventing ({kubectl} get broker,trigger,apiserversource,pingsource "
                "-A)")
    print(f"""
Ready in {time.monotonic() - started:.1f}s.
  kubeconfig : {kubeconfig}
  events     : {path}
  functions  : {functions}
  logs       : {stack.cluster.logs}

Try:
  export KUBECONFIG={kubeconfig}
  {kubectl} apply -f config/samples/trainer.yaml
  {kubectl} get trainer default-trainer -w
  {kubectl} create namespace demo && {kubectl} apply -n demo -f config/samples/pytorchjob.yaml
  {kubectl} get pytorchjobs,pods -n demo -w
  {kubectl} apply -n demo -f config/samples/trainjob.yaml   # once the Trainer is Ready
  {kubectl} get trainjobs,jobsets,jobs,pods -n demo -w{trainjob_events}

Ctrl-C stops everything.""", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(1.0):
            stack.check_processes()
    except KeyboardInterrupt:
        pass
    except RuntimeError as exc:
        print(f"dev: {exc}", file=sys.stderr)
        return 1
    finally:
        print("stopping ...", file=sys.stderr)
        stack.stop()
    return 0
