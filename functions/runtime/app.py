"""The HTTP face of a function: a Flask app that takes CloudEvents and answers like a Broker
expects.

One factory serves every function (``reconcile``, ``gc``, ``status``, or ``all`` in one
process). Answers:

* success: ``202`` with an **empty** body (a Broker treats any other body as a reply event,
  or as an error when it is not a CloudEvent);
* a sender that is not the Broker delivering for one of the function's own Triggers: ``401``
  (no valid token for the function's audience) or ``403`` (another identity's), decided before
  the body is read (:mod:`functions.runtime.delivery_auth`);
* malformed or unsupported input: ``4xx`` with an ``application/problem+json`` body naming
  what is wrong (``413`` for bodies over the limit); never retried;
* transient trouble (API 5xx/429/timeouts, conflicts that survive a retry): ``503`` (or
  ``429`` when the key or the resync is busy) with ``Retry-After``;
* a handler bug: logged with its traceback, answered ``503`` with a long ``Retry-After`` so
  the Broker retries a bounded number of times and then dead-letters the event. Never a 500:
  the ApiServerSource adapter drops a 500 without retrying.

Startup is kept short for cold Knative pods: importing this module costs only Flask. The
CloudEvents SDK, pydantic, the metrics library, the controllers and the Kubernetes client are
loaded by a warm-up when the app is created, i.e. after gunicorn forks, so the client (its
connection pool and TLS state) is never shared across processes. Under gunicorn the warm-up
runs before the worker accepts connections (``warm_up="now"``: connections wait in the listen
backlog, and the imports do not fight request threads for the GIL, which measurably delayed
readiness); embedders may warm up in a background thread instead, in which case readiness turns
200 when it has succeeded and events arriving earlier wait for it. A failed warm-up is reported
by readiness, never by a crash.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from functions.runtime.assembly import (
    cache_specs,
    child_caches,
    controller_modules,
    event_hold,
    source_settle,
    sweep_seconds,
)
from functions.runtime.endpoint import (
    Answer,
    EventEndpoint,
    outcome_answer,
    problem_answer,
)
from functions.runtime.endpoint import read_body as read_environ_body

if TYPE_CHECKING:
    from functions.core.delivery_auth import Settings as DeliverySettings
    from functions.core.events import ApiEvent
    from functions.kube.cache import CacheSpec, ObjectCache
    from functions.kube.client import KubeClient, RequestHook
    from functions.kube.gaps import Change, DeliveryLag
    from functions.kube.resources import Resource
    from functions.runtime.delivery_auth import DeliveryGate
    from functions.runtime.dispatch import Dispatcher
    from functions.runtime.metrics import Metrics
    from functions.runtime.recorder import EventRecorder
    from functions.runtime.registry import Controller, FunctionName, Reader

log = logging.getLogger(__name__)

FUNCTION_CHOICES = ("reconcile", "gc", "status", "all")
# How long an event waits for the watch cache to reach the version it announces (the watch
# is usually ahead of the event, which crossed the Broker) before its pass reads the API server.
CATCH_UP_SECONDS = 1.0
# The child kinds whose updates a function is not sent (eventing/triggers.yaml; a test keeps
# the two in step): reconcile acts on a pod's change only once it has changed the job's
# status. So for an update of a job at version R it reads those children from the cache only
# when their watch has got to R (everything the status function saw when it wrote R is then
# in), waiting this long while the watch moves; else it reads them fresh.
UNSENT_CHILD_UPDATES: dict[str, tuple[str, ...]] = {"reconcile": ("Pod",)}
# Of the kinds each function caches, the (kind, operation) pairs its Trigger
# (eventing/triggers.yaml) never sends it: after a watch gap such a change is no loss to catch
# up on (functions.kube.gaps). tests/runtime/test_event_coverage.py holds it to the Triggers.
NOT_SENT: dict[str, frozenset[tuple[str, str]]] = {
    "reconcile": frozenset({("Pod", "add"), ("Pod", "update"),
                            ("Service", "add"), ("Service", "update")}),
    "status": frozenset({("Pod", "add")}),
}
CHILD_BARRIER_SECONDS = 0.5
_WARM_MODULES = ("functions.core.events", "functions.runtime.dispatch",
                 "functions.runtime.metrics", "functions.kube.client",
                 "functions.runtime.recorder")

KubeFactory = Callable[["RequestHook"], "KubeClient"]


def _default_kube_factory(on_request: RequestHook) -> KubeClient:
    """The process's client from the kubeconfig or the pod's ServiceAccount."""
    from functions.kube.client import KubeClient
    return KubeClient.from_config(on_request=on_request)


class FunctionRuntime:
    """Per-process state behind one app: controllers, dispatchers, metrics, the API client."""

    def __init__(self, function: str, controllers: Sequence[Controller] | None,
                 kube_factory: KubeFactory | None, max_body_bytes: int | None,
                 resync_workers: int, delivery_auth: DeliverySettings | None = None) -> None:
        if function not in FUNCTION_CHOICES:
            raise ValueError(f"unknown function {function!r}; choose one of {FUNCTION_CHOICES}")
        self.function = function
        self.functions: tuple[FunctionName, ...] = (
            ("reconcile", "gc", "status") if function == "all" else (function,))  # type: ignore[assignment]
        self.max_body_bytes = max_body_bytes or int(
            os.environ.get("FUNCTIONS_MAX_EVENT_BYTES", 3 * 1024 * 1024))
        self.resync_workers = resync_workers
        self._given_controllers = controllers
        self._kube_factory = kube_factory or _default_kube_factory
        self._guard = threading.Lock()
        self._ready = threading.Event()
        self._failure: str | None = None
        self._kube: KubeClient | None = None
        self._kube_pid = 0
        self._recorder: EventRecorder | None = None
        self._metrics: Metrics | None = None
        self._cache: ObjectCache | None = None
        self._lag: DeliveryLag | None = None
        self._reader: Reader | None = None
        self._reader_kube: KubeClient | None = None
        self.cache_specs: list[CacheSpec] = []
        self._child_caches: dict[tuple[str, str], list[Resource]] = {}
        self.dispatchers: list[Dispatcher] = []
        self._delivery_settings = delivery_auth
        self._gate: DeliveryGate | None = None

    # -- startup --------------------------------------------------------------------------------

    def start_warm_up(self) -> None:
        threading.Thread(target=self.warm_up, name="warm-up", daemon=True).start()

    def warm_up(self) -> None:
        try:
            for module in _WARM_MODULES:
                importlib.import_module(module)
            from functions.kube.gaps import DeliveryLag
            from functions.runtime.dispatch import Dispatcher
            from functions.runtime.passes import KeyLocks
            from functions.runtime.registry import load_controllers
            from functions.runtime.wakes import Wakes
            from functions.runtime.wakes import enabled as wakes_enabled

            controllers = (list(self._given_controllers) if self._given_controllers is not None
                           else load_controllers(controller_modules()))
            if os.environ.get("FUNCTIONS_CACHE", "on") != "off":
                self.cache_specs = cache_specs(controllers, self.functions)
                unsent = {kind for name in self.functions
                          for kind in UNSENT_CHILD_UPDATES.get(name, ())}
                self._child_caches = child_caches(controllers, self.cache_specs, unsent)
            self._lag = DeliveryLag()
            metrics = self.metrics()
            locks = KeyLocks() if len(self.functions) > 1 else None
            self.dispatchers = [
                Dispatcher(name, controllers, self.kube, self.recorder, reader=self.reader,
                           locks=locks, observer=metrics, resync_workers=self.resync_workers,
                           source_settle=source_settle(),
                           not_sent=NOT_SENT.get(name, frozenset()),
                           wakes=Wakes(name, self.kube) if wakes_enabled() else None,
                           synced=self.synced)
                for name in self.functions]
            self.reader()
            self.gate().prepare()
        except Exception as exc:
            self._failure = f"{type(exc).__name__}: {exc}"
            log.exception("function %s cannot start", self.function)
        else:
            self._ready.set()

    def readiness(self) -> str | None:
        """``None`` when ready, else why not."""
        if self._ready.is_set():
            return None
        return f"failed to start: {self._failure}" if self._failure else "warming up"

    def wait_ready(self, timeout: float) -> str | None:
        if self._failure is None:
            self._ready.wait(timeout)
        return self.readiness()

    def close(self, flush_seconds: float = 0.0) -> None:
        """Stop this process's background work as it stops: the watch caches, the requeue
        timers (the resync stands behind them), and the Event sender once what is queued has
        gone out (at most ``flush_seconds``)."""
        with self._guard:
            cache, recorder = self._cache, self._recorder
        if cache is not None:
            cache.stop()
        for dispatcher in self.dispatchers:
            dispatcher.timers.cancel_all()
        if recorder is not None:
            recorder.close(flush_seconds)

    # -- per-process singletons -----------------------------------------------------------------

    def metrics(self) -> Metrics:
        with self._guard:
            if self._metrics is None:
                from functions.runtime.metrics import Metrics
                self._metrics = Metrics()
            return self._metrics

    def gate(self) -> DeliveryGate:
        """Who may deliver (:mod:`functions.runtime.delivery_auth`), made on first use."""
        with self._guard:
            if self._gate is None:
                from functions.runtime.delivery_auth import DeliveryGate
                self._gate = DeliveryGate(self.function, self._delivery_settings, self.kube,
                                          self._observe_delivery)
            return self._gate

    def admit(self, authorization: str | None) -> Answer | None:
        return self.gate().admit(authorization)

    def _observe_delivery(self, reason: str) -> None:
        self.metrics().delivery_checked(self.function, reason)

    def kube(self) -> KubeClient:
        """The process's one API client, created on first use (after any fork)."""
        pid = os.getpid()
        with self._guard:
            if self._kube is None or self._kube_pid != pid:
                from functions.core.errors import TemporaryError
                try:
                    self._kube = self._kube_factory(self._observe_api_request)
                except Exception as exc:
                    raise TemporaryError(f"no Kubernetes API client: {exc}", 10.0) from exc
                self._kube_pid = pid
                self._recorder = None
            return self._kube

    def reader(self) -> Reader:
        """Where handlers read: the watch cache of this process's kinds in front of the API
        client (informers start here, in the background), or the client alone."""
        kube = self.kube()
        with self._guard:
            if self._reader is None or self._reader_kube is not kube:
                self._reader, self._reader_kube = kube, kube
                if self.cache_specs:
                    from functions.kube.cache import CachedReader, ObjectCache
                    if self._cache is not None:
                        self._cache.stop()
                    self._cache = ObjectCache(kube, self.cache_specs, on_gap=self._catch_up,
                                              sweep_every=sweep_seconds(), quiet=self.quiet,
                                              lag=self.delivery_lag)
                    for spec in self.cache_specs:
                        self._cache.informer(spec.resource)
                    self._reader = CachedReader(kube, self._cache)
                    from functions.runtime.metrics import cache_made
                    cache_made(self.function, self._cache, kube)
            return self._reader

    def cache(self) -> ObjectCache | None:
        """This process's watch cache, once made (``None`` with caching off)."""
        with self._guard:
            return self._cache

    def synced(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every watch cache of this process to fill."""
        self.reader()
        cache = self.cache()
        if cache is None:
            return True
        return cache.wait_synced([spec.resource for spec in self.cache_specs], timeout)

    def _catch_up(self, res: Resource, changed: list[Change]) -> None:
        """What changed around a reset of a cached resource's watch, or long enough ago with
        no event seen, which the event source's own watch may have missed
        (:mod:`functions.kube.gaps`): each function passes over it."""
        for dispatcher in self.dispatchers:
            dispatcher.catch_up(res, changed)

    def quiet(self) -> bool:
        """Whether no function of this process has had an event for a moment (a sweep of the
        journals waits for that, :mod:`functions.kube.gaps`, and so does a full garbage
        collection, :mod:`functions.runtime.collector`)."""
        from functions.kube.gaps import SWEEP_QUIET_SECONDS
        return all(d.quiet(SWEEP_QUIET_SECONDS) for d in self.dispatchers)

    def delivery_lag(self) -> float:
        """How far behind the watch this process's events have come lately (seconds): a
        catch-up holds back that much more (:class:`functions.kube.gaps.DeliveryLag`)."""
        return self._lag.recent() if self._lag is not None else 0.0

    def view(self, event: ApiEvent) -> tuple[bool, bool]:
        """How ``event``'s passes read, and whether it changed its object's status alone.

        ``fresh``: the watch cache has not caught up with ``event`` within a moment, so its
        passes read the API server. ``status_alone``: the cache has it as the watch's latest
        change of a parent, which touched the parent's status alone (the functions' own output,
        mostly); a function whose handlers do not read that status leaves it out
        (``Controller.status_inputs``), and then waits for no child's watch either."""
        if self._cache is None or event.object is None or event.ref is None:
            return False, False
        from functions.kube.resources import known
        from functions.kube.store import version_of
        res = known(event.ref.api_version, event.ref.kind)
        if res is None:
            return False, False
        if not self._cache.caught_up(res, event.object, CATCH_UP_SECONDS):
            return True, False
        alone = event.operation == "update" and self._cache.status_alone(res, event.object)
        if alone and not any(d.reads_status(event) for d in self.dispatchers):
            return False, True
        children = self._child_caches.get((res.group, res.kind), [])
        version = version_of(event.object)
        # A new parent has no children's changes behind it.
        return (bool(children) and event.operation != "add" and version is not None
                and not self._cache.reached(children, version, CHILD_BARRIER_SECONDS)), alone

    def recorder(self) -> EventRecorder:
        kube = self.kube()
        with self._guard:
            if self._recorder is None:
                from functions.runtime.recorder import EventRecorder
                self._recorder = EventRecorder(kube, f"odh-training-{self.function}",
                                               background=True, busy=self._busy,
                                               hold_seconds=event_hold())
            return self._recorder

    def _busy(self) -> bool:
        """Whether a pass is in flight or waiting: then this process's Events wait."""
        return any(len(dispatcher.runs) for dispatcher in self.dispatchers)

    def _observe_api_request(self, verb: str, code: int, seconds: float) -> None:
        self.metrics().api_request(verb, code, seconds)

    # -- events ---------------------------------------------------------------------------------

    def receive(self, headers: dict[str, str], body: bytes) -> Answer:
        from functions.core.errors import InvalidEventError
        from functions.core.events import parse_event
        from functions.runtime.outcomes import combine

        metrics = self.metrics()
        try:
            event = parse_event(headers, body, max_bytes=self.max_body_bytes)
        except InvalidEventError as exc:
            metrics.event(self.function, "", "", "invalid")
            log.info("rejected an event (%s): %s", exc.status, exc.reason)
            return problem_answer(exc.status, exc.reason)
        if event.time is not None and self._lag is not None:
            self._lag.observe(time.time() - event.time.timestamp())
        fresh, alone = self.view(event)
        outcome = combine([dispatcher.handle(event, fresh=fresh, status_alone=alone)
                           for dispatcher in self.dispatchers])
        kind = event.ref.kind if event.ref is not None else ""
        metrics.event(self.function, event.type, kind, outcome.kind)
        return outcome_answer(outcome)


