"""Prometheus metrics of one function app: events, the verdicts on deliveries' tokens, handler
latency, Kubernetes API requests, all under the application's prefix ``odh_training_``, and the
process and Python collectors' standard series (``process_*``, ``python_*``).

Imported lazily (``prometheus_client`` costs tens of milliseconds), after gunicorn forks. Each
app owns its registry so several apps can live in one test process. With more than one
gunicorn worker, set ``PROMETHEUS_MULTIPROC_DIR`` (``serve`` does) and a scrape aggregates
every worker through the multiprocess collector.

Metrics that belong to the process rather than to one app (what the handlers did, e.g. the
training-job counters of :mod:`functions.jobs.metrics`) are registered with
:func:`register_process_collector` and show in every app's ``/metrics``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client import multiprocess as _multiprocess

# ``*_created`` series double the output and no dashboard of ours reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

_process_collectors: list[Any] = []
_process_lock = threading.Lock()


def register_process_collector(collector: Any) -> None:
    """Show ``collector`` (e.g. a ``Counter`` made with ``registry=None``) in every app's
    metrics, including apps created before this call."""
    with _process_lock:
        if collector not in _process_collectors:
            _process_collectors.append(collector)


_cache_hooks: list[Callable[[str, Any, Any], None]] = []


def on_cache(hook: Callable[[str, Any, Any], None]) -> None:
    """Call ``hook(function, cache, kube)`` with each watch cache a function's process makes
    (for collectors that report levels from the caches, e.g. jobs by state)."""
    with _process_lock:
        _cache_hooks.append(hook)


def cache_made(function: str, cache: Any, kube: Any) -> None:
    with _process_lock:
        hooks = list(_cache_hooks)
    for hook in hooks:
        hook(function, cache, kube)


class _ProcessCollectors:
    """Collects the process collectors registered so far (at scrape time, so their modules
    may be imported after the app was made)."""

    def describe(self) -> Iterable[Any]:
        return ()

    def collect(self) -> Iterator[Any]:
        with _process_lock:
            collectors = list(_process_collectors)
        for collector in collectors:
            yield from collector.collect()


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.events = Counter(
            "odh_training_events", "CloudEvents received, by type, object kind and outcome",
            ["function", "type", "kind", "outcome"], registry=self.registry)
        self.handler_seconds = Histogram(
            "odh_training_handler_duration_seconds", "Time spent in one handler run",
            ["function", "controller", "outcome"], buckets=LATENCY_BUCKETS,
            registry=self.registry)
        self.api_requests = Counter(
            "odh_training_kube_api_requests", "Kubernetes API requests, by verb and HTTP code "
            "(0 = no answer)", ["verb", "code"], registry=self.registry)
        self.api_seconds = Histogram(
            "odh_training_kube_api_request_duration_seconds", "Kubernetes API request latency",
            ["verb"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.delivery_auth = Counter(
            "odh_training_delivery_auth", "Deliveries by the verdict on their bearer token "
            "(accepted, or why refused: functions.core.delivery_auth.Reason)",
            ["function", "reason"], registry=self.registry)
        self.registry.register(_ProcessCollectors())
        # The process's own series (CPU, memory, file descriptors, start time; the Python
        # version and garbage collections), as any Prometheus client exposes them.
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(collector)

    def event(self, function: str, event_type: str, kind: str, outcome: str) -> None:
        self.events.labels(function, event_type, kind, outcome).inc()

    def delivery_checked(self, function: str, reason: str) -> None:
        self.delivery_auth.labels(function, reason).inc()

    def handler_finished(self, function: str, controller: str, seconds: float,
                         outcome: str) -> None:
        self.handler_seconds.labels(function, controller, outcome).observe(seconds)

    def api_request(self, verb: str, code: int, seconds: float) -> None:
        self.api_requests.labels(verb, str(code)).inc()
        self.api_seconds.labels(verb).observe(seconds)

    def render(self) -> tuple[bytes, str]:
        """The exposition text (all workers when running multi-process) and its media type."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            registry = CollectorRegistry()
            _multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
