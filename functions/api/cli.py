"""``python -m functions jobs submit|list|get|logs|delete|watch``: the training API for people.

Talks to the REST service only (never to Kubernetes), with the URL, token and namespace from
flags or ``TRAINING_API_URL``, ``TRAINING_API_TOKEN`` (or ``TRAINING_API_TOKEN_FILE``) and
``TRAINING_API_NAMESPACE``. ``watch`` redraws a progress view until the jobs finish.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import functions
from functions.api.client import ApiClientError, TrainingApi
from functions.api.core import render

CLEAR = "\x1b[H\x1b[2J"


def _pairs(values: list[str] | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"{what} must be KEY=VALUE, not {item!r}")
        out[key] = value
    return out


def _token(args: argparse.Namespace) -> str | None:
    if args.token:
        return str(args.token)
    path = args.token_file or os.environ.get("TRAINING_API_TOKEN_FILE")
    return Path(path).read_text().strip() if path else None


def _api(args: argparse.Namespace) -> TrainingApi:
    return TrainingApi(args.url, _token(args), args.namespace, insecure=args.insecure)


def _request(args: argparse.Namespace) -> dict[str, Any]:
    if args.file:
        import yaml

        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
        data = yaml.safe_load(text)
        if not isinstance(data, dict):
            raise SystemExit(f"{args.file}: expected a mapping")
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


def _show(args: argparse.Namespace, out: TextIO, data: Any, text: Callable[[], str]) -> int:
    """``data`` as indented JSON with ``-o json``, else its text view."""
    out.write((json.dumps(data, indent=2) if args.output == "json" else text()) + "\n")
    return 0


def _submitted(job: dict[str, Any]) -> str:
    position = (job.get("queue") or {}).get("position")
    where = f" (queue position {position})" if position else ""
    return f"{job['kind']} {job['name']} submitted: {job['state']}{where}"


def submit(args: argparse.Namespace, out: TextIO) -> int:
    job = _api(args).create(_request(args))
    return _show(args, out, job, lambda: _submitted(job))


def list_jobs(args: argparse.Namespace, out: TextIO) -> int:
    jobs = _api(args).list_all(args.state, args.selector)
    return _show(args, out, jobs, lambda: render.table(jobs, datetime.now(UTC)))


def get(args: argparse.Namespace, out: TextIO) -> int:
    job = _api(args).get(args.name)
    return _show(args, out, job, lambda: render.details(job, datetime.now(UTC)))


def delete(args: argparse.Namespace, out: TextIO) -> int:
    _api(args).delete(args.name)
    out.write(f"{args.name} deleted\n")
    return 0


def logs(args: argparse.Namespace, out: TextIO) -> int:
    for chunk in _api(args).logs(args.name, args.replica, args.index, args.follow, args.tail):
        out.write(chunk.decode("utf-8", "replace"))
        out.flush()
    return 0


def _watched(api: TrainingApi, names: Sequence[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The named jobs that exist, and the names of those that do not."""
    jobs: list[dict[str, Any]] = []
    missing: list[str] = []
    for name in names:
        try:
            jobs.append(api.get(name))
        except ApiClientError as exc:
            if exc.status != 404:
                raise
            missing.append(name)
    return jobs, missing


def watch(args: argparse.Namespace, out: TextIO,
          sleep: Callable[[float], None] = time.sleep) -> int:
    """Redraw until every watched job has finished (0 if all succeeded), or ``--timeout``."""
    api = _api(args)
    redraw = out.isatty() and not args.plain
    deadline = time.monotonic() + args.timeout if args.timeout else None
    while True:
        jobs, missing = _watched(api, args.names) if args.names else (api.list_all(), [])
        frame = render.watch_frame(jobs, args.namespace, datetime.now(UTC), missing)
        out.write((CLEAR + frame) if redraw else frame + "\n")
        out.flush()
        if args.names and not missing and render.all_finished(jobs):
            return 0 if all(j.get("state") == "Succeeded" for j in jobs) else 1
        if args.names and len(missing) == len(args.names):
            return 1
        if deadline is not None and time.monotonic() >= deadline:
            return 2
        sleep(args.interval)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default=os.environ.get("TRAINING_API_URL",
                                                        "http://localhost:8080"),
                        help="the training API (TRAINING_API_URL)")
    parser.add_argument("--token", default=os.environ.get("TRAINING_API_TOKEN"),
                        help="bearer token (TRAINING_API_TOKEN)")
    parser.add_argument("--token-file", help="read the token from a file "
                                             "(TRAINING_API_TOKEN_FILE)")
    parser.add_argument("-n", "--namespace",
                        default=os.environ.get("TRAINING_API_NAMESPACE", "default"))
    parser.add_argument("--insecure", action="store_true", help="skip TLS verification")
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("jobs", help="submit and follow training jobs "
                                                "through the training API")
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s {functions.__version__}")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = actions.add_parser("submit", help="submit a job (it is queued)")
    _common(p)
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
    p.set_defaults(run=submit)

    p = actions.add_parser("list", help="list jobs")
    _common(p)
    p.add_argument("--state")
    p.add_argument("-l", "--selector", help="label selector")
    p.set_defaults(run=list_jobs)

    for name, run, text in (("get", get, "show one job"), ("delete", delete, "delete a job")):
        p = actions.add_parser(name, help=text)
        _common(p)
        p.add_argument("name")
        p.set_defaults(run=run)

    p = actions.add_parser("logs", help="print a replica's logs")
    _common(p)
    p.add_argument("name")
    p.add_argument("--replica")
    p.add_argument("--index", type=int)
    p.add_argument("-f", "--follow", action="store_true")
    p.add_argument("--tail", type=int)
    p.set_defaults(run=logs)

    p = actions.add_parser("watch", help="live progress until the jobs finish")
    _common(p)
    p.add_argument("names", nargs="*")
    p.add_argument("--interval", type=float, default=2.0)
    p.add_argument("--timeout", type=float, default=0.0, help="give up after seconds")
    p.add_argument("--plain", action="store_true", help="append frames, do not redraw")
    p.set_defaults(run=watch)

    parser.set_defaults(handler=_main)


def _submit_usage(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags of ``submit`` (``None`` when nothing)."""
    if args.file:
        return None
    if not args.name or not args.image:
        return "submit needs NAME and --image, or --file"
    if args.runtime and args.framework:
        return "submit takes --framework (a kubeflow.org job) or --runtime (a TrainJob), not both"
    if args.nodes is not None and not args.runtime:
        return "--nodes is for a TrainJob (--runtime); use --workers"
    return None


def _main(args: argparse.Namespace) -> int:
    usage = _submit_usage(args) if args.action == "submit" else None
    if usage:
        sys.stderr.write(usage + "\n")
        return 2
    try:
        result: int = args.run(args, sys.stdout)
    except ApiClientError as exc:
        sys.stderr.write(f"error: {exc}\n")
        for error in exc.problem.get("errors") or []:
            sys.stderr.write(f"  {error.get('field')}: {error.get('message')}\n")
        return 1
    except OSError as exc:
        sys.stderr.write(f"error: cannot reach the training API: {exc}\n")
        return 1
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Console script ``odh-training-jobs``: the ``jobs`` command on its own."""
    from functions.__main__ import main as functions_main

    return functions_main(["jobs", *(sys.argv[1:] if argv is None else argv)])
