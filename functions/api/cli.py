"""``jobs submit|list|get|logs|delete|watch``: training jobs from the command line, as kubectl.

The same commands as ``python -m functions jobs``, the ``odh-training-jobs`` script and the
kubectl plugin ``kubectl-training`` (``kubectl training list -n team-a``). The kubeconfig says
where and as whom (``--kubeconfig``, ``--context``, ``-n``), and the commands go through the
training API when one is configured or straight to the job CRs otherwise
(:mod:`functions.api.connect`). Both modes print the API's job views: ``-o text`` (a table or
one job in full), ``wide``, ``json``, ``yaml`` (the API's Job and JobList documents) and
``name`` (``kind.group/name``, as kubectl). Exit codes: :mod:`functions.api.exits`.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import yaml
from urllib3.exceptions import InsecureRequestWarning

import functions
from functions.__main__ import program_name
from functions.api.client import ApiClientError, ApiUnreachable
from functions.api.connect import DESCRIPTION, MODES, Jobs, Target, connect
from functions.api.core import render
from functions.api.core.models import STATES
from functions.api.exits import EPILOG, CliError, ExitCode, NotFound
from functions.core.errors import TemporaryError

CLEAR = "\x1b[H\x1b[2J"
Obj = dict[str, Any]
NAME_ONLY = ("text", "name")


def _pairs(values: list[str] | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(ExitCode.USAGE, f"{what} must be KEY=VALUE, not {item!r}")
        out[key] = value
    return out


def _request(args: argparse.Namespace) -> dict[str, Any]:
    if args.file:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
        data = yaml.safe_load(text)
        if not isinstance(data, dict):
            raise CliError(ExitCode.USAGE, f"{args.file}: expected a mapping")
        if args.name:
            data["name"] = args.name
        return data
    job: dict[str, Any] = {"name": args.name, "image": args.image, "priority": args.priority}
    if args.runtime:  # a TrainJob: the API chooses it by the runtime
        job["runtime"] = args.runtime
        job["numNodes"] = args.nodes if args.nodes is not None else 1
    else:
        job["framework"] = args.framework or "pytorch"
        job["workers"] = args.workers
    if args.command:
        job["command"] = list(args.command)
    if args.args:
        job["args"] = list(args.args)
    if args.env:
        job["env"] = _pairs(args.env, "--env")
    if args.label:
        job["labels"] = _pairs(args.label, "--label")
    if args.queue:
        job["queue"] = args.queue
    resources = {k: v for k, v in (("cpu", args.cpu), ("memory", args.memory),
                                   ("gpus", args.gpus)) if v is not None}
    if resources:
        job["resources"] = resources
    return job


def _sorted(jobs: list[Obj]) -> list[Obj]:
    """Both modes in one order (the API pages kind by kind)."""
    return sorted(jobs, key=lambda j: (str(j.get("namespace")), str(j.get("name")),
                                       str(j.get("kind"))))


def _print(out: TextIO, args: argparse.Namespace, target: Target, jobs: list[Obj],
           text: Callable[[], str], single: bool) -> None:
    """``jobs`` as ``-o`` says; ``text`` is the default view."""
    fmt = args.output
    now = datetime.now(UTC)
    if fmt in ("json", "yaml"):
        body = render.document(jobs[0] if single else {"items": jobs}, fmt)
    elif fmt == "name":
        body = "\n".join(render.reference(job) for job in jobs)
    elif fmt == "wide":
        body = render.table(jobs, now, wide=True, namespaces=target.namespace is None)
    else:
        body = text()
    if body:
        out.write(body + "\n")


def _submitted(job: dict[str, Any]) -> str:
    position = (job.get("queue") or {}).get("position")
    where = f" (queue position {position})" if position else ""
    return f"{job['kind']} {job['name']} submitted: {job['state']}{where}"


def submit(args: argparse.Namespace, target: Target, out: TextIO) -> int:
    job = target.jobs.create(args.body)
    _print(out, args, target, [job], lambda: _submitted(job), single=True)
    return ExitCode.OK


def list_jobs(args: argparse.Namespace, target: Target, out: TextIO) -> int:
    jobs = _sorted(target.jobs.list_all(args.state, args.selector))
    if not jobs and args.output in ("text", "wide"):
        where = f"namespace {target.namespace}" if target.namespace else "any namespace"
        sys.stderr.write(f"No training jobs found in {where}.\n")
        return ExitCode.OK
    _print(out, args, target, jobs, lambda: render.table(
        jobs, datetime.now(UTC), namespaces=target.namespace is None), single=False)
    return ExitCode.OK


def get(args: argparse.Namespace, target: Target, out: TextIO) -> int:
    job = target.jobs.get(args.name)
    _print(out, args, target, [job], lambda: render.details(job, datetime.now(UTC)),
           single=True)
    return ExitCode.OK


def delete(args: argparse.Namespace, target: Target, out: TextIO) -> int:
    job = target.jobs.get(args.name) if args.output == "name" else None
    target.jobs.delete(args.name)
    out.write(f"{render.reference(job)}\n" if job else f"{args.name} deleted\n")
    return ExitCode.OK


def logs(args: argparse.Namespace, target: Target, out: TextIO) -> int:
    for chunk in target.jobs.logs(args.name, args.replica, args.index, args.follow, args.tail):
        out.write(chunk.decode("utf-8", "replace"))
        out.flush()
    return ExitCode.OK


def _watched(jobs: Jobs, names: Sequence[str]) -> tuple[list[Obj], list[str]]:
    """The named jobs that exist, and the names of those that do not."""
    found: list[Obj] = []
    missing: list[str] = []
    for name in names:
        try:
            found.append(jobs.get(name))
        except ApiClientError as exc:
            if exc.status != 404:
                raise
            missing.append(name)
        except NotFound:
            missing.append(name)
    return found, missing


def watch(args: argparse.Namespace, target: Target, out: TextIO,
          sleep: Callable[[float], None] = time.sleep) -> int:
    """Redraw (or, with -o json|yaml|name, print each job as it changes) until every watched
    job has finished: 0 if all succeeded, 1 if one failed, 3 at ``--timeout``."""
    redraw = out.isatty() and not args.plain
    deadline = time.monotonic() + args.timeout if args.timeout else None
    printed: dict[str, str] = {}
    while True:
        jobs, missing = (_watched(target.jobs, args.names) if args.names
                         else (target.jobs.list_all(None, args.selector), []))
        jobs = _sorted(jobs)
        if args.output in ("json", "yaml", "name"):
            for job in jobs:  # each job when it first shows and whenever it changes
                text = (render.reference(job) if args.output == "name"
                        else render.document(job, args.output))
                key = f"{job.get('namespace')}/{job.get('kind')}/{job.get('name')}"
                if printed.get(key) != text:
                    printed[key] = text
                    out.write(("---\n" if args.output == "yaml" else "") + text + "\n")
            out.flush()
        else:
            frame = render.watch_frame(jobs, target.namespace, datetime.now(UTC), missing,
                                       wide=args.output == "wide")
            out.write((CLEAR + frame) if redraw else frame + "\n")
            out.flush()
        if args.names and not missing and render.all_finished(jobs):
            failed = any(j.get("state") != "Succeeded" for j in jobs)
            return ExitCode.FAILED if failed else ExitCode.OK
        if args.names and len(missing) == len(args.names):
            sys.stderr.write(f"error: not found: {', '.join(missing)} (check the names and "
                             "-n)\n")
            return ExitCode.FAILED
        if deadline is not None and time.monotonic() >= deadline:
            sys.stderr.write(f"error: timed out after {args.timeout:g} s\n")
            return ExitCode.TIMEOUT
        sleep(args.interval)


# -- the command line ---------------------------------------------------------------------------

def _connection(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster and credentials (as kubectl)")
    group.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, a list "
                                            "merged as kubectl merges it, else "
                                            "~/.kube/config, else the pod's service account)")
    group.add_argument("--context", help="kubeconfig context (default: the current context)")
    group.add_argument("-n", "--namespace",
                       help="namespace (default: the context's, else default)")
    group.add_argument("--token", help="bearer token: for the training API (else "
                                       "TRAINING_API_TOKEN, else the kubeconfig's), or in "
                                       "direct mode in place of the kubeconfig's credentials")
    group.add_argument("--token-file", help="read the token from a file "
                                            "(TRAINING_API_TOKEN_FILE)")
    group.add_argument("--insecure-skip-tls-verify", "--insecure", dest="insecure",
                       action="store_true", help="do not verify the server's TLS certificate")
    group.add_argument("--url", help="the training API (TRAINING_API_URL); without it, "
                                     "direct mode")


def _listing(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-A", "--all-namespaces", action="store_true",
                        help="every namespace (direct mode)")
    parser.add_argument("-l", "--selector", help="label selector, e.g. team=vision")


def _output(parser: argparse.ArgumentParser, formats: Sequence[str] = render.FORMATS) -> None:
    parser.add_argument("-o", "--output", choices=formats, default="text",
                        help="text (default), wide (more columns), json or yaml (the API's "
                             "job documents), name (kind.group/name)"
                        if formats == render.FORMATS else "text or name (kind.group/name)")


def build(parser: argparse.ArgumentParser) -> None:
    """The actions of ``jobs``, onto ``parser`` (``jobs``' own, or a console script's)."""
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s {functions.__version__}")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, text: str, run: Callable[..., int]) -> argparse.ArgumentParser:
        p = actions.add_parser(name, help=text, description=f"{text}\n\n{MODES}",
                               epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
        _connection(p)
        p.set_defaults(run=run)
        return p

    p = action("submit", "submit a job (it is queued)", submit)
    _output(p)
    p.add_argument("name", nargs="?")
    p.add_argument("-f", "--file", help="a JSON or YAML request ('-' for stdin)")
    p.add_argument("--framework", choices=("pytorch", "tensorflow", "mpi", "mxnet", "xgboost",
                                            "paddle", "jax"),
                   help="a kubeflow.org job of this framework (default: pytorch)")
    p.add_argument("--runtime", metavar="CLUSTERTRAININGRUNTIME",
                   help="a Kubeflow Trainer TrainJob on this runtime, e.g. torch-distributed")
    p.add_argument("--image")
    p.add_argument("--workers", type=int, default=1, help="training processes (v1 kinds)")
    p.add_argument("--nodes", type=int, help="training nodes of a TrainJob (default 1)")
    p.add_argument("--cpu")
    p.add_argument("--memory")
    p.add_argument("--gpus", type=int)
    p.add_argument("--priority", type=int, default=0)
    p.add_argument("--queue")
    p.add_argument("--env", action="append", metavar="KEY=VALUE")
    p.add_argument("--label", action="append", metavar="KEY=VALUE")
    p.add_argument("--command", nargs="+", help="the command, e.g. --command python train.py")
    p.add_argument("--arg", dest="args", action="append", metavar="ARG",
                   help="one argument (repeat; --arg=--epochs=3 for dashed values)")

    p = action("list", "list jobs", list_jobs)
    _listing(p)
    _output(p)
    p.add_argument("--state", choices=STATES)

    p = action("get", "show one job", get)
    _output(p)
    p.add_argument("name")

    p = action("delete", "delete a job", delete)
    _output(p, NAME_ONLY)
    p.add_argument("name")

    p = action("logs", "print a replica's logs", logs)
    p.add_argument("name")
    p.add_argument("--replica", help="replica type (default: master, chief, launcher or "
                                     "worker; a TrainJob's node)")
    p.add_argument("--index", type=int)
    p.add_argument("-f", "--follow", action="store_true")
    p.add_argument("--tail", type=int)

    p = action("watch", "live progress until the named jobs finish", watch)
    _listing(p)
    _output(p)
    p.add_argument("names", nargs="*")
    p.add_argument("--interval", type=float, default=2.0)
    p.add_argument("--timeout", type=float, default=0.0, help="give up after seconds (exit 3)")
    p.add_argument("--plain", action="store_true", help="append frames, do not redraw")

    parser.set_defaults(handler=run)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    build(subparsers.add_parser("jobs", help="submit and follow training jobs, as kubectl "
                                             "(through the training API, or directly)",
                                description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter))


def _usage(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags (``None`` when nothing)."""
    if args.action == "watch" and args.names and args.all_namespaces:
        return "watch takes job names or -A, not both (a name is looked up in one namespace)"
    if args.action != "submit" or args.file:
        return None
    if not args.name or not args.image:
        return "submit needs NAME and --image, or --file"
    if args.runtime and args.framework:
        return "submit takes --framework (a kubeflow.org job) or --runtime (a TrainJob), not both"
    if args.nodes is not None and not args.runtime:
        return "--nodes is for a TrainJob (--runtime); use --workers"
    return None