def problem(status: int, detail: str, *, retry_after: float | None = None,
            title: str | None = None) -> Response:
    """An RFC 9457 problem document, as a Flask response."""
    code, headers, body = problem_answer(status, detail, retry_after=retry_after, title=title)
    return Response(body, status=code, headers=headers)


def read_body(limit: int) -> bytes | None:
    """The body of the current Flask request, or ``None`` when it is over ``limit`` (then
    left unread)."""
    return read_environ_body(request.environ, limit)


def create_app(function: str, *, controllers: Sequence[Controller] | None = None,
               kube_factory: KubeFactory | None = None, max_body_bytes: int | None = None,
               resync_workers: int = 4, warm_up: str = "background",
               delivery_auth: DeliverySettings | None = None) -> Flask:
    """The WSGI app of ``function`` (``reconcile``, ``gc``, ``status`` or ``all``).

    :param controllers: defaults to :func:`functions.runtime.registry.load_controllers`.
    :param kube_factory: builds the API client from a request hook (defaults to the
        kubeconfig / in-cluster configuration).
    :param warm_up: ``"background"`` (serve probes at once), ``"now"`` (block until loaded).
    :param delivery_auth: who may deliver (:mod:`functions.runtime.delivery_auth`); defaults
        to the environment's settings, on unless ``FUNCTIONS_DELIVERY_AUTH=none``.
    """
    runtime = FunctionRuntime(function, controllers, kube_factory, max_body_bytes,
                              resync_workers, delivery_auth)
    app = Flask(f"functions.{function}")
    app.extensions["functions.runtime"] = runtime

    endpoint = EventEndpoint(runtime, app.wsgi_app)

    @app.post("/")
    def receive_event() -> Response:
        """Reached only when the app is mounted without its WSGI endpoint in front (e.g.
        under a path prefix); the route also makes ``GET /`` a 405."""
        status, headers, body = endpoint.answer(request.environ)
        return Response(body, status=status, headers=headers)

    @app.get("/health/liveness")
    def liveness() -> Response:
        return Response("ok\n", mimetype="text/plain")

    @app.get("/health/readiness")
    def readiness() -> Response:
        not_ready = runtime.readiness()
        if not_ready is None:
            return Response("ready\n", mimetype="text/plain")
        return Response(f"{not_ready}\n", status=503, mimetype="text/plain")

    @app.get("/metrics")
    def metrics() -> Response:
        text, content_type = runtime.metrics().render()
        return Response(text, content_type=content_type)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        status = exc.code or 400
        return problem(status, exc.description or exc.name)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        log.exception("unexpected error while serving %s %s", request.method, request.path)
        return problem(503, f"internal error: {type(exc).__name__}", retry_after=30)

    # POST / (every event) bypasses Flask: see functions.runtime.endpoint.
    app.wsgi_app = endpoint  # type: ignore[method-assign]
    if warm_up == "now":
        runtime.warm_up()
    else:
        runtime.start_warm_up()
    return app


def runtime_of(app: Flask) -> FunctionRuntime:
    runtime: FunctionRuntime = app.extensions["functions.runtime"]
    return runtime
