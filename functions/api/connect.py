"""Where the CLI's commands go and as whom, decided as kubectl decides it.

The kubeconfig is read by :mod:`functions.kube.config` (the ``kubernetes`` package's loader):
``--kubeconfig``, else a merged ``KUBECONFIG`` list, else ``~/.kube/config``, else the pod's
own service account (a workbench in the cluster); ``--context`` picks a context; the namespace
is ``-n``, else the context's, else ``default``. Then one of two modes:

* **the training API** when one is configured (``--url`` or ``TRAINING_API_URL``): requests
  carry ``--token``, ``--token-file``, ``TRAINING_API_TOKEN`` or ``TRAINING_API_TOKEN_FILE``,
  else the kubeconfig's own bearer token, which the API reviews (a kubeconfig is not needed
  when a token and ``-n`` are given);
* **direct** otherwise: the job CRs through the API server, as the kubeconfig's user
  (:mod:`functions.api.direct`); ``--token`` replaces the kubeconfig's credentials there, as
  kubectl's does.

Failures to get that far are :class:`~functions.api.exits.CliError`\\ s: 4 (unreachable) for a
missing or unusable kubeconfig, 2 (usage) for flags that cannot work together.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from functions.api.client import TrainingApi
from functions.api.direct import DirectJobs
from functions.api.exits import CliError, ExitCode
from functions.kube.client import KubeClient
from functions.kube.config import ClusterConfig, ConfigError, from_kubeconfig, in_cluster
from functions.kube.config import kubeconfig_paths as default_paths

Obj = dict[str, Any]
DEFAULT_NAMESPACE = "default"
DESCRIPTION = """Submit and follow Kubeflow training jobs (PyTorchJob, TFJob, MPIJob, MXJob,
XGBoostJob, PaddleJob, JAXJob and Kubeflow Trainer TrainJobs) as kubectl does: the kubeconfig's
context, namespace and credentials (--kubeconfig, --context, -n: default the context's
namespace, else default).

Two modes:
  training API  when --url or TRAINING_API_URL is set. Requests carry --token, --token-file,
                TRAINING_API_TOKEN(_FILE) or else the kubeconfig's bearer token; the API
                reviews it, checks your RBAC, refuses a priority above your namespace's
                maximum and shows queue positions.
  direct        otherwise. The job CRs are read and written as the kubeconfig's user: your
                RBAC on the job kinds applies (pods and pods/log too for logs) and the
                API's checks do not. A job is still queued, but a priority above the maximum
                is capped by the queue instead of refused, and views show no queue position.

-o json|yaml print the API's job documents (Job; JobList for list) in both modes."""
MODES = """Through the training API with --url or TRAINING_API_URL; otherwise directly on the job
CRs as the kubeconfig's user: your RBAC applies and the API's checks do not (no priority
refusal: the queue caps it; no queue positions). Both modes: --help without an action."""
NO_KUBECONFIG = "no kubeconfig: set KUBECONFIG or pass --kubeconfig"


class Jobs(Protocol):
    """What the commands need of either mode: the API's job views in, views out."""

    def create(self, body: Obj) -> Obj: ...

    def list_all(self, state: str | None = None,
                 label_selector: str | None = None) -> list[Obj]: ...

    def get(self, name: str) -> Obj: ...

    def delete(self, name: str) -> None: ...

    def logs(self, name: str, replica: str | None = None, index: int | None = None,
             follow: bool = False, tail_lines: int | None = None) -> Iterator[bytes]: ...


@dataclass(frozen=True)
class Target:
    jobs: Jobs
    namespace: str | None  # None: every namespace (-A)
    mode: str              # "api" or "direct"


def kubeconfig(path: str | None, context: str | None, *,
               required: bool = True) -> ClusterConfig | None:
    """The cluster and credentials to use, as kubectl finds them (``None`` when there are
    none and they are not ``required``)."""
    listed = [p for p in default_paths(path).split(os.pathsep) if p]
    if not any(Path(p).expanduser().is_file() for p in listed):
        if path:
            raise CliError(ExitCode.UNREACHABLE, f"no kubeconfig at {path}: pass the path of "
                                                 "a kubeconfig file")
        if not context:
            try:
                return in_cluster()
            except ConfigError:
                pass
        if required:
            raise CliError(ExitCode.UNREACHABLE, NO_KUBECONFIG)
        return None
    try:
        return from_kubeconfig(path, context)
    except ConfigError as exc:
        raise CliError(ExitCode.UNREACHABLE, f"{exc} (fix it, or pick another with "
                                             "--kubeconfig or --context)") from exc


def _explicit_token(args: argparse.Namespace, *, environment: bool) -> str | None:
    """``--token``, ``--token-file``, then (``environment``) the ``TRAINING_API_*`` ones."""
    if args.token:
        return str(args.token)
    path = args.token_file
    if not path and environment:
        token = os.environ.get("TRAINING_API_TOKEN")
        if token:
            return token
        path = os.environ.get("TRAINING_API_TOKEN_FILE")
    if not path:
        return None
    try:
        return Path(path).read_text().strip() or None
    except OSError as exc:
        raise CliError(ExitCode.USAGE, f"cannot read the token file {path}: "
                                       f"{exc.strerror or exc}") from exc


def api_url(args: argparse.Namespace) -> str | None:
    return str(args.url or os.environ.get("TRAINING_API_URL") or "") or None


def connect(args: argparse.Namespace) -> Target:
    """The jobs the command acts on: through the training API or directly."""
    all_namespaces = bool(getattr(args, "all_namespaces", False))
    url = api_url(args)
    if url:
        if all_namespaces:
            raise CliError(ExitCode.USAGE, "-A needs direct mode: the training API lists one "
                                           "namespace at a time (pass -n, or unset --url and "
                                           "TRAINING_API_URL)")
        token = _explicit_token(args, environment=True)
        config = None
        if token is None or not args.namespace:
            config = kubeconfig(args.kubeconfig, args.context, required=token is None)
        if token is None and config is not None:
            token = config.bearer_token()
            if not token:
                raise CliError(ExitCode.UNREACHABLE, "the kubeconfig's user has no bearer token "
                                                     "for the training API (a client "
                                                     "certificate cannot be passed on): pass "
                                                     "--token or set TRAINING_API_TOKEN")
        namespace = args.namespace or (config.namespace if config else None) or \
            DEFAULT_NAMESPACE
        try:
            api = TrainingApi(url, token, namespace, insecure=args.insecure)
        except ValueError as exc:
            raise CliError(ExitCode.USAGE, f"--url {url}: not an http:// or https:// "
                                           "address") from exc
        return Target(api, namespace, "api")
    config = kubeconfig(args.kubeconfig, args.context)
    assert config is not None
    token = _explicit_token(args, environment=False)
    if token:
        config = dataclasses.replace(config, token=token, token_file=None, token_source=None)
    if args.insecure:
        config = dataclasses.replace(config, insecure=True)
    namespace = None if all_namespaces else (args.namespace or config.namespace or
                                             DEFAULT_NAMESPACE)
    try:
        kube = KubeClient.from_config(config, timeout=15.0, retries=1)
    except (ValueError, OSError) as exc:
        raise CliError(ExitCode.UNREACHABLE, f"cannot use the cluster of the kubeconfig "
                                             f"({config.server}): {exc}") from exc
    return Target(DirectJobs(kube, namespace), namespace, "direct")
