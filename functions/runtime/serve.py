"""``python -m functions serve reconcile|gc|status|all|api|dead-letters``: gunicorn
in-process, the same command locally and in the container image.

Gunicorn is driven through ``BaseApplication`` rather than its CLI so the options live in one
place. The app is built in each worker after the fork (no ``preload_app``), so the Kubernetes
client and its connection pool are per process. Defaults follow the Knative Python sample:
one worker, threads for concurrency, ``PORT`` from the environment (Knative sets it).
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from gunicorn.app.base import BaseApplication
from gunicorn.glogging import Logger

from functions.runtime import logs
from functions.runtime.app import FUNCTION_CHOICES, KubeFactory
from functions.runtime.worker import RequestSlots

# ``api`` is the training API (functions/api), a REST service rather than an event function;
# ``dead-letters`` the Broker's dead-letter sink (functions/runtime/dead_letters.py).
SERVE_CHOICES = (*FUNCTION_CHOICES, "api", "dead-letters")


class JsonGunicornLogger(Logger):  # type: ignore[misc]
    """Gunicorn's logger with its error log's records as JSON lines (``LOG_FORMAT=json``)."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in self.error_log.handlers:
            handler.setFormatter(logs.JsonFormatter())


class FunctionServer(BaseApplication):  # type: ignore[misc]
    """Gunicorn serving :func:`functions.runtime.app.create_app` for one function."""

    def __init__(self, function: str, options: dict[str, Any],
                 kube_factory: KubeFactory | None = None) -> None:
        self.function = function
        self.options = options
        # Builds each worker's API client (default: from the kubeconfig or the pod's
        # ServiceAccount); the local stack passes one that injects API faults.
        self.kube_factory = kube_factory
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            if key in self.cfg.settings and value is not None:
                self.cfg.set(key.lower(), value)

    def load(self) -> Any:
        if self.function == "api":
            from functions.api.app import create_api_app
            return create_api_app()
        if self.function == "dead-letters":
            from functions.runtime.dead_letters import create_dead_letter_app
            return create_dead_letter_app()
        import gc

        from functions.runtime.app import create_app, runtime_of
        from functions.runtime.collector import Collector
        app = create_app(self.function, warm_up="now", kube_factory=self.kube_factory)
        # What the warm-up loaded (modules, controllers, the caches' first lists) lives as
        # long as the worker: the collector need not walk it again at every full collection.
        gc.freeze()
        Collector(runtime_of(app).quiet).start()
        return app


