"""``python -m functions doctor [--kubeconfig PATH] [--context C] [-n NS] [-o text|json]``.

Reads the cluster (read-only), prints one line per check (``PASS``, ``WARN``, ``FAIL``,
``SKIP``) with what to change under each that did not pass, or (``-o json``, also ``--json``)
one JSON document of the findings. Exit codes are the command-line clients' own
(:mod:`functions.api.exits`): 1 when any check failed, 4 when the cluster cannot be read at
all, else 0. Run it before installing (the checks of our own objects then report ``SKIP``) and
again after.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TextIO

from functions.api.exits import EPILOG, ExitCode
from functions.core.errors import TemporaryError
from functions.doctor.core.checks import failed, run
from functions.doctor.core.model import Finding, Status

DEFAULT_NAMESPACE = "opendatahub"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    about = ("check a cluster before (and after) installing: Knative, network policy, "
             "conflicting operators, CRDs, permissions, readiness")
    parser = subparsers.add_parser("doctor", help=about, description=about, epilog=EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", default=None,
                        help="kubeconfig to use (default: $KUBECONFIG, a list merged as "
                             "kubectl merges it, else ~/.kube/config, else in-cluster)")
    parser.add_argument("--context", default=None,
                        help="kubeconfig context (default: the current context)")
    parser.add_argument("--namespace", "-n", default=DEFAULT_NAMESPACE,
                        help="the install's namespace (default: %(default)s)")
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text",
                        help="text (default), or json: one document of the findings")
    parser.add_argument("--json", dest="output", action="store_const", const="json",
                        help="the same as -o json")
    parser.set_defaults(handler=main)


def render(findings: Sequence[Finding], out: TextIO) -> None:
    width = max(len(f.check) for f in findings)
    for finding in findings:
        out.write(f"{finding.status.value.upper():4}  {finding.check:{width}}  "
                  f"{finding.summary}\n")
        pad = " " * (width + 8)
        for detail in finding.details:
            out.write(f"{pad}- {detail}\n")
        if finding.fix and finding.status is not Status.PASS:
            out.write(f"{pad}fix: {finding.fix}\n")
    counts = {s: sum(f.status is s for f in findings) for s in Status}
    out.write(", ".join(f"{n} {s.value}" for s, n in counts.items() if n) + "\n")


def main(args: argparse.Namespace) -> int:
    # Imported here: the kubeconfig loader and the client, which --help does not need.
    from functions.api.connect import kubeconfig
    from functions.api.exits import CliError
    from functions.doctor.reader import read
    from functions.kube.client import ApiError, KubeClient

    try:
        config = kubeconfig(args.kubeconfig, args.context)
        assert config is not None
        kube = KubeClient.from_config(config, timeout=10.0, retries=1)
        findings = run(read(kube, args.namespace))
    except CliError as exc:
        print(f"doctor: {exc.message}", file=sys.stderr)
        return exc.code
    except (ApiError, TemporaryError) as exc:
        print(f"doctor: cannot read the cluster: {exc} (check that it is up, your kubeconfig's "
              "server and that your user may read it)", file=sys.stderr)
        return ExitCode.UNREACHABLE
    if args.output == "json":
        json.dump([f.model_dump(mode="json") for f in findings], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render(findings, sys.stdout)
    return ExitCode.FAILED if failed(findings) else ExitCode.OK