def _api_failure(exc: ApiClientError) -> CliError:
    """The training API's problem as one line, and its exit code: 4 when the API says the
    cluster is unavailable (503) or a proxy in front of it answers for it, else 1."""
    unreachable = exc.status == 503 or (exc.status in (502, 504) and not exc.is_problem)
    hint = {401: "log in again, or pass --token", 403: "ask for the training role",
            404: "check the name and -n", 503: "try again in a moment"}.get(exc.status)
    line = render.problem_line(exc.problem, exc.status) + (f"; {hint}" if hint else "")
    return CliError(ExitCode.UNREACHABLE if unreachable else ExitCode.FAILED, line)


def run(args: argparse.Namespace) -> int:
    """Run the action; every failure is one line on stderr and an exit code."""
    try:
        usage = _usage(args)
        if usage:
            raise CliError(ExitCode.USAGE, usage)
        if args.action == "submit":  # a request that cannot be read is a usage error
            args.body = _request(args)
        with warnings.catch_warnings():
            if args.insecure:  # asked for: not a warning on every request
                warnings.simplefilter("ignore", InsecureRequestWarning)
            target = connect(args)
            result: int = args.run(args, target, sys.stdout)
    except CliError as exc:
        failure = exc
    except ApiClientError as exc:
        failure = _api_failure(exc)
    except ApiUnreachable as exc:
        failure = CliError(ExitCode.UNREACHABLE, f"cannot reach the training API at {exc} "
                                                 "(check --url or TRAINING_API_URL)")
    except TemporaryError as exc:
        failure = CliError(ExitCode.UNREACHABLE, f"cannot reach the cluster: {exc} (check "
                                                 "that it is up and your kubeconfig's server)")
    except KeyboardInterrupt:
        return 130
    else:
        return result
    sys.stderr.write(f"error: {failure.message}\n")
    return int(failure.code)


def main(argv: Sequence[str] | None = None) -> int:
    """Console scripts ``odh-training-jobs`` and ``kubectl-training``: the actions of ``jobs``
    as the command itself, under the script's own name."""
    parser = argparse.ArgumentParser(prog=program_name(), description=DESCRIPTION,
                                     epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    build(parser)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return run(args)