def _child_exit(server: Any, worker: Any) -> None:
    """Forget a dead worker's multi-process metric files (live gauges only)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess
        multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


# How long a stopping worker may still send the Events it holds: well inside gunicorn's
# graceful_timeout (20 s), which also bounds the requests it is finishing.
EVENT_FLUSH_SECONDS = 5.0


def _worker_exit(server: Any, worker: Any) -> None:
    """Stop an event function's background work as its worker exits (Knative scaling it in, a
    rollout), sending first the Events it holds, which would otherwise be lost with it."""
    app = getattr(worker, "wsgi", None)  # none when the app failed to load
    if isinstance(app, RequestSlots):
        app = app.app
    extensions = getattr(app, "extensions", None) or {}
    runtime = extensions.get("functions.runtime")
    if runtime is not None:
        runtime.close(EVENT_FLUSH_SECONDS)


# Every served app, the REST API included, runs under gunicorn's threaded worker (gthread)
# with request deadlines, request slots and a reserve for the probes
# (functions.runtime.worker): gunicorn parses every request.
WORKER_CLASS = "functions.runtime.worker.EventWorker"

# Gunicorn's request limits, set here rather than left to its defaults. A request line is
# "POST /" for an event and a short REST path for the API. A delivery through the Broker
# carries about twenty header lines (the captured ones in tests/data/cloudevents: 16-17,
# plus the Broker's and the queue-proxy's own); 64 leaves room for tracing and proxies, and
# bounds a head to 64 x 8 KiB. One line may hold a bearer token (a service account's JWT is
# about 1 KiB). A refused head is answered 414 (line) or 431 (fields) by gunicorn.
LIMIT_REQUEST_LINE = 4094
LIMIT_REQUEST_FIELDS = 64
LIMIT_REQUEST_FIELD_SIZE = 8190
# An idle keep-alive connection waits this long in the poller (no thread) for its next
# request: above the Broker's and the queue-proxy's idle timeouts, so they close first.
KEEPALIVE_SECONDS = 75
# Connections a worker holds (idle ones cost a file descriptor, not a thread); past it
# connections wait in the listen backlog.
WORKER_CONNECTIONS = 1000


def gunicorn_options(port: int, workers: int, threads: int, host: str = "0.0.0.0",  # noqa: S104
                     timeout: int = 330) -> dict[str, Any]:
    """Gunicorn settings. ``timeout`` exceeds Knative's default 300 s request timeout so the
    platform, not gunicorn, bounds a long resync. Its level and format are the product's
    (``LOG_LEVEL``, ``LOG_FORMAT``: :mod:`functions.runtime.logs`)."""
    options: dict[str, Any] = {
        "bind": f"{host}:{port}",
        "workers": workers,
        "threads": threads,
        "worker_class": WORKER_CLASS,
        "timeout": timeout,
        "graceful_timeout": 20,
        "keepalive": KEEPALIVE_SECONDS,
        "worker_connections": WORKER_CONNECTIONS,
        "limit_request_line": LIMIT_REQUEST_LINE,
        "limit_request_fields": LIMIT_REQUEST_FIELDS,
        "limit_request_field_size": LIMIT_REQUEST_FIELD_SIZE,
        # Gunicorn's Python parser, whatever else is installed: "auto" would switch to the
        # optional C parser (gunicorn_h1c) wherever that happens to be present.
        "http_parser": "python",
        **logs.gunicorn_settings(),
        "accesslog": None,
        "errorlog": "-",
        "child_exit": _child_exit,
        "worker_exit": _worker_exit,
        # No runtime control socket: nothing manages a function pod that way, and it would
        # write under $HOME, which a restricted (arbitrary UID) container may not have.
        "control_socket_disable": True,
    }
    shm = Path("/dev/shm")  # noqa: S108
    if shm.is_dir() and os.access(shm, os.W_OK):
        options["worker_tmp_dir"] = str(shm)
    return options


def _remove_in_master(directory: str, master: int) -> None:
    if os.getpid() == master:  # workers exit through atexit too
        shutil.rmtree(directory, ignore_errors=True)


# Event functions serve with two threads: more contend for the GIL and cost CPU per event;
# Knative scales a busy function out instead. Status with four, in the 200-job burst on a
# 2-core machine (medians of three alternating runs each): its passes no longer wait for a
# thread, so every job is Running right after T (0.3 s, not 2 s), but they take during the
# burst the CPU that two threads leave to reconcile until after it: T 16.2 s instead of
# 14.3 s, the controller's CPU to T 5.3 s instead of 4.1 s, all Running no sooner (16.5 s,
# 16.3 s). The REST API keeps more.
DEFAULT_THREADS = {"api": 8}
EVENT_FUNCTION_THREADS = 2


def default_threads(function: str) -> int:
    """Request threads when neither ``--threads`` nor ``$THREADS`` says (the dev stack)."""
    return DEFAULT_THREADS.get(function, EVENT_FUNCTION_THREADS)


def serve(function: str, port: int, workers: int = 1, threads: int = EVENT_FUNCTION_THREADS,
          host: str = "0.0.0.0",  # noqa: S104
          kube_factory: KubeFactory | None = None) -> None:
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        directory = tempfile.mkdtemp(prefix="functions-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
        atexit.register(_remove_in_master, directory, os.getpid())
    FunctionServer(function, gunicorn_options(port, workers, threads, host),
                   kube_factory).run()


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("serve", help="serve a function app under gunicorn")
    parser.add_argument("function", choices=SERVE_CHOICES)
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8080")))
    parser.add_argument("--host", default="0.0.0.0")  # noqa: S104
    parser.add_argument("--workers", type=int, default=int(os.environ.get("WORKERS", "1")))
    parser.add_argument("--threads", type=int, default=None,
                        help="request threads (default: $THREADS, else 2; 8 for api)")
    parser.set_defaults(handler=_main)


def _main(args: argparse.Namespace) -> int:
    threads = args.threads or int(os.environ.get("THREADS") or default_threads(args.function))
    serve(args.function, args.port, args.workers, threads, args.host)
    return 0
